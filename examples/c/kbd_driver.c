/*
 * kbd_driver: the C keyboard driver of seed 002's driver experiment
 * (docs/benchmarks.md, "The driver experiment"); examples/driver/gokbd is
 * the same driver in Go. Descriptor 3 is the endpoint of its keyboard
 * connection (examples/driver/keyboard.if), made by its client. The
 * client attaches the device: its register page (a memfd) and its
 * interrupt (an event object). The driver waits on the interrupt, parked
 * or polling, reads the scancodes from the registers, decodes scancode
 * set 2 and sends a key event for each key, until the device is removed.
 *
 * Exit status 0 once the device is removed; 1 on failure, with the reason
 * on stderr.
 */
#include "keyboard.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The device's registers (examples/driver/device). */
enum {
    REG_HEAD = 0x00,   /* uint32: scancode bytes produced so far */
    REG_STATUS = 0x04, /* uint32: bit 0 set once the device is removed */
    REG_TAIL = 0x08,   /* uint32: scancode bytes consumed so far (ours) */
    REG_FIFO = 0x40,   /* 64 entries of 16 bytes: uint64 stamp, uint8 code */
    FIFO_LEN = 64,
    ENTRY_SIZE = 16,
    REGS_SIZE = 4096,
    STATUS_GONE = 1,
    SEND_MS = 10000,
};

/* Scancode set 2 to Linux input key codes (linux/input-event-codes.h):
 * the one-byte make codes, and those after 0xE0. */
static const uint16_t set2[256] = {
    [0x76] = 1, /* Esc */
    [0x16] = 2, [0x1E] = 3, [0x26] = 4, [0x25] = 5, [0x2E] = 6, /* 1 … 5 */
    [0x36] = 7, [0x3D] = 8, [0x3E] = 9, [0x46] = 10, [0x45] = 11, /* 6 … 0 */
    [0x4E] = 12, [0x55] = 13, [0x66] = 14, [0x0D] = 15, /* - = Backspace Tab */
    [0x15] = 16, [0x1D] = 17, [0x24] = 18, [0x2D] = 19, [0x2C] = 20, /* Q … T */
    [0x35] = 21, [0x3C] = 22, [0x43] = 23, [0x44] = 24, [0x4D] = 25, /* Y … P */
    [0x54] = 26, [0x5B] = 27, [0x5A] = 28, [0x14] = 29, /* [ ] Enter LeftCtrl */
    [0x1C] = 30, [0x1B] = 31, [0x23] = 32, [0x2B] = 33, [0x34] = 34, /* A … G */
    [0x33] = 35, [0x3B] = 36, [0x42] = 37, [0x4B] = 38, /* H … L */
    [0x4C] = 39, [0x52] = 40, [0x0E] = 41, [0x12] = 42, [0x5D] = 43, /* ; ' ` LeftShift \ */
    [0x1A] = 44, [0x22] = 45, [0x21] = 46, [0x2A] = 47, /* Z … V */
    [0x32] = 48, [0x31] = 49, [0x3A] = 50, /* B N M */
    [0x41] = 51, [0x49] = 52, [0x4A] = 53, [0x59] = 54, /* , . / RightShift */
    [0x11] = 56, [0x29] = 57, [0x58] = 58, /* LeftAlt Space CapsLock */
    [0x05] = 59, [0x06] = 60, [0x04] = 61, [0x0C] = 62, [0x03] = 63, /* F1 … F5 */
    [0x0B] = 64, [0x83] = 65, [0x0A] = 66, [0x01] = 67, [0x09] = 68, /* F6 … F10 */
    [0x78] = 87, [0x07] = 88, /* F11 F12 */
};
static const uint16_t set2_e0[256] = {
    [0x14] = 97, [0x11] = 100, [0x1F] = 125, /* RightCtrl RightAlt LeftMeta */
    [0x6C] = 102, [0x75] = 103, [0x7D] = 104, [0x6B] = 105, /* Home Up PageUp Left */
    [0x74] = 106, [0x69] = 107, [0x72] = 108, [0x7A] = 109, /* Right End Down PageDown */
    [0x70] = 110, [0x71] = 111, /* Insert Delete */
};

