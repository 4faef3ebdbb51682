package ump

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
)

// attachChild starts a child in role and creates the connection to it.
func attachChild(t *testing.T, role, arg string, o *Options) (*child, *Conn) {
	t.Helper()
	ch := startChild(t, role, []string{arg})
	c, err := Create(testkit.Context(t), ch.sock, o)
	if err != nil {
		ch.Kill()
		t.Fatal(err)
	}
	return ch, c
}

// TestProcessEcho exchanges messages of every size with another process.
func TestProcessEcho(t *testing.T) {
	before := countResources(t)
	ch, c := attachChild(t, "echo", "", nil)
	ctx := testkit.Context(t)
	for i := range 3000 {
		n := i % 700
		if i%100 == 0 {
			n = (i * 977) % (DefaultMaxMessageSize + 1)
		}
		if err := c.Send(ctx, pattern(make([]byte, n), i)); err != nil {
			t.Fatal(err)
		}
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkPattern(m, i); err != nil || len(m) != n {
			t.Fatalf("%v (len %d, want %d)", err, len(m), n)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ch.wait(t)
	checkNoLeaks(t, before)
}

// TestProcessCloseThenExit: a peer that closes and exits at once is seen
// as closed, not dead, and everything it sent arrives first.
func TestProcessCloseThenExit(t *testing.T) {
	ch, c := attachChild(t, "send-close", "500", nil)
	defer c.Close()
	ch.wait(t) // the child is gone before we read anything
	ctx := testkit.Context(t)
	for i := range 500 {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if err := checkPattern(m, i); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Receive(ctx)
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("Receive = %v, want ErrClosed", err)
	}
	if err := c.Send(ctx, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send = %v, want ErrClosed", err)
	}
}

// TestKillMidWrite: the peer is SIGKILLed after writing part of a
// multi-slot message. The complete messages arrive, then ErrPeerDied; the
// partial one never does.
func TestKillMidWrite(t *testing.T) {
	before := countResources(t)
	ch, c := attachChild(t, "die-mid-write", "", nil)
	ch.Expect(t, "ready")
	ch.Kill()
	ctx := testkit.Context(t)
	for i := range 3 {
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if err := checkPattern(m, i); err != nil || len(m) != 100 {
			t.Fatalf("message %d: %v, len %d", i, err, len(m))
		}
	}
	start := time.Now()
	_, err := c.Receive(ctx)
	if !errors.Is(err, ErrPeerDied) {
		t.Fatalf("Receive = %v, want ErrPeerDied", err)
	}
	t.Logf("death reported %v after the receive started", time.Since(start))
	if err := c.Send(ctx, []byte("x")); !errors.Is(err, ErrPeerDied) {
		t.Fatalf("Send = %v, want ErrPeerDied", err)
	}
	if !errors.Is(c.Err(), ErrPeerDied) {
		t.Fatalf("Err = %v", c.Err())
	}
	c.Close()
	checkNoLeaks(t, before)
}

// TestKillWhileStreaming kills a peer that streams large messages at an
// arbitrary moment, while this side is receiving: every message received
// is whole, and the end is ErrPeerDied.
func TestKillWhileStreaming(t *testing.T) {
	ch, c := attachChild(t, "stream-forever", "", nil)
	defer c.Close()
	ch.Expect(t, "ready")
	ctx := testkit.Context(t)
	for i := 0; ; i++ {
		if i == 50 {
			go ch.Kill()
		}
		m, err := c.Receive(ctx)
		if err != nil {
			if !errors.Is(err, ErrPeerDied) {
				t.Fatalf("after %d messages: %v, want ErrPeerDied", i, err)
			}
			if i < 50 {
				t.Fatalf("died after %d messages", i)
			}
			return
		}
		if want := (i * 7919) % c.MaxMessageSize(); len(m) != want {
			t.Fatalf("message %d: %d bytes, want %d", i, len(m), want)
		}
		if err := checkPattern(m, i); err != nil {
			t.Fatal(err)
		}
	}
}

// TestScribbler: the peer writes random bytes all over the shared memory
// (header, control words, slots) and signals the wake-up sockets. The reader must
// neither crash nor hang, and the connection ends with ErrProtocol.
func TestScribbler(t *testing.T) {
	for _, tc := range []struct {
		size      int
		exclusive bool // SendExclusive and ReceiveExclusive, with their one-slot fast paths
	}{{0, false}, {100, false}, {200, false}, {8, true}, {100, true}} {
		t.Run(fmt.Sprintf("%d-exclusive-%v", tc.size, tc.exclusive), func(t *testing.T) {
			ch, c := attachChild(t, "scribble", "", nil)
			defer ch.Kill()
			defer c.Close()
			ch.Expect(t, "ready")
			ctx := testkit.Context(t)
			send, receive := c.Send, c.Receive
			if tc.exclusive {
				send, receive = c.SendExclusive, c.ReceiveExclusive
			}
			sendErr := make(chan error, 1)
			go func() {
				for {
					if err := send(ctx, make([]byte, tc.size)); err != nil {
						sendErr <- err
						return
					}
				}
			}()
			var err error
			for err == nil || errors.Is(err, context.DeadlineExceeded) {
				rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				_, err = receive(rctx)
				cancel()
				if ctx.Err() != nil {
					t.Fatal("no protocol violation detected")
				}
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Receive = %v, want ErrProtocol", err)
			}
			if !errors.Is(c.Err(), ErrProtocol) {
				t.Fatalf("Err = %v", c.Err())
			}
			if err := <-sendErr; !errors.Is(err, ErrProtocol) {
				t.Fatalf("Send = %v, want ErrProtocol", err)
			}
		})
	}
}
