package net_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/netns"

	stdnet "net"
)

// Between two machines (network namespaces on a bridge), a connection
// streams both ways while one machine is cut off the bridge and restored:
// no reset reaches either side, the keepalives notice the silence, the
// dialing side redials once the machine is back, and every frame arrives
// once, in order.
func TestBetweenMachinesAcrossACut(t *testing.T) {
	testkit.NoLeaks(t)
	cluster := netns.New(t, 2)
	m1, m2 := cluster.Machines[0], cluster.Machines[1]
	ctx := testkit.Context(t)
	var dials atomic.Int64
	o := &cnet.Options{
		KeepAlive: 50 * time.Millisecond, DeadAfter: 300 * time.Millisecond, HandshakeTimeout: 300 * time.Millisecond,
		RedialMin: 10 * time.Millisecond, RedialMax: 50 * time.Millisecond,
		Dial: func(ctx context.Context, addr string) (stdnet.Conn, error) {
			dials.Add(1)
			return m1.Dial(ctx, "tcp", addr)
		},
	}
	ln, err := m2.Listen(ctx, "tcp", netip.AddrPortFrom(m2.Addr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	L := cnet.Listen(ln, o)
	t.Cleanup(func() { L.Close() })
	// A bridge just built may take a moment, on a loaded machine, to carry
	// the first packets (neighbour discovery): longer than the short
	// handshake timeout this test gives its resumes.
	testkit.Eventually(t, "machine 2 reachable from machine 1", func() bool {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, err := m1.Dial(dctx, "tcp", netip.AddrPortFrom(m2.Addr, 9).String())
		if c != nil {
			c.Close()
		}
		// Refused is an answer: the path carries.
		return err == nil || errors.Is(err, syscall.ECONNREFUSED)
	})
	cl, sl := connect(t, L, ln.Addr().String(), o)

	// The cut comes first, so that the stream (more than a window) can
	// complete only across it.
	if err := m2.Cut(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Restored once the link has taken its connection for broken
		// (a cut resets nothing) and redials.
		for dials.Load() < 2 {
			time.Sleep(10 * time.Millisecond)
		}
		if err := m2.Restore(ctx); err != nil {
			t.Error(err)
		}
	}()
	streamBothWays(t, cl, sl, 3000, 4000)
	wg.Wait()
	t.Logf("resumed %d times", cl.Resumes())
	if cl.Resumes() == 0 {
		t.Errorf("the stream went on across the cut without a resume")
	}
}
