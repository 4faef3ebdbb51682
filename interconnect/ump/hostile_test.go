package ump

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
)

// Attacks on the wake-up descriptors (docs/ump.md, "Wake-up sockets"): a
// peer that changes how the victim's descriptors behave, saturates them,
// or closes or swaps them must not make the victim block.

// hostilePair returns a ring pair whose creator is hostile: it kept
// duplicates of the attacher's (the victim's) wake-up sockets, which a
// creator that sends them can always do. The duplicates share the victim's
// open file descriptions, flags included.
func hostilePair(t *testing.T) (victim, hostile *Conn, copies []int) {
	t.Helper()
	o := &Options{RingSlots: 8, SpinWindow: -1}
	f, err := NewFiles(o)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := f.take(Attacher)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range theirs.Wake[Attacher] {
		d, err := dupFD(fd)
		if err != nil {
			t.Fatal(err)
		}
		copies = append(copies, d)
	}
	t.Cleanup(func() { closeFDs(copies...) })
	a, b, err := SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	if hostile, err = Open(Creator, f, a, o); err != nil {
		t.Fatal(err)
	}
	if victim, err = Open(Attacher, theirs, b, o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostile.Close(); victim.Close() })
	return victim, hostile, copies
}

// fill sends on fd until the socket's buffers are full.
func fill(t *testing.T, fd int) {
	t.Helper()
	buf := make([]byte, 4096)
	for {
		_, err := syscall.SendmsgN(fd, buf, nil, nil, syscall.MSG_DONTWAIT)
		if err == syscall.EAGAIN {
			return
		}
		if err != nil {
			t.Fatalf("fill: %v", err)
		}
	}
}

// setBlocking clears O_NONBLOCK on fd, as a peer sharing its open file
// description can.
func setBlocking(t *testing.T, fd int) {
	t.Helper()
	if err := syscall.SetNonblock(fd, false); err != nil {
		t.Fatal(err)
	}
}

