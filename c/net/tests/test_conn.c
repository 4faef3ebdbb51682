/*
 * test_conn.c: generated C stubs (interfaces/pingpong.if) over a net
 * link: a chanos connection on each end (chanos_net_conn_new), the server
 * served by pingpong_serve in a thread; messages, rpcs and a 64 KiB
 * payload, then the client's close ends the serving with 0.
 */
#include "check.h"

#include <chanos_net.h>
#include <pingpong.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static int on_ping(void *ctx, chanos_conn *c, const struct pingpong_ping *m)
{
    struct pingpong_pong p = {m->client_id, m->msg_id};
    (void)ctx;
    return pingpong_pong_send(c, &p, -1);
}

static int on_echo(void *ctx, chanos_conn *c, const struct pingpong_echo_call *in,
                   struct pingpong_echo_reply *out)
{
    (void)ctx;
    (void)c;
    out->result = in->val;
    return 0;
}

static int on_bounce(void *ctx, chanos_conn *c,
                     const struct pingpong_bounce_call *in,
                     struct pingpong_bounce_reply *out)
{
    (void)ctx;
    (void)c;
    out->reply = in->payload;
    return 0;
}

static const struct pingpong_server_ops ops = {
    .ping = on_ping, .echo = on_echo, .bounce = on_bounce,
};

struct server {
    chanos_net_listener *L;
    int rc;
};

static void *serve_main(void *arg)
{
    struct server *s = arg;
    chanos_net_link *l;
    s->rc = chanos_net_accept(s->L, 10000, &l);
    if (s->rc != 0)
        return NULL;
    chanos_conn *c;
    s->rc = chanos_net_conn_new(l, &c);
    if (s->rc != 0)
        return NULL;
    s->rc = pingpong_serve(c, &ops, NULL, 30000);
    chanos_conn_close(c);
    return NULL;
}

int main(void)
{
    struct server s = {0};
    CHECK_EQ(chanos_net_listen("127.0.0.1:0", NULL, &s.L), 0);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", chanos_net_listener_port(s.L));
    pthread_t t;
    pthread_create(&t, NULL, serve_main, &s);
    chanos_net_link *l = NULL;
    chanos_conn *c = NULL;
    CHECK_EQ(chanos_net_dial(addr, NULL, &l), 0);
    CHECK_EQ(chanos_net_conn_new(l, &c), 0);
    if (c) {
        CHECK(chanos_conn_ump(c) == NULL);
        CHECK_EQ(chanos_conn_peer_gone(c), 0);
        for (uint32_t i = 0; i < 200; i++) {
            struct pingpong_ping p = {7, i};
            CHECK_EQ(pingpong_ping_send(c, &p, 5000), 0);
            struct chanos_frame f;
            CHECK_EQ(chanos_conn_recv(c, 5000, &f), 0);
            struct pingpong_pong q;
            CHECK_EQ(pingpong_pong_decode(&q, f.data, f.len, NULL, 0), 0);
            CHECK_EQ(q.msg_id, i);
        }
        for (uint64_t i = 0; i < 500; i++) {
            struct pingpong_echo_call in = {i};
            struct pingpong_echo_reply out;
            CHECK_EQ(pingpong_echo(c, &in, &out, 5000), 0);
            CHECK_EQ(out.result, i);
        }
        static uint8_t payload[65536];
        for (size_t i = 0; i < sizeof payload; i++)
            payload[i] = (uint8_t)(i * 13);
        struct pingpong_bounce_call in = {{payload, sizeof payload}};
        struct pingpong_bounce_reply out;
        CHECK_EQ(pingpong_bounce(c, &in, &out, 5000), 0);
        CHECK(out.reply.len == sizeof payload &&
              memcmp(out.reply.ptr, payload, sizeof payload) == 0);
    }
    chanos_conn_close(c);
    pthread_join(t, NULL);
    CHECK_EQ(s.rc, 0);
    chanos_net_listener_close(s.L);
    return check_done("test_conn");
}
