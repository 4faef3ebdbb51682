package ump

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
)

// lateSignal makes c's first announcement of the given kind (sender:
// waiting for space) meet a late signal from its peer: the signal a peer
// sends when it was descheduled between writing (or reading) a message
// and loading the wait word, and so signals an announcement made after the
// waiter had already seen that message. signal sends it as the peer's
// producer or consumer would, marks the announcement signalled, and
// reports whether it found the announcement unsignalled, as a late signal
// does.
func lateSignal(t *testing.T, c *Conn, sender bool, signal func() bool) {
	var once sync.Once
	c.testAfterAnnounce = func(s bool) {
		if s != sender {
			return
		}
		once.Do(func() {
			// The runtime resets the socket's readiness before it calls
			// the function given to RawConn.Read; an announcement made
			// before that reset would let it discard the late signal.
			if !insideRawRead() {
				t.Error("the announcement was made outside RawConn.Read's function: a reset of the socket's readiness can follow it")
			}
			if !signal() {
				t.Error("the late signal found the announcement signalled already")
			}
		})
	}
}

// insideRawRead reports whether its caller runs in the function that
// RawConn.Read calls.
func insideRawRead() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if f.Function == "internal/poll.(*FD).RawRead" {
			return true
		}
		if !more {
			return false
		}
	}
}

// holdBeforePark stops c's first waiter of the given kind (sender:
// waiting for space) once its look after announcing that it sleeps has
// found that it must: reached is closed when it is there, and park lets it
// go on to park. A test acts in between on a waiter that is going to
// sleep, which it may no longer find out by looking.
func holdBeforePark(t *testing.T, c *Conn, sender bool) (reached <-chan struct{}, park func()) {
	at, resume := make(chan struct{}), make(chan struct{})
	var once, resumed sync.Once
	c.testBeforePark = func(s bool) {
		if s != sender {
			return
		}
		once.Do(func() {
			close(at)
			<-resume
		})
	}
	park = func() { resumed.Do(func() { close(resume) }) }
	t.Cleanup(park) // a held waiter would keep Close waiting
	return at, park
}

// stuck is how long a waiter may take to see what it waits for before the
// test decides that it sleeps through it: a wake-up was lost.
const stuck = 10 * time.Second

// TestLateSignalReceiver is the interleaving that once lost wake-ups under
// load (docs/ump.md, "Waiting"): the producer signals the receiver's
// announcement late, after which the receiver looks, finds nothing and
// goes to sleep; the producer's next message then sends no signal, since
// that announcement is signalled already. The receiver must not sleep
// through the message. Before the fix, the announcement preceded the
// netpoller's readiness reset, which discarded the late signal.
func TestLateSignalReceiver(t *testing.T) {
	a, b := pipe(t, &Options{SpinWindow: -1})
	ctx := testkit.Context(t)
	lateSignal(t, b, false, func() bool {
		if !shouldSignal(atomic.LoadUint64(a.tx.peerWaitp), &a.tx.signaled) {
			return false
		}
		wakeSignal(a.txWake)
		return true
	})
	sleeping, park := holdBeforePark(t, b, false)
	got := make(chan error, 1)
	go func() {
		m, err := b.Receive(ctx)
		if err == nil {
			err = checkPattern(m, 7)
		}
		got <- err
	}()
	testkit.Await(t, "the receiver to find nothing and go to sleep", sleeping)
	// Its announcement, in the shared header, is the one signalled late.
	if w := atomic.LoadUint64(a.tx.peerWaitp); w == 0 || w != a.tx.signaled {
		t.Fatalf("the receiver sleeps under announcement %d, the producer signalled %d: want the one signalled late", w, a.tx.signaled)
	}
	if err := a.Send(ctx, pattern(make([]byte, 8), 7)); err != nil {
		t.Fatal(err)
	}
	park()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(stuck):
		t.Fatalf("the receiver slept through a message for %v: a wake-up was lost", stuck)
	}
}

// TestLateSignalSender is the same for a sender waiting for space: the
// consumer signals the sender's announcement late, and its next
// publication sends no signal.
func TestLateSignalSender(t *testing.T) {
	a, b := pipe(t, &Options{MaxMessageSize: 8, RingSlots: 2, SpinWindow: -1})
	ctx := testkit.Context(t)
	for i := range 2 {
		if err := a.Send(ctx, pattern(make([]byte, 8), i)); err != nil {
			t.Fatal(err)
		}
	}
	lateSignal(t, a, true, func() bool {
		if !shouldSignal(atomic.LoadUint64(b.rx.peerWaitp), &b.rx.signaled) {
			return false
		}
		wakeSignal(b.rxWake)
		return true
	})
	sleeping, park := holdBeforePark(t, a, true)
	sent := make(chan error, 1)
	go func() { sent <- a.Send(ctx, pattern(make([]byte, 8), 2)) }()
	testkit.Await(t, "the sender to find no room and go to sleep", sleeping)
	if w := atomic.LoadUint64(b.rx.peerWaitp); w == 0 || w != b.rx.signaled {
		t.Fatalf("the sender sleeps under announcement %d, the consumer signalled %d: want the one signalled late", w, b.rx.signaled)
	}
	// With 2 slots, every message read is published (fenced), which is
	// when a consumer signals a sleeping producer.
	m, err := b.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPattern(m, 0); err != nil {
		t.Fatal(err)
	}
	park()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(stuck):
		t.Fatalf("the sender slept through free space for %v: a wake-up was lost", stuck)
	}
	for i := 1; i <= 2; i++ {
		m, err := b.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkPattern(m, i); err != nil {
			t.Fatal(err)
		}
	}
}

// A spinning wait may yield its CPU only soon after a wait that slept:
// between two sides that each have a core, waits never sleep and never
// yield; with more busy processes than cores, they keep yielding while
// waits go on sleeping now and then.
func TestSpinBudgetYieldsOnlyAfterASleep(t *testing.T) {
	b := newSpinBudget(20 * time.Microsecond)
	for range 1000 {
		if b.yields > 0 {
			t.Fatal("a budget whose waits never slept lets a wait yield")
		}
		b.won()
	}
	b.lost()
	for i := range yieldWaits {
		if b.yields == 0 {
			t.Fatalf("wait %d after one that slept may not yield", i)
		}
		b.won()
	}
	if b.yields != 0 {
		t.Fatalf("%d waits after one that slept, %d more may still yield", yieldWaits, b.yields)
	}
	for range 10 {
		for range yieldWaits / 2 {
			b.won()
		}
		b.lost()
		if b.yields != yieldWaits {
			t.Fatalf("a wait that slept left %d waits that may yield, want %d", b.yields, yieldWaits)
		}
	}
}
