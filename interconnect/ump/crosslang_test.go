package ump

import (
	"bytes"
	"errors"
	"strconv"
	"testing"

	"github.com/chanos/chanos/internal/testkit"
)

// The message sequence of the cross-language exchange; c/tools/exchange.h
// generates the same one.

func xmix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

var xfixed = []int{0, 1, 7, 8, 55, 56, 57, 63, 64, 111, 112, 113, 447, 448, 449, 1000, 4095, 4096}

func xsize(i uint64, dir int, max int) int {
	n := uint64(len(xfixed))
	switch {
	case i < n:
		return min(xfixed[i], max)
	case i == n:
		return max - 1
	case i == n+1:
		return max
	}
	h := xmix(i*2 + uint64(dir))
	if i%4 == 0 {
		return int(h % uint64(max+1))
	}
	return int(h % 200)
}

func xmsg(i uint64, dir int, max int) []byte {
	b := make([]byte, xsize(i, dir, max))
	h := xmix(i*2 + uint64(dir))
	for j := range b {
		b[j] = byte(h>>((j&7)*8)) + byte(j>>3)
	}
	return b
}

// TestCrossLanguage exchanges a long sequence of messages of every size in
// both directions at once with the C peer (c/tools/ump_peer.c), once with
// Go creating the ring pair and once with C creating it, for each of three
// layouts: the defaults (a bulk region for messages over BulkMin), a
// 16-slot ring with a bulk region of one maximum message (most messages
// could not fit in the slots, and the region wraps all the time), and no
// bulk region.
func TestCrossLanguage(t *testing.T) {
	peer := cPeer(t)
	const count, max = 4000, 65536
	layouts := []struct {
		name        string
		slots, bulk int
	}{{"default", 0, 0}, {"small-ring", 16, max}, {"no-bulk", 0, -1}}
	for _, l := range layouts {
		for _, goSide := range []Side{Creator, Attacher} {
			name, cSide := l.name+"/go-creates", "attacher"
			if goSide == Attacher {
				name, cSide = l.name+"/c-creates", "creator"
			}
			t.Run(name, func(t *testing.T) {
				crossExchange(t, peer, goSide, cSide, count, max, l.slots, l.bulk)
			})
		}
	}
}

// crossExchange runs one exchange of TestCrossLanguage; slots and bulk are
// the creator's RingSlots and BulkSize.
func crossExchange(t *testing.T, peer string, goSide Side, cSide string, count uint64, max, slots, bulk int) {
	before := countResources(t)
	ch := startChild(t, "", nil, peer, "exchange", cSide, strconv.FormatUint(count, 10), strconv.Itoa(max),
		strconv.Itoa(slots), strconv.Itoa(bulk))
	ctx := testkit.Context(t)
	var c *Conn
	var err error
	o := &Options{MaxMessageSize: max, RingSlots: slots, BulkSize: bulk}
	if goSide == Creator {
		c, err = Create(ctx, ch.sock, o)
	} else {
		c, err = Attach(ctx, ch.sock, o)
	}
	if err != nil {
		ch.Kill()
		t.Fatal(err)
	}
	out, in := int(goSide), 1-int(goSide)
	sent := make(chan error, 1)
	go func() {
		for i := range count {
			if err := c.Send(ctx, xmsg(i, out, max)); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	for i := range count {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if want := xmsg(i, in, max); !bytes.Equal(m, want) {
			t.Fatalf("message %d: %d bytes, want %d, content differs", i, len(m), len(want))
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if goSide == Attacher {
		if _, err := c.Receive(ctx); !errors.Is(err, ErrClosed) {
			t.Fatalf("Receive after the creator's close = %v, want ErrClosed", err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ch.wait(t)
	checkNoLeaks(t, before)
}

// TestCrossLanguageKill: the C peer is killed while echoing; Go sees
// ErrPeerDied.
func TestCrossLanguageKill(t *testing.T) {
	peer := cPeer(t)
	ch := startChild(t, "", nil, peer, "echo", "attacher", "4096")
	ctx := testkit.Context(t)
	c, err := Create(ctx, ch.sock, &Options{MaxMessageSize: 4096})
	if err != nil {
		ch.Kill()
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(ctx, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Receive(ctx); err != nil || string(m) != "ping" {
		t.Fatalf("echo = %q, %v", m, err)
	}
	ch.Kill()
	if _, err := c.Receive(ctx); !errors.Is(err, ErrPeerDied) {
		t.Fatalf("Receive = %v, want ErrPeerDied", err)
	}
}
