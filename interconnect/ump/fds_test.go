package ump

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// A message carries descriptors: the receiver gets working duplicates,
// each message exactly its own, in order, whatever their counts; nothing
// leaks.
func TestFDsTravel(t *testing.T) {
	before := countResources(t)
	func() {
		a, b := pipe(t, &Options{MaxMessageSize: 4096})
		defer a.Close()
		defer b.Close()
		ctx := testkit.Context(t)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		wfd := int(w.Fd())
		// Messages with 0, 1, 2 and MaxFDs descriptors, interleaved.
		counts := []int{1, 0, 2, 1, MaxFDs, 0, 3}
		for i, n := range counts {
			fds := make([]int, n)
			for j := range fds {
				fds[j] = wfd
			}
			msg := []byte{byte(i), byte(n)}
			if err := a.SendFDs(ctx, msg, fds); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
		for i, n := range counts {
			m, err := b.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m[0] != byte(i) || int(m[1]) != n {
				t.Fatalf("message %d is %v", i, m)
			}
			fds, err := b.ReceiveFDs(int(m[1]))
			if err != nil || len(fds) != n {
				t.Fatalf("message %d: %d descriptors, %v; want %d", i, len(fds), err, n)
			}
			for j, fd := range fds {
				checkCloseOnExec(t, fd, "a received descriptor")
				if _, err := syscall.Write(fd, []byte{byte(i), byte(j)}); err != nil {
					t.Fatalf("write to received descriptor: %v", err)
				}
				var got [2]byte
				if _, err := io.ReadFull(r, got[:]); err != nil || got != [2]byte{byte(i), byte(j)} {
					t.Fatalf("read %v, %v", got, err)
				}
				syscall.Close(fd)
			}
		}
	}()
	checkNoLeaks(t, before)
}

// The peer's queue of descriptor records is bounded by the kernel: a
// sender that runs ahead waits (TrySendFDs reports no room, SendFDs waits
// until its context ends) and goes on once the receiver takes them; what
// is left in flight when the connection closes is closed with it.
func TestFDsInFlight(t *testing.T) {
	before := countResources(t)
	func() {
		a, b := pipe(t, &Options{MaxMessageSize: 4096, RingSlots: 1024})
		defer a.Close()
		defer b.Close()
		f, err := os.Open("/dev/null")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fd := int(f.Fd())
		sent := 0
		for ; sent < 10000; sent++ {
			ok, err := a.TrySendFDs([]byte{1}, []int{fd})
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
		}
		if sent == 10000 {
			t.Fatal("10000 messages with descriptors in flight, unbounded")
		}
		t.Logf("%d messages with descriptors in flight before the sender waits", sent)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := a.SendFDs(ctx, []byte{1}, []int{fd}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("SendFDs to a full queue = %v, want the deadline", err)
		}
		rctx := testkit.Context(t)
		m, err := b.Receive(rctx)
		if err != nil || len(m) != 1 {
			t.Fatal(m, err)
		}
		fds, err := b.ReceiveFDs(1)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Close(fds[0])
		if err := a.SendFDs(rctx, []byte{1}, []int{fd}); err != nil {
			t.Fatalf("SendFDs once there is room: %v", err)
		}
	}()
	checkNoLeaks(t, before)
}

// A peer that lies about descriptors ends the connection with
// ErrProtocol: a message that announces some and has no record, a record
// with another count, a record out of sequence.
func TestFDsLies(t *testing.T) {
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	record := func(seq, n uint32, fds ...int) func(a *Conn) error {
		return func(a *Conn) error {
			var rec [capsRecordSize]byte
			binary.LittleEndian.PutUint32(rec[0:], seq)
			binary.LittleEndian.PutUint32(rec[4:], n)
			return syscall.Sendmsg(a.capsFD, rec[:], syscall.UnixRights(fds...), nil, 0)
		}
	}
	fd := int(f.Fd())
	for name, lie := range map[string]func(a *Conn) error{
		"no record":         func(*Conn) error { return nil },
		"count differs":     record(1, 2, fd, fd),
		"count understated": record(1, 1, fd, fd),
		"out of sequence":   record(7, 1, fd),
		"no descriptors":    record(1, 1),
	} {
		t.Run(name, func(t *testing.T) {
			before := countResources(t)
			func() {
				a, b := pipe(t, &Options{MaxMessageSize: 4096})
				defer a.Close()
				defer b.Close()
				if err := lie(a); err != nil {
					t.Fatal(err)
				}
				ctx := testkit.Context(t)
				if err := a.Send(ctx, []byte{1}); err != nil {
					t.Fatal(err)
				}
				if _, err := b.Receive(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := b.ReceiveFDs(1); !errors.Is(err, ErrProtocol) {
					t.Fatalf("ReceiveFDs = %v, want ErrProtocol", err)
				}
				if _, err := b.Receive(ctx); !errors.Is(err, ErrProtocol) {
					t.Fatalf("the next Receive = %v, want ErrProtocol", err)
				}
			}()
			checkNoLeaks(t, before)
		})
	}
}

// checkCloseOnExec fails t unless fd is close-on-exec.
func checkCloseOnExec(t *testing.T, fd int, what string) {
	t.Helper()
	flags, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if e != 0 {
		t.Fatalf("%s: fcntl(F_GETFD): %v", what, e)
	}
	if flags&syscall.FD_CLOEXEC == 0 {
		t.Fatalf("%s (descriptor %d) is not close-on-exec", what, fd)
	}
}

// The descriptors of a ring pair, as the attacher receives them in the
// handshake or from an endpoint, are close-on-exec.
func TestReceivedRingDescriptorsCloseOnExec(t *testing.T) {
	_, b := pipe(t, nil)
	checkCloseOnExec(t, b.capsFD, "the attacher's caps socket")
	checkCloseOnExec(t, b.rxWake, "the attacher's space socket")
	u, ep, err := NewEndpoint(nil, []byte("label"))
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	v, _, err := OpenEndpoint(ep, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	checkCloseOnExec(t, v.capsFD, "an endpoint's caps socket")
	checkCloseOnExec(t, v.rxWake, "an endpoint's space socket")
}

// A frame's caps lend their descriptors to a send that has room, and are
// duplicated for one that must wait: closing a cap while its frame waits
// for room returns at once, and the frame carries the descriptor all the
// same once there is room.
func TestFrameCapsWhileTheRingIsFull(t *testing.T) {
	before := countResources(t)
	func() {
		a, b := pipe(t, &Options{MaxMessageSize: 4096, RingSlots: 1024})
		defer a.Close()
		defer b.Close()
		la, lb := NewLink(a), NewLink(b)
		ctx := testkit.Context(t)
		full := fillRing(t, a)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		frame := capFrame(t)
		sent := make(chan error, 1)
		go func() { sent <- la.SendFrame(ctx, frame, []wire.Cap{w}) }()
		// The send has its duplicate once it sleeps waiting for room.
		testkit.Eventually(t, "the send to wait for room", func() bool { return atomic.LoadUint64(a.tx.waitp) != 0 })
		closed := make(chan error, 1)
		go func() { closed <- w.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("closing a cap whose frame waits for room waited too")
		}
		for range full {
			if _, err := b.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-sent; err != nil {
			t.Fatalf("SendFrame once there is room: %v", err)
		}
		var in interconnect.Incoming
		if err := lb.Receive(ctx, &in); err != nil {
			t.Fatal(err)
		}
		if len(in.Caps) != 1 {
			t.Fatalf("the frame came with %d caps, want 1", len(in.Caps))
		}
		got := in.Caps[0].(*os.File)
		if _, err := got.Write([]byte{7}); err != nil {
			t.Fatalf("write to the received pipe: %v", err)
		}
		got.Close()
		var one [1]byte
		if _, err := io.ReadFull(r, one[:]); err != nil || one[0] != 7 {
			t.Fatalf("read %v, %v", one, err)
		}
	}()
	checkNoLeaks(t, before)
}

// The send that caps lend their descriptors to waits for nothing, not
// even for another goroutine's send, which holds the ring while it waits
// for room: it reports that it did not send, and SendFrame then sends
// with duplicates.
func TestLentCapsWaitForNoOtherSend(t *testing.T) {
	a, _ := pipe(t, &Options{MaxMessageSize: 4096, RingSlots: 1024})
	la := NewLink(a)
	fillRing(t, a)
	ctx, cancel := context.WithCancel(testkit.Context(t))
	waiting := make(chan error, 1)
	go func() { waiting <- a.Send(ctx, []byte{1}) }()
	testkit.Eventually(t, "the other send to wait for room", func() bool { return atomic.LoadUint64(a.tx.waitp) != 0 })
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type result struct {
		sent bool
		err  error
	}
	now := make(chan result, 1)
	go func() {
		sent, err := la.sendNow(capFrame(t), []wire.Cap{f})
		now <- result{sent, err}
	}()
	select {
	case r := <-now:
		if r.sent || r.err != nil {
			t.Fatalf("sendNow behind a waiting send = %v, %v; want false, nil", r.sent, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sendNow waited for another goroutine's send")
	}
	cancel()
	if err := <-waiting; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiting send = %v, want its context's end", err)
	}
}

// fillRing sends 1-byte messages on a until its ring has no room, and
// returns how many it sent.
func fillRing(t *testing.T, a *Conn) int {
	t.Helper()
	for n := 0; n < 100000; n++ {
		ok, err := a.TrySend([]byte{0})
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return n
		}
	}
	t.Fatal("the ring never filled")
	return 0
}

// capFrame returns a chanos frame that announces one capability.
func capFrame(t *testing.T) []byte {
	t.Helper()
	var b wire.Buffer
	wire.AppendFixed(&b, 1, wire.KindMessage, 8)
	frame := b.B
	frame[7] = 1 // ncaps
	return frame
}

// A peer that sends a message with descriptors and closes while a record
// of ours waits unread on its side: the kernel reports the reset of the
// descriptors' socket before the peer's record, which the receiver still
// takes.
func TestFDsFromAPeerThatClosedWithOursUnread(t *testing.T) {
	a, b := pipe(t, &Options{MaxMessageSize: 4096})
	defer b.Close()
	ctx := testkit.Context(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := b.SendFDs(ctx, []byte{1}, []int{int(w.Fd())}); err != nil {
		t.Fatal(err)
	}
	if err := a.SendFDs(ctx, []byte{2}, []int{int(r.Fd())}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	m, err := b.Receive(ctx)
	if err != nil || len(m) != 1 || m[0] != 2 {
		t.Fatalf("Receive = %v, %v; want the peer's last message", m, err)
	}
	fds, err := b.ReceiveFDs(1)
	if err != nil || len(fds) != 1 {
		t.Fatalf("ReceiveFDs = %v, %v; want the descriptor the peer sent", fds, err)
	}
	syscall.Close(fds[0])
}
