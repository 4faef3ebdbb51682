package ump

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
)

// lateSignal makes c's first announcement of the given kind meet a late
// signal from its peer: the signal a peer sends when it was descheduled
// between writing (or reading) a message and loading the wait word, and
// so signals an announcement made after the waiter had already seen that
// message. signal sends it as the peer's producer or consumer would, and
// thereby marks the announcement signalled. The hook then sleeps, so that
// the runtime's netpoller takes the signal before the waiter looks and
// parks. announced is closed when the hook returns.
func lateSignal(c *Conn, sender bool, signal func()) (announced chan struct{}) {
	announced = make(chan struct{})
	var once sync.Once
	c.testAfterAnnounce = func(s bool) {
		if s != sender {
			return
		}
		once.Do(func() {
			signal()
			time.Sleep(20 * time.Millisecond)
			close(announced)
		})
	}
	return announced
}

// stuck is how long a waiter may take to see what it waits for before the
// test decides that it sleeps through it: a wake-up was lost.
const stuck = 10 * time.Second

// TestLateSignalReceiver is the interleaving that once lost wake-ups under
// load (docs/ump.md, "Waiting"): the producer signals the receiver's
// announcement late; its next message then sends no signal, since that
// announcement is signalled already. The receiver must not sleep through
// the message. Before the fix, the announcement preceded the netpoller's
// readiness reset, which discarded the late signal.
func TestLateSignalReceiver(t *testing.T) {
	a, b := pipe(t, &Options{SpinWindow: -1})
	ctx := testkit.Context(t)
	announced := lateSignal(b, false, func() {
		if shouldSignal(atomic.LoadUint64(a.tx.peerWaitp), &a.tx.signaled) {
			eventfdSignal(a.txWake)
		}
	})
	got := make(chan error, 1)
	go func() {
		m, err := b.Receive(ctx)
		if err == nil {
			err = checkPattern(m, 7)
		}
		got <- err
	}()
	<-announced
	time.Sleep(20 * time.Millisecond) // the receiver looks, finds nothing and parks
	if err := a.Send(ctx, pattern(make([]byte, 8), 7)); err != nil {
		t.Fatal(err)
	}
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
	announced := lateSignal(a, true, func() {
		if shouldSignal(atomic.LoadUint64(b.rx.peerWaitp), &b.rx.signaled) {
			eventfdSignal(b.rxWake)
		}
	})
	sent := make(chan error, 1)
	go func() { sent <- a.Send(ctx, pattern(make([]byte, 8), 2)) }()
	<-announced
	time.Sleep(20 * time.Millisecond) // the sender looks, finds no room and parks
	// With 2 slots, every message read is published (fenced), which is
	// when a consumer signals a sleeping producer.
	m, err := b.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPattern(m, 0); err != nil {
		t.Fatal(err)
	}
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