// gcWithin checks that a garbage collection, which stops every goroutine,
// completes: a thread blocked in a system call while holding its P would
// keep it from ever starting.
func gcWithin(d time.Duration) error {
	done := make(chan struct{})
	go func() { runtime.GC(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("a garbage collection did not complete within %v: a thread holds its P", d)
	}
}

func TestHostileFlagsAndFullSockets(t *testing.T) {
	victim, hostile, copies := hostilePair(t)
	// Every descriptor of the victim the hostile side can reach goes
	// blocking, and every wake-up buffer fills, both ways: a signal that
	// honoured the descriptor's flags would block for good.
	for _, fd := range append(copies, hostile.txWake, hostile.rxWake) {
		setBlocking(t, fd)
		fill(t, fd)
	}
	// The hostile side announces that it sleeps waiting for data and for
	// space, so the victim's next send and receive signal it.
	*hostile.rx.waitp, *hostile.tx.waitp = 7, 9

	ctx := testkit.Context(t)
	err := testkit.Within(t, 2*time.Second, "the victim's sends, receive and close", func() error {
		for i := 0; ; i++ {
			sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err := victim.Send(sctx, []byte("ping"))
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				break // the ring is full: the hostile side never reads
			}
			if err != nil {
				return fmt.Errorf("send %d: %w", i, err)
			}
		}
		if err := gcWithin(time.Second); err != nil {
			return err
		}
		for range 2 {
			if err := hostile.Send(ctx, []byte("pong")); err != nil {
				return err
			}
		}
		// The victim takes a message, which publishes space and signals
		// the hostile producer's announcement, then waits (drains a
		// full socket) for one that never comes.
		if msg, err := victim.Receive(ctx); err != nil || string(msg) != "pong" {
			return fmt.Errorf("receive: %q, %v", msg, err)
		}
		if _, err := victim.Receive(ctx); err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := victim.Receive(rctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("receive on an empty ring: %v, want the deadline", err)
		}
		if err := gcWithin(time.Second); err != nil {
			return err
		}
		return victim.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHostileFlood: a peer writing to the victim's wake-up socket as fast
// as it can only wakes the victim's receiver, which still ends its wait
// at its deadline and still takes a real message.
func TestHostileFlood(t *testing.T) {
	victim, hostile, _ := hostilePair(t)
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		one := []byte{1}
		for {
			select {
			case <-stop:
				return
			default:
				syscall.SendmsgN(hostile.txWake, one, nil, nil, syscall.MSG_DONTWAIT)
			}
		}
	}()
	defer func() { close(stop); <-flooded }()
	ctx := testkit.Context(t)
	err := testkit.Within(t, 2*time.Second, "a receive under a flood of wake-ups", func() error {
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := victim.Receive(rctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("receive: %v, want the deadline", err)
		}
		go hostile.Send(ctx, []byte("real"))
		if msg, err := victim.Receive(ctx); err != nil || string(msg) != "real" {
			return fmt.Errorf("receive: %q, %v", msg, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestHostileStealsWakeups: a creator that reads the victim's wake-ups
// from its copies makes the victim miss them; the victim's waits still
// end at their deadlines, and its close does not hang.
func TestHostileStealsWakeups(t *testing.T) {
	victim, hostile, copies := hostilePair(t)
	ctx := testkit.Context(t)
	err := testkit.Within(t, 2*time.Second, "a receive whose wake-ups are stolen", func() error {
		var buf [64]byte
		for range 3 {
			wakeDrain(copies[wakeData], &buf)
			rctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
			_, err := victim.Receive(rctx)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			if err := hostile.Send(ctx, []byte("x")); err != nil {
				return err
			}
		}
		return victim.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWakeSocketEndIsPeerEnd: the peer's end of a wake-up socket closing
// ends a parked wait at once, as the liveness socket's end of file does,
// even while the liveness socket stays open.
func TestWakeSocketEndIsPeerEnd(t *testing.T) {
	for _, how := range []string{"close", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			victim, hostile, _ := hostilePair(t)
			ctx := testkit.Context(t)
			errc := make(chan error, 1)
			go func() {
				_, err := victim.Receive(ctx)
				errc <- err
			}()
			testkit.Eventually(t, "the receiver to park", func() bool { return atomic.LoadUint64(victim.rx.waitp) != 0 })
			if how == "close" {
				// Only the wake-up sockets: the liveness socket and the
				// memory stay.
				hostile.rxPark.f.Close()
				hostile.txPark.f.Close()
			} else {
				syscall.Shutdown(hostile.txWake, syscall.SHUT_WR)
			}
			select {
			case err := <-errc:
				if !errors.Is(err, ErrPeerDied) {
					t.Fatalf("receive: %v, want ErrPeerDied", err)
				}
			case <-time.After(time.Second):
				t.Fatal("the receiver did not see the peer's wake-up socket close")
			}
		})
	}
}

// TestHandshakeWakeDescriptors: an attacher refuses a hello whose wake-up
// descriptors are not two distinct Unix stream sockets of their own.
func TestHandshakeWakeDescriptors(t *testing.T) {
	efd := func(t *testing.T) int {
		fd, _, e := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
		if e != 0 {
			t.Fatal(e)
		}
		return int(fd)
	}
	pipeEnd := func(t *testing.T) int {
		var p [2]int
		if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		syscall.Close(p[1])
		return p[0]
	}
	dgram := func(t *testing.T) int {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Close(fds[1])
		return fds[0]
	}
	cases := []struct {
		name string
		wake func(t *testing.T, good [2]int, live int) [2]int // the two wake-up descriptors sent
	}{
		{"eventfd", func(t *testing.T, good [2]int, _ int) [2]int { return [2]int{efd(t), good[1]} }},
		{"pipe", func(t *testing.T, good [2]int, _ int) [2]int { return [2]int{good[0], pipeEnd(t)} }},
		{"datagram socket", func(t *testing.T, good [2]int, _ int) [2]int { return [2]int{dgram(t), good[1]} }},
		{"same socket twice", func(t *testing.T, good [2]int, _ int) [2]int { return [2]int{good[0], good[0]} }},
		{"liveness socket", func(t *testing.T, good [2]int, live int) [2]int { return [2]int{good[0], live} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewFiles(&Options{RingSlots: 8})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			a, b, err := SocketPair()
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			var live int
			if err := fstatConnFD(b, &live); err != nil {
				t.Fatal(err)
			}
			wake := tc.wake(t, f.Wake[Attacher], live)
			hello := make([]byte, helloSize)
			binary.LittleEndian.PutUint64(hello[0:], helloMagic)
			binary.LittleEndian.PutUint32(hello[8:], Version)
			binary.LittleEndian.PutUint32(hello[12:], helloFDs)
			if _, _, err := a.WriteMsgUnix(hello, syscall.UnixRights(f.Mem, wake[0], wake[1]), nil); err != nil {
				t.Fatal(err)
			}
			ctx := testkit.Context(t)
			c, err := Attach(ctx, b, nil)
			if err == nil {
				c.Close()
				t.Fatal("Attach accepted the descriptors")
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("Attach: %v, want ErrProtocol", err)
			}
			t.Log(err)
		})
	}
}

// fstatConnFD returns the descriptor number of a connection (valid while
// it is open).
func fstatConnFD(sc syscall.Conn, fd *int) error {
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(u uintptr) { *fd = int(u) })
}
