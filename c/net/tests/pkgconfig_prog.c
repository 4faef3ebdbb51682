/*
 * pkgconfig_prog.c: a program built out of tree with nothing but
 * `pkg-config --cflags --libs chanos-net` (pkgconfig_test.sh): one frame
 * over a TLS link between two links of this process.
 */
#include <chanos_net.h>

#include <stdio.h>
#include <string.h>

static chanos_net_identity *srv;

static const chanos_net_identity *pick(void *arg, const char *name)
{
    (void)arg;
    (void)name;
    return srv;
}

static uint8_t want[CHANOS_NET_FP_SIZE];

static bool admit(void *arg, const char *name, const uint8_t fp[CHANOS_NET_FP_SIZE])
{
    (void)arg;
    (void)name;
    return memcmp(fp, want, sizeof want) == 0;
}

int main(void)
{
    chanos_net_identity *cli;
    uint8_t sfp[CHANOS_NET_FP_SIZE];
    if (chanos_net_identity_new(&srv, sfp) || chanos_net_identity_new(&cli, want))
        return 1;
    struct chanos_net_tls st = {.identity_for = pick, .admit = admit};
    struct chanos_net_options so = {.tls = &st};
    struct chanos_net_tls ct = {.identity = cli};
    memcpy(ct.peer, sfp, sizeof sfp);
    struct chanos_net_options co = {.tls = &ct};
    chanos_net_listener *L;
    chanos_net_link *a, *b;
    char addr[64];
    if (chanos_net_listen("127.0.0.1:0", &so, &L))
        return 1;
    snprintf(addr, sizeof addr, "127.0.0.1:%d", chanos_net_listener_port(L));
    int r = chanos_net_dial(addr, &co, &a);
    if (r || chanos_net_accept(L, 5000, &b)) {
        fprintf(stderr, "dial: %s\n", chanos_net_strerror(r));
        return 1;
    }
    uint8_t frame[CHANOS_HEADER_SIZE] = {CHANOS_HEADER_SIZE, 0, 0, 0, 1};
    const void *got;
    size_t n;
    if (chanos_net_send(a, frame, sizeof frame, 5000) ||
        chanos_net_recv(b, &got, &n, 5000) || n != sizeof frame)
        return 1;
    chanos_net_close(a);
    chanos_net_close(b);
    chanos_net_listener_close(L);
    chanos_net_identity_free(srv);
    chanos_net_identity_free(cli);
    printf("one frame over TLS\n");
    return 0;
}
