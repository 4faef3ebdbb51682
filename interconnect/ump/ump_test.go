package ump

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/chanos/chanos/internal/testkit"
)

func pipe(t *testing.T, o *Options) (*Conn, *Conn) {
	t.Helper()
	a, b, err := Pipe(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestSizes sends every size around the slot boundaries and up to the
// maximum, both ways, and checks content and order.
func TestSizes(t *testing.T) {
	const max = 4096
	a, b := pipe(t, &Options{MaxMessageSize: max, RingSlots: 256})
	ctx := testkit.Context(t)
	var sizes []int
	for n := 0; n <= 4*SlotPayload+1; n++ {
		sizes = append(sizes, n)
	}
	sizes = append(sizes, 1000, max-SlotPayload-1, max-1, max)
	for _, dir := range [][2]*Conn{{a, b}, {b, a}} {
		// Several messages in flight, to cross the ring's wrap-around.
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 20 {
				for i, n := range sizes {
					if err := dir[0].Send(ctx, pattern(make([]byte, n), round*1000+i)); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
		for round := range 20 {
			for i, n := range sizes {
				m, err := dir[1].Receive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(m) != n {
					t.Fatalf("round %d message %d: %d bytes, want %d", round, i, len(m), n)
				}
				if err := checkPattern(m, round*1000+i); err != nil {
					t.Fatal(err)
				}
			}
		}
		wg.Wait()
	}
}

func TestTooLarge(t *testing.T) {
	a, b := pipe(t, &Options{MaxMessageSize: 1000})
	ctx := testkit.Context(t)
	if err := a.Send(ctx, make([]byte, 1001)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Send(1001 bytes) = %v, want ErrTooLarge", err)
	}
	if err := a.Send(ctx, make([]byte, 1000)); err != nil {
		t.Fatalf("the connection must stay usable: %v", err)
	}
	if m, err := b.Receive(ctx); err != nil || len(m) != 1000 {
		t.Fatalf("Receive = %d bytes, %v", len(m), err)
	}
	if a.MaxMessageSize() != 1000 || b.MaxMessageSize() != 1000 {
		t.Fatalf("MaxMessageSize = %d, %d", a.MaxMessageSize(), b.MaxMessageSize())
	}
	// An attacher refuses a ring pair with a larger maximum than its own.
	x, y, err := SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := Create(ctx, x, &Options{MaxMessageSize: 2000})
		if err == nil {
			c.Close()
		}
	}()
	if c, err := Attach(ctx, y, &Options{MaxMessageSize: 1000}); err == nil {
		c.Close()
		t.Fatal("Attach accepted a ring pair over its maximum")
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []*Options{
		{MaxMessageSize: -1},
		{MaxMessageSize: MaxMessageLimit + 1},
		{RingSlots: 1000},
		{RingSlots: 1},
		{MaxMessageSize: 1000, RingSlots: 8, BulkSize: -1},
		{MaxMessageSize: 1000, RingSlots: 4},              // a 448-byte message takes 8 slots
		{MaxMessageSize: 1000, BulkSize: 512},             // below the minimum
		{MaxMessageSize: 10000, BulkSize: 8192},           // smaller than a message
		{MaxMessageSize: 1000, BulkSize: 5000},            // not a power of two
		{MaxMessageSize: 1000, BulkSize: MaxBulkSize * 2}, // too large
	} {
		if f, err := NewFiles(o); err == nil {
			f.Close()
			t.Errorf("NewFiles(%+v) succeeded", *o)
		}
	}
}

// TestFullRing fills a small ring: Send blocks until the context expires,
// writing nothing, and a blocked Send proceeds once the receiver reads.
func TestFullRing(t *testing.T) {
	a, b := pipe(t, &Options{MaxMessageSize: 200, RingSlots: 16, SpinWindow: time.Microsecond})
	ctx := testkit.Context(t)
	n := 0
	for ; ; n++ {
		sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		err := a.Send(sctx, pattern(make([]byte, 100), n))
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if n != 16/2 { // 100 bytes take 2 slots
		t.Fatalf("%d messages fit in 16 slots, want 8", n)
	}
	// A Send into the full ring goes to sleep until there is room.
	sleeping, park := holdBeforePark(t, a, true)
	sent := make(chan error, 1)
	go func() { sent <- a.Send(ctx, pattern(make([]byte, 100), n)) }()
	testkit.Await(t, "the Send into a full ring to go to sleep", sleeping)
	park()
	for i := 0; i <= n; i++ {
		m, err := b.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkPattern(m, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	// A cancelled context ends a blocked Send too.
	for i := 0; i < n; i++ {
		if err := a.Send(ctx, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
	}
	wctx := testkit.NewWaitContext()
	go func() { sent <- a.Send(wctx, make([]byte, 100)) }()
	wctx.Waiting(t)
	wctx.Cancel()
	if err := <-sent; !errors.Is(err, context.Canceled) {
		t.Fatalf("Send = %v, want context.Canceled", err)
	}
}

// TestTrySend fills a ring with TrySend, which refuses the message that
// does not fit without writing any of it, and succeeds again once the
// consumer makes room.
func TestTrySend(t *testing.T) {
	a, b := pipe(t, &Options{MaxMessageSize: 200, RingSlots: 16})
	ctx := testkit.Context(t)
	n := 0
	for ; ; n++ {
		ok, err := a.TrySend(pattern(make([]byte, 100), n))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
	}
	if n != 16/2 { // 100 bytes take 2 slots
		t.Fatalf("%d messages fit in 16 slots, want 8", n)
	}
	if ok, err := a.TrySend(make([]byte, 201)); ok || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("TrySend of 201 bytes = %v, %v; want ErrTooLarge", ok, err)
	}
	m, err := b.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPattern(m, 0); err != nil {
		t.Fatal(err)
	}
	// The consumer publishes its position when it next waits or reads.
	if _, err := b.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	b.rmu.Lock()
	b.rxPublish(true)
	b.rmu.Unlock()
	if ok, err := a.TrySend(pattern(make([]byte, 100), n)); !ok || err != nil {
		t.Fatalf("TrySend after the consumer made room = %v, %v", ok, err)
	}
	for i := 2; i <= n; i++ {
		m, err := b.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkPattern(m, i); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	if ok, err := a.TrySend([]byte("x")); ok || !errors.Is(err, ErrClosed) {
		t.Fatalf("TrySend to a closed peer = %v, %v; want ErrClosed", ok, err)
	}
}

func TestReceiveContext(t *testing.T) {
	a, b := pipe(t, nil)
	ctx := testkit.Context(t)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := b.Receive(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive = %v, want DeadlineExceeded", err)
	}
	wctx := testkit.NewWaitContext()
	got := make(chan error, 1)
	go func() { _, err := b.Receive(wctx); got <- err }()
	wctx.Waiting(t)
	wctx.Cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive = %v, want Canceled", err)
	}
	// The deadline left on the wake-up socket must not affect later calls: a
	// receive that goes to sleep is woken by the message, not the deadline.
	sleeping, park := holdBeforePark(t, b, false)
	received := make(chan error, 1)
	go func() {
		m, err := b.Receive(ctx)
		if err == nil && string(m) != "late" {
			err = fmt.Errorf("got %q", m)
		}
		received <- err
	}()
	testkit.Await(t, "the receiver to go to sleep", sleeping)
	if err := a.Send(ctx, []byte("late")); err != nil {
		t.Fatal(err)
	}
	park()
	if err := <-received; err != nil {
		t.Fatalf("Receive after the context errors: %v", err)
	}
	if b.Err() != nil {
		t.Fatalf("Err = %v after context errors, want nil", b.Err())
	}
}

// TestParkedPingPong runs both sides with no spinning, so every message
// goes through the wake-up sockets.
func TestParkedPingPong(t *testing.T) {
	a, b := pipe(t, &Options{SpinWindow: -1})
	ctx := testkit.Context(t)
	go func() {
		for {
			m, err := b.Receive(ctx)
			if err != nil {
				return
			}
			if b.Send(ctx, m) != nil {
				return
			}
		}
	}()
	for i := range 2000 {
		msg := pattern(make([]byte, i%200), i)
		if err := a.Send(ctx, msg); err != nil {
			t.Fatal(err)
		}
		m, err := a.Receive(ctx)
		if err != nil || !bytes.Equal(m, msg) {
			t.Fatalf("round trip %d: %v", i, err)
		}
	}
}

// TestClose checks the orderly close: everything sent before is delivered,
// then ErrClosed, on both sides and for blocked callers.
func TestClose(t *testing.T) {
	a, b := pipe(t, nil)
	ctx := testkit.Context(t)
	for i := range 100 {
		if err := a.Send(ctx, pattern(make([]byte, i), i)); err != nil {
			t.Fatal(err)
		}
	}
	// A receiver parked on a's side ends when a closes.
	sleeping, park := holdBeforePark(t, a, false)
	parked := make(chan error, 1)
	go func() { _, err := a.Receive(ctx); parked <- err }()
	testkit.Await(t, "the receiver to go to sleep", sleeping)
	park()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-parked; !errors.Is(err, ErrClosed) {
		t.Fatalf("parked Receive = %v, want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := a.Send(ctx, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close = %v", err)
	}
	for i := range 100 {
		m, err := b.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if err := checkPattern(m, i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Receive(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Receive after the peer's close = %v, want ErrClosed", err)
	}
	if err := b.Send(ctx, []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after the peer's close = %v, want ErrClosed", err)
	}
	if err := b.Err(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Err = %v", err)
	}
}

// TestSwapReceiveBuffer: a message whose buffer was handed over stays as
// it was while the next is received, in slots and in the bulk region,
// and a buffer given back is the one a later message lands in: passing
// back the buffer of the message before, as the connection layer does,
// two buffers take turns.
func TestSwapReceiveBuffer(t *testing.T) {
	a, b, err := Pipe(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	ctx := context.Background()
	for _, size := range []int{40, 3000} { // slots; the bulk region
		msg := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, size) }
		var kept [][]byte
		var spare []byte // the buffer of the message before
		for i := range 6 {
			if err := a.Send(ctx, msg(i)); err != nil {
				t.Fatal(err)
			}
			m, err := b.ReceiveExclusive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if i >= 2 && unsafe.SliceData(m) != unsafe.SliceData(kept[i-2]) {
				t.Errorf("%d bytes, message %d: not received into the buffer given back", size, i)
			}
			if i >= 1 && !bytes.Equal(kept[i-1], msg(i-1)) {
				t.Fatalf("%d bytes: message %d changed while %d was received", size, i-1, i)
			}
			got := b.SwapReceiveBuffer(spare)
			if unsafe.SliceData(got) != unsafe.SliceData(m) || len(got) != len(m) {
				t.Fatalf("%d bytes, message %d: SwapReceiveBuffer returned another buffer", size, i)
			}
			kept = append(kept, got)
			spare = got
		}
	}
}

// TestReceiveExclusive: it delivers what Receive delivers, refuses to
// run beside another receive, and Close wakes and waits out a parked one
// before it unmaps the rings, also when the two race.
func TestReceiveExclusive(t *testing.T) {
	a, b := pipe(t, nil)
	ctx := testkit.Context(t)
	for i := range 50 {
		if err := b.Send(ctx, pattern(make([]byte, i*97), i)); err != nil {
			t.Fatal(err)
		}
		m, err := a.ReceiveExclusive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkPattern(m, i); err != nil {
			t.Fatal(err)
		}
	}

	// A second receive while one is parked: Receive waits for the lock,
	// ReceiveExclusive fails at once and the connection stays usable.
	got := make(chan error, 1)
	go func() {
		m, err := a.ReceiveExclusive(ctx)
		if err == nil && string(m) != "after busy" {
			err = fmt.Errorf("got %q", m)
		}
		got <- err
	}()
	for atomic.LoadUint64(&a.rxIn) == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := a.ReceiveExclusive(ctx); !errors.Is(err, ErrBusy) {
		t.Fatalf("ReceiveExclusive beside a parked one = %v, want ErrBusy", err)
	}
	if err := b.Send(ctx, []byte("after busy")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// Close wakes a parked ReceiveExclusive and returns after it.
	go func() { _, err := a.ReceiveExclusive(ctx); got <- err }()
	for atomic.LoadUint64(&a.rxIn) == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if atomic.LoadUint64(&a.rxIn) != 0 {
		t.Fatal("Close returned while a ReceiveExclusive ran")
	}
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("parked ReceiveExclusive = %v, want ErrClosed", err)
	}
	if _, err := a.ReceiveExclusive(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("ReceiveExclusive after Close = %v, want ErrClosed", err)
	}

	// Close racing receivers that keep starting: none may touch the rings
	// after they are unmapped (that would fault), and all end with ErrClosed.
	for range 50 {
		x, y := pipe(t, &Options{MaxMessageSize: 64})
		done := untilErr(func() error { _, err := x.ReceiveExclusive(ctx); return err })
		untilErr(func() error { return y.Send(ctx, []byte("ping")) })
		time.Sleep(100 * time.Microsecond)
		x.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("racing ReceiveExclusive = %v, want ErrClosed", err)
		}
	}
}

// TestEightByteFragments: a fragment of exactly eight bytes is copied as
// one word on both sides (copy8); messages whose last (or only) fragment
// is eight bytes long arrive intact, across the ring's wrap-around, and
// so do their neighbours of other sizes.
func TestEightByteFragments(t *testing.T) {
	a, b := pipe(t, &Options{MaxMessageSize: 4096, RingSlots: 8})
	ctx := testkit.Context(t)
	sizes := []int{8, SlotPayload + 8, 2*SlotPayload + 8, 7, 9, SlotPayload, 0}
	for i := range 200 {
		n := sizes[i%len(sizes)]
		if err := a.Send(ctx, pattern(make([]byte, n), i)); err != nil {
			t.Fatal(err)
		}
		m, err := b.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != n {
			t.Fatalf("message %d: %d bytes, want %d", i, len(m), n)
		}
		if err := checkPattern(m, i); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSendExclusive: SendExclusive delivers what Send does; a second one
// beside a parked one gets ErrBusy; Close wakes a parked one and returns
// only after it; and Close racing senders that keep starting leaves none
// touching the unmapped rings. (Without -race the calls mark themselves
// with plain stores and Close fences every thread; with it, atomic swaps.)
func TestSendExclusive(t *testing.T) {
	a, b := pipe(t, &Options{MaxMessageSize: 4096, RingSlots: 8})
	ctx := testkit.Context(t)
	for i := range 50 {
		if err := a.SendExclusive(ctx, pattern(make([]byte, i*83), i)); err != nil {
			t.Fatal(err)
		}
		m, err := b.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkPattern(m, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.SendExclusive(ctx, make([]byte, 4097)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("SendExclusive of 4097 bytes = %v, want ErrTooLarge", err)
	}

	// Fill the ring, so that the next SendExclusive parks; a second one
	// fails at once, and the parked one goes through once there is room.
	for range 8 {
		if err := a.SendExclusive(ctx, []byte("fill")); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan error, 1)
	go func() { got <- a.SendExclusive(ctx, []byte("parked")) }()
	for atomic.LoadUint64(&a.txIn) == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := a.SendExclusive(ctx, []byte("second")); !errors.Is(err, ErrBusy) {
		t.Fatalf("SendExclusive beside a parked one = %v, want ErrBusy", err)
	}
	for i := range 9 {
		m, err := b.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{true: "parked", false: "fill"}[i == 8]; string(m) != want {
			t.Fatalf("message %d = %q, want %q", i, m, want)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}

	// Close wakes a parked SendExclusive and returns after it.
	for range 8 {
		if err := a.SendExclusive(ctx, []byte("fill")); err != nil {
			t.Fatal(err)
		}
	}
	go func() { got <- a.SendExclusive(ctx, []byte("never")) }()
	for atomic.LoadUint64(&a.txIn) == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if atomic.LoadUint64(&a.txIn) != 0 {
		t.Fatal("Close returned while a SendExclusive ran")
	}
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("parked SendExclusive = %v, want ErrClosed", err)
	}
	if err := a.SendExclusive(ctx, []byte("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("SendExclusive after Close = %v, want ErrClosed", err)
	}

	// Close racing senders that keep starting: none may touch the rings
	// after they are unmapped (that would fault), and all end with
	// ErrClosed.
	for range 50 {
		x, y := pipe(t, &Options{MaxMessageSize: 64})
		done := untilErr(func() error { return x.SendExclusive(ctx, []byte("ping")) })
		untilErr(func() error { _, err := y.ReceiveExclusive(ctx); return err })
		time.Sleep(100 * time.Microsecond)
		x.Close()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("racing SendExclusive = %v, want ErrClosed", err)
		}
	}
}

// TestFenceRegisteredInBackground: the membarrier registration that
// setting up a connection starts in the background ends; until it has,
// the exclusive calls take an atomic swap, and Close racing calls while it
// ends leaves none touching the unmapped rings: a call that sees the
// registration done after Close looked at it loads the closing flag after
// both, and backs out. Each round sets the state back to "registering"
// and ends it at a different moment around Close.
func TestFenceRegisteredInBackground(t *testing.T) {
	pipe(t, nil) // starts the registration, if no test has yet
	deadline := time.Now().Add(10 * time.Second)
	for fenceState.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the membarrier registration has not ended after 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	registered := fenceState.Load()
	t.Cleanup(func() { fenceState.Store(registered) })
	if registered != fenceYes {
		t.Skip("membarrier(2) is not available: the calls always swap")
	}
	ctx := testkit.Context(t)
	for i := range 100 {
		fenceState.Store(0) // registering, as in a new process
		x, y := pipe(t, &Options{MaxMessageSize: 64})
		sent := untilErr(func() error { return x.SendExclusive(ctx, []byte("ping")) })
		received := untilErr(func() error { _, err := x.ReceiveExclusive(ctx); return err })
		untilErr(func() error { // the peer answers each ping
			if _, err := y.Receive(ctx); err != nil {
				return err
			}
			return y.Send(ctx, []byte("pong"))
		})
		time.Sleep(50 * time.Microsecond)
		registeredNow := make(chan struct{})
		go func() {
			if i%2 == 0 {
				time.Sleep(time.Duration(i) * time.Microsecond)
			}
			fenceState.Store(fenceYes)
			close(registeredNow)
		}()
		x.Close()
		for _, got := range []<-chan error{sent, received} {
			if err := <-got; !errors.Is(err, ErrClosed) {
				t.Fatalf("round %d: exclusive call racing Close = %v, want ErrClosed", i, err)
			}
		}
		<-registeredNow
	}
}

// TestExclusiveCallsBeforeRegistration: a new process whose membarrier
// registration is held back echoes with SendExclusive and
// ReceiveExclusive all the same, then lets the registration run and goes
// on: the exclusive calls never wait for the registration, which takes
// milliseconds (it once held up every Go program's first round trip).
func TestExclusiveCallsBeforeRegistration(t *testing.T) {
	ch, c := attachChild(t, "exclusive-unregistered", "200", nil)
	ctx := testkit.Context(t)
	for i := range 400 { // 200 held back, 200 after
		if err := c.Send(ctx, pattern(make([]byte, i%100), i)); err != nil {
			t.Fatal(err)
		}
		m, err := c.Receive(ctx)
		if err != nil {
			t.Fatalf("echo %d: %v (do the child's exclusive calls wait for the registration?)", i, err)
		}
		if err := checkPattern(m, i); err != nil || len(m) != i%100 {
			t.Fatalf("echo %d: %v (%d bytes)", i, err, len(m))
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ch.wait(t)
}

// TestCloseWakesSender: a sender blocked on a full ring ends when the peer
// closes.
func TestCloseWakesSender(t *testing.T) {
	a, b := pipe(t, &Options{MaxMessageSize: 56, RingSlots: 4})
	ctx := testkit.Context(t)
	for range 4 {
		if err := a.Send(ctx, []byte("fill")); err != nil {
			t.Fatal(err)
		}
	}
	sleeping, park := holdBeforePark(t, a, true)
	sent := make(chan error, 1)
	go func() { sent <- a.Send(ctx, []byte("blocked")) }()
	testkit.Await(t, "the sender to go to sleep", sleeping)
	park()
	b.Close()
	if err := <-sent; !errors.Is(err, ErrClosed) {
		t.Fatalf("blocked Send = %v, want ErrClosed", err)
	}
}

// TestNoLeaks opens, uses and closes connections and checks that the
// descriptors, mappings and goroutines are all released.
func TestNoLeaks(t *testing.T) {
	ctx := testkit.Context(t)
	// Warm up whatever the runtime allocates once (netpoller, timers).
	a, b, err := Pipe(nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()
	before := countResources(t)
	for i := range 20 {
		a, b, err := Pipe(&Options{MaxMessageSize: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		if now := countResources(t); now.maps != before.maps+2 {
			t.Fatalf("%d ring mappings with two connections open, want %d", now.maps, before.maps+2)
		}
		if err := a.Send(ctx, make([]byte, i*1000)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			a.Close()
			b.Close()
		} else {
			b.Close()
			a.Close()
		}
	}
	checkNoLeaks(t, before)
}

// TestDefaults checks the configurations the options default to; C's
// test_ump_bulk checks the same table against chanos_ump_files_create.
func TestDefaults(t *testing.T) {
	for _, c := range []struct {
		o           Options
		slots, bulk uint32
	}{
		{Options{}, 4096, 4 << 20},
		{Options{MaxMessageSize: 448}, 1024, 0},
		{Options{MaxMessageSize: 449}, 4096, 4 << 20},
		{Options{MaxMessageSize: 4096}, 4096, 4 << 20},
		{Options{MaxMessageSize: 600000}, 4096, 4 << 20},
		{Options{MaxMessageSize: 65536, BulkSize: -1}, 4096, 0},
		{Options{MaxMessageSize: 1000, BulkSize: -1}, 1024, 0},
		{Options{MaxMessageSize: 1000, RingSlots: 8}, 8, 4 << 20},
		{Options{MaxMessageSize: 4096, BulkSize: 4096}, 4096, 4096},
	} {
		cfg, err := newConfig(&c.o)
		if err != nil {
			t.Fatalf("%+v: %v", c.o, err)
		}
		if cfg.slots != c.slots || cfg.bulk != c.bulk {
			t.Errorf("%+v: %d slots, bulk %d; want %d, %d", c.o, cfg.slots, cfg.bulk, c.slots, c.bulk)
		}
	}
}

// A context that ends between two waits still ends the next wait that
// uses it, at once, and leaves the waits of other contexts alone: the
// registration of a context's end outlives one wait.
func TestContextEndsBetweenWaits(t *testing.T) {
	a, b := pipe(t, &Options{SpinWindow: -1})
	ctx := testkit.Context(t)
	// receiveWaiting receives on b with rctx once the receive has gone
	// to sleep and a has sent msg.
	receiveWaiting := func(rctx context.Context, msg string) ([]byte, error) {
		t.Helper()
		sleeping, park := holdBeforePark(t, b, false)
		type result struct {
			m   []byte
			err error
		}
		got := make(chan result, 1)
		go func() { m, err := b.Receive(rctx); got <- result{m, err} }()
		testkit.Await(t, "the receiver to go to sleep", sleeping)
		if err := a.Send(ctx, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		park()
		r := <-got
		return r.m, r.err
	}
	cctx, cancel := context.WithCancel(ctx)
	if m, err := receiveWaiting(cctx, "one"); err != nil || string(m) != "one" {
		t.Fatalf("Receive = %q, %v", m, err)
	}
	cancel() // while no wait is under way
	if _, err := b.Receive(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive with the ended context = %v, want Canceled", err)
	}
	if m, err := receiveWaiting(ctx, "two"); err != nil || string(m) != "two" {
		t.Fatalf("Receive with another context = %q, %v", m, err)
	}
}

// TestSendParts sends messages in three parts, split at every kind of
// place, through the slots and through a small bulk region whose end the
// parts cross, and checks that each arrives whole; TrySendParts refuses a
// message the ring has no room for and writes nothing of it.
func TestSendParts(t *testing.T) {
	const max = 4096
	for _, o := range []*Options{
		{MaxMessageSize: max, RingSlots: 256, BulkSize: -1},
		{MaxMessageSize: max, RingSlots: 16, BulkSize: 2 * max},
	} {
		a, b := pipe(t, o)
		ctx := testkit.Context(t)
		sizes := []int{0, 1, SlotPayload, 3*SlotPayload + 5, BulkMin, BulkMin + 1, 3000, max}
		done := make(chan error, 1)
		go func() {
			for round := range 30 {
				for i, n := range sizes {
					m := pattern(make([]byte, n), round*1000+i)
					h, t := n/(2+round%3), n-n/(1+round%4)
					if t < h {
						t = h
					}
					if err := a.SendParts(ctx, m[:h], m[h:t], m[t:]); err != nil {
						done <- err
						return
					}
				}
			}
			done <- nil
		}()
		for round := range 30 {
			for i, n := range sizes {
				m, err := b.Receive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(m) != n {
					t.Fatalf("round %d message %d: %d bytes, want %d", round, i, len(m), n)
				}
				if err := checkPattern(m, round*1000+i); err != nil {
					t.Fatalf("round %d message %d: %v", round, i, err)
				}
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// Fill the ring, then one more in parts: refused, nothing written.
		msg := make([]byte, max)
		for {
			ok, err := a.TrySendParts(msg[:10], msg[10:max-10], msg[max-10:])
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
		}
		for {
			rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			m, err := b.Receive(rctx)
			cancel()
			if err != nil {
				break
			}
			if len(m) != max {
				t.Fatalf("a message of %d bytes after a refused TrySendParts, want %d", len(m), max)
			}
		}
	}
}

// TestGarbageInNextSlot: a sequence word that is neither the next nor the
// stale one ends the connection with ErrProtocol, whether the receive
// finds it on its first poll (ReceiveExclusive's fast path) or on a poll
// after waiting, and the connection's sender learns of it too.
func TestGarbageInNextSlot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		receive func(c *Conn, ctx context.Context) ([]byte, error)
		wait    bool // the garbage comes once the receiver has waited
	}{
		{"Receive", (*Conn).Receive, false},
		{"ReceiveExclusive", (*Conn).ReceiveExclusive, false},
		{"ReceiveExclusive waiting", (*Conn).ReceiveExclusive, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pipe(t, &Options{RingSlots: 8})
			ctx := testkit.Context(t)
			if err := a.SendExclusive(ctx, []byte("first")); err != nil {
				t.Fatal(err)
			}
			if m, err := tc.receive(b, ctx); err != nil || string(m) != "first" {
				t.Fatalf("first receive = %q, %v", m, err)
			}
			// What a broken or hostile peer would write: b's next slot,
			// through b's own mapping of the ring a writes.
			garbage := func() {
				atomic.StoreUint64((*uint64)(unsafe.Add(b.rx.slot(b.rx.pos), ctrlOff)), 0xdead<<32|0xbeef)
			}
			waited := false // the hook ran (it runs in the receiving goroutine)
			if tc.wait {
				// Written once b has spun its window and announced that it
				// sleeps: its look after the announcement finds it.
				b.testAfterAnnounce = func(sender bool) {
					if !sender && !waited {
						waited = true
						garbage()
					}
				}
			} else {
				garbage()
			}
			for range 2 { // and again: the connection stays ended
				if _, err := tc.receive(b, ctx); !errors.Is(err, ErrProtocol) {
					t.Fatalf("receive after garbage = %v, want ErrProtocol", err)
				}
			}
			if waited != tc.wait {
				t.Fatalf("the receiver announced that it sleeps: %v, want %v", waited, tc.wait)
			}
			if err := b.SendExclusive(ctx, []byte("x")); !errors.Is(err, ErrProtocol) {
				t.Fatalf("send on the ended connection = %v, want ErrProtocol", err)
			}
		})
	}
}