/* The decoder's state between bytes. */
struct decoder {
    bool extended, release;
};

/* decode takes the next byte; it returns 1 and fills *k when the byte
 * completes a key, 0 for a prefix or a code no key has (dropped). */
static int decode(struct decoder *d, uint8_t b, struct keyboard_key *k)
{
    if (b == 0xE0) {
        d->extended = true;
        return 0;
    }
    if (b == 0xF0) {
        d->release = true;
        return 0;
    }
    k->code = d->extended ? set2_e0[b] : set2[b];
    k->pressed = !d->release;
    d->extended = d->release = false;
    return k->code != 0;
}

/* The device the client attaches. */
struct device {
    uint8_t *regs;
    int irq;
    bool spin;
};

static int on_attach(void *ctx, chanos_conn *c,
                     const struct keyboard_attach_call *in,
                     struct keyboard_attach_reply *out)
{
    struct device *d = ctx;
    void *regs = mmap(NULL, REGS_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, in->regs, 0);

    (void)c;
    (void)out;
    close(in->regs); /* the mapping keeps the page */
    if (regs == MAP_FAILED || d->regs != NULL) {
        if (regs != MAP_FAILED)
            munmap(regs, REGS_SIZE);
        close(in->irq);
        return CHANOS_CODE_INVALID_ARGUMENT;
    }
    d->regs = regs;
    d->irq = in->irq;
    d->spin = in->spin;
    return 0;
}

static const struct keyboard_server_ops ops = { .attach = on_attach };

/* wait_irq waits for the next interrupt: asleep in the kernel, or
 * polling the event object. */
static int wait_irq(const struct device *d)
{
    uint64_t n;
    int rc;

    do
        rc = chanos_event_wait(d->irq, d->spin ? 0 : -1, &n);
    while (rc == CHANOS_ERR_AGAIN);
    return rc;
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "kbd_driver: %s: %s (%d)\n", what, chanos_strerror(rc), rc);
    return 1;
}

int main(void)
{
    struct device d = { .regs = NULL, .irq = -1 };
    struct decoder dec = { false, false };
    struct chanos_frame f;
    struct keyboard_key k;
    struct keyboard_gone gone = { 0 };
    chanos_conn *c;
    uint32_t tail = 0, head, gone_now;
    int rc;

    if ((rc = chanos_endpoint_open(3, &keyboard_interface, &c)) != 0)
        return fail("open the endpoint", rc);
    while (d.regs == NULL) {
        if ((rc = chanos_conn_recv(c, SEND_MS, &f)) != 0)
            return fail("wait for the device", rc);
        if ((rc = keyboard_dispatch(c, &f, &ops, &d)) != 0)
            return fail("attach", rc);
    }
    _Atomic uint32_t *headp = (_Atomic uint32_t *)(d.regs + REG_HEAD);
    _Atomic uint32_t *status = (_Atomic uint32_t *)(d.regs + REG_STATUS);
    _Atomic uint32_t *tailp = (_Atomic uint32_t *)(d.regs + REG_TAIL);
    for (;;) {
        if ((rc = wait_irq(&d)) != 0)
            return fail("interrupt", rc);
        /* the status before the head: once the device is removed, the
         * head read after it is its last */
        gone_now = atomic_load_explicit(status, memory_order_acquire) & STATUS_GONE;
        head = atomic_load_explicit(headp, memory_order_acquire);
        for (; tail != head; tail++) {
            const uint8_t *e = d.regs + REG_FIFO + ENTRY_SIZE * (tail % FIFO_LEN);
            if (!decode(&dec, e[8], &k))
                continue;
            memcpy(&k.stamp, e, sizeof k.stamp); /* little-endian, as the device */
            if ((rc = keyboard_key_send(c, &k, SEND_MS)) != 0)
                return fail("send a key", rc);
        }
        /* room in the FIFO again */
        atomic_store_explicit(tailp, tail, memory_order_release);
        if (gone_now)
            break;
    }
    rc = keyboard_gone_send(c, &gone, SEND_MS);
    munmap(d.regs, REGS_SIZE);
    close(d.irq);
    chanos_conn_close(c);
    return rc != 0 ? fail("send gone", rc) : 0;
}
