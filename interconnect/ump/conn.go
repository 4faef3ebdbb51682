package ump

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultSpinWindow is how long a sender or receiver spins on shared memory
// before it announces that it sleeps and parks, when Options leaves
// SpinWindow zero: long enough that a peer answering with a system call
// or two (a message carrying descriptors) is waited for without a
// wake-up, also on a machine whose few CPUs the peer shares (docs/ump.md,
// "Waiting").
const DefaultSpinWindow = 40 * time.Microsecond

// Options configure a ring pair. The zero value (or a nil *Options) gives
// the defaults.
type Options struct {
	// MaxMessageSize is the largest message, in bytes, that the connection
	// carries: the interface's MaxFrameSize. The creator writes it into the
	// shared header; an attacher that sets it refuses a ring pair whose
	// maximum is larger. Zero means DefaultMaxMessageSize for a creator and
	// "whatever the creator chose" for an attacher.
	MaxMessageSize int
	// RingSlots is the number of 64-byte slots per direction, a power of
	// two. Zero chooses room for two maximum-size messages, at least 1024,
	// or 4096 with a bulk region.
	RingSlots int
	// BulkSize is the size of the bulk region per direction, in bytes: a
	// power of two at least MaxMessageSize, through which messages longer
	// than BulkMin travel. Zero chooses room for two maximum-size messages
	// and at least 4 MiB (none if MaxMessageSize <= BulkMin); negative
	// means no bulk region.
	BulkSize int
	// SpinWindow is how long to spin before parking. Zero means
	// DefaultSpinWindow; a negative value parks at once.
	SpinWindow time.Duration
	// Logger receives a debug record when a connection ends with an error.
	// Nil means slog.Default().
	Logger *slog.Logger
}

func (o *Options) maxMessageSize() int {
	if o == nil || o.MaxMessageSize == 0 {
		return DefaultMaxMessageSize
	}
	return o.MaxMessageSize
}

func (o *Options) spinWindow() time.Duration {
	switch {
	case o == nil || o.SpinWindow == 0:
		return DefaultSpinWindow
	case o.SpinWindow < 0:
		return 0
	}
	return o.SpinWindow
}

func (o *Options) logger() *slog.Logger {
	if o == nil || o.Logger == nil {
		return slog.Default()
	}
	return o.Logger
}

// minSpin is the least a waiter spins once its waits have been ending in
// sleep: about a round trip of a busy peer, so that a peer that becomes
// busy again is noticed without a wake-up, and the full window returns.
const minSpin = 2 * time.Microsecond

// tightPolls is how many times a waiting receiver polls the next slot
// back to back, with no PAUSE between, before it spins with one: a
// message usually comes within the round trip's few hundred ns, and a
// PAUSE between polls makes the reader notice it up to a PAUSE late, a
// large part of a round trip; 512 polls are a microsecond or two when
// nothing comes (docs/ump.md, "Waiting"). Sending waits, for space, keep
// the PAUSE: they are rare.
const tightPolls = 512

// spinBudget is how long a waiter spins before it parks, adapted to how
// its waits end, as adaptive mutexes do: a wait that the spinning served
// restores the full window; one that had to sleep anyway halves it, down
// to minSpin. On a machine with more busy processes than cores (a ring of
// domains, say), spinning for the whole window only keeps the process
// that would have answered off the CPU. Every probeEvery-th wait after a
// sleep spins the full window again: waits a little longer than the
// reduced window (a 4 KiB ping-pong after an idle spell) would otherwise
// sleep, and pay a wake-up, forever.
//
// It also decides whether a wait may yield its CPU (see yieldAfter): only
// within yieldWaits waits of one that slept. A wait ends in sleep when
// the peer did not answer within the window, which is what happens when
// there are more busy processes than cores, the case the yield is for.
// Between two sides that each have a core, every wait is served by
// spinning and none yields: there, a yield hands the CPU to whatever else
// is runnable on it, most often one of this process's own runtime threads
// woken for a timer, and the wait it was meant to shorten grows by that
// thread's run instead (docs/ump.md, "Waiting").
type spinBudget struct {
	max, cur time.Duration
	misses   int // waits that ended in sleep since the last that did not
	yields   int // waits left that may yield
}

// yieldWaits is how many waits after one that slept may yield.
const yieldWaits = 64

const probeEvery = 8

func newSpinBudget(window time.Duration) spinBudget { return spinBudget{max: window, cur: window} }

// window returns how long the next wait spins.
func (b *spinBudget) window() time.Duration {
	if b.misses%probeEvery == probeEvery-1 {
		return b.max
	}
	return b.cur
}

func (b *spinBudget) won() {
	b.cur, b.misses = b.max, 0
	if b.yields > 0 {
		b.yields--
	}
}

func (b *spinBudget) lost() {
	b.cur, b.misses, b.yields = max(b.cur/2, min(b.max, minSpin)), b.misses+1, yieldWaits
}

// Side says which half of a ring pair a Conn is. The creator writes ring 0
// and reads ring 1; the attacher the reverse.
type Side int

// The two sides of a ring pair.
const (
	Creator  Side = 0
	Attacher Side = 1
)

// Conn is one end of a ump connection: two single-producer single-consumer
// rings in shared memory, one per direction.
//
// Send and Receive run entirely in the calling goroutine: they copy between
// the caller's memory and the ring, spin for the spin window when they must
// wait, and then park the goroutine (not the thread) on a wake-up socket
// through the runtime's netpoller. Send and Receive may be called concurrently with
// each other; concurrent calls of the same one are serialized. Close may be
// called at any time, from any goroutine.
type Conn struct {
	cfg  config
	mem  []byte
	sock *net.UnixConn
	log  *slog.Logger

	myClosedp   *uint64 // our close word
	peerClosedp *uint64 // the peer's close word

	smu    sync.Mutex
	txIn   uint64 // 1 while a SendExclusive runs
	tx     producer
	txSpin spinBudget
	// capsFD is our end of the caps socket, on which descriptors travel
	// (fds.go); capsOut counts the records sent (under smu), capsIn those
	// received (by the only receiver).
	capsFD  int
	capsOut uint32
	capsIn  uint32
	txWake  int // our data socket, on which we wake the peer's receiver
	txPark  *parker

	rmu     sync.Mutex
	rxIn    uint64 // 1 while a ReceiveExclusive runs
	rx      consumer
	rxSpin  spinBudget
	rxWake  int // our space socket, on which we wake the peer's sender
	rxPark  *parker
	rxGone  bool   // a poll ran after the peer's socket was seen closed
	rxRetry uint64 // 1 + the position polled again after seeing the close word

	// testAfterAnnounce, if set, runs right after a waiter announces that
	// it sleeps (sender: waiting for space): tests put a peer's signal
	// exactly there.
	testAfterAnnounce func(sender bool)
	// testBeforePark, if set, runs once the look after the announcement
	// has found that the waiter must sleep, before it parks: tests act on
	// a waiter known to be going to sleep.
	testBeforePark func(sender bool)

	err       atomic.Pointer[connError] // why the connection ended
	peerEnd   atomic.Pointer[connError] // set when the peer's socket closed
	closing   atomic.Bool
	closed    chan struct{}
	watching  bool // the socket watcher was started
	watchDone chan struct{}
}

// start starts the socket watcher, once the handshake no longer uses the
// socket.
func (c *Conn) start() {
	startFence()
	c.watching = true
	go c.watch()
}

// MaxMessageSize returns the largest message the connection carries.
func (c *Conn) MaxMessageSize() int { return int(c.cfg.maxMsg) }

// SpinWindow returns how long a wait spins at most before it parks (see
// Options.SpinWindow): 0 if it parks at once.
func (c *Conn) SpinWindow() time.Duration { return c.rxSpin.max }

// Err returns why the connection ended: an error matching ErrClosed,
// ErrPeerDied or ErrProtocol. It returns nil while the connection is open.
// After the peer went away, Receive still returns the messages it had
// completely sent before reporting the same error.
func (c *Conn) Err() error {
	if e := c.err.Load(); e != nil {
		return e
	}
	if e := c.peerEnd.Load(); e != nil {
		return e
	}
	return nil
}

// fail ends the connection with err unless it had already ended.
func (c *Conn) fail(err error) error {
	ce, ok := err.(*connError)
	if !ok {
		ce = &connError{ErrProtocol, err.Error()}
	}
	if c.err.CompareAndSwap(nil, ce) && ce.err != ErrClosed {
		c.log.Debug("ump connection ended", "err", ce)
	}
	return c.err.Load()
}

// Send copies msg into the ring as one message. It blocks while the ring
// lacks room for the whole message, until the peer makes room, the context
// ends (nothing of msg is then written) or the connection ends. msg may be
// reused as soon as Send returns.
func (c *Conn) Send(ctx context.Context, msg []byte) error {
	_, err := c.send(ctx, msg, true)
	return err
}

// TrySend is Send without the wait: when the ring lacks room for the
// whole of msg, it returns false at once and writes nothing.
func (c *Conn) TrySend(msg []byte) (bool, error) {
	return c.send(context.Background(), msg, false)
}

// SendParts is Send of the message made of head, body and tail, one after
// another, without joining them first: a frame's header and fields around
// a payload that is then copied once, straight into the ring. Any part
// may be empty; all may be reused as soon as SendParts returns.
func (c *Conn) SendParts(ctx context.Context, head, body, tail []byte) error {
	_, err := c.sendParts(ctx, head, body, tail, true)
	return err
}

// TrySendParts is SendParts without the wait, as TrySend is Send's.
func (c *Conn) TrySendParts(head, body, tail []byte) (bool, error) {
	return c.sendParts(context.Background(), head, body, tail, false)
}

// SendExclusive is Send for a caller that serializes its sends itself, as
// a caller of the C library's chanos_ump_send does: it must never run
// while another Send or SendExclusive runs on c. One that finds another
// SendExclusive running fails with ErrBusy; one beside a Send, or two that
// start at the same instant, are not detected, so a caller uses one or the
// other, from one goroutine at a time. It takes no lock: where the kernel
// has membarrier(2) its fast path has no atomic read-modify-write at all,
// and Close, not the send, pays for the ordering (see enterFlag).
func (c *Conn) SendExclusive(ctx context.Context, msg []byte) error {
	if len(msg) > int(c.cfg.maxMsg) {
		return c.tooLarge(len(msg))
	}
	// enterFlag's fast way, written out (see there): a plain store.
	if p := &c.txIn; atomic.LoadUint64(p) == 0 && fastFence() {
		*p = 1
		if c.closing.Load() {
			return enterFlag(p, &c.closing, true)
		}
	} else if err := enterFlag(p, &c.closing, false); err != nil {
		return err
	}
	var err error
	if len(msg) > SlotPayload || !c.sendSlot(msg) {
		_, err = c.sendLocked(ctx, msg, nil, nil, true)
	}
	clearFlag(&c.txIn) // the rings are not touched after it
	return err
}

// sendSlot is sendLocked's way for a message of at most SlotPayload
// bytes that finds room in the ring and the connection alive, the
// commonest case, without the cost of sendLocked's arguments. It reports
// false, having done nothing, where sendLocked must decide.
func (c *Conn) sendSlot(msg []byte) bool {
	t := &c.tx
	if c.err.Load() != nil || atomic.LoadUint64(c.peerClosedp) != 0 || c.peerEnd.Load() != nil ||
		t.tail-t.head >= t.n {
		return false
	}
	t.writeSlot(msg)
	if shouldSignal(atomic.LoadUint64(t.peerWaitp), &t.signaled) {
		wakeSignal(c.txWake)
	}
	return true
}

// tooLarge is the error of a message of size bytes over the maximum.
func (c *Conn) tooLarge(size int) error {
	return fmt.Errorf("%w: %d bytes, the connection's maximum is %d", ErrTooLarge, size, c.cfg.maxMsg)
}

// send writes msg, waiting for room if wait is set.
func (c *Conn) send(ctx context.Context, msg []byte, wait bool) (bool, error) {
	return c.sendParts(ctx, msg, nil, nil, wait)
}

// sendParts writes the message head+body+tail, waiting for room if wait
// is set.
func (c *Conn) sendParts(ctx context.Context, head, body, tail []byte, wait bool) (bool, error) {
	if size := len(head) + len(body) + len(tail); size > int(c.cfg.maxMsg) {
		return false, c.tooLarge(size)
	}
	c.smu.Lock()
	defer c.smu.Unlock()
	if len(body) == 0 && len(tail) == 0 && len(head) <= SlotPayload && c.sendSlot(head) {
		return true, nil
	}
	return c.sendLocked(ctx, head, body, tail, wait)
}

// sendLocked is the work of sendParts and SendExclusive, for a caller
// that is the only sender (by smu or by promise) of a message of at most
// the maximum size.
func (c *Conn) sendLocked(ctx context.Context, head, body, tail []byte, wait bool) (bool, error) {
	return c.sendLockedFDs(ctx, head, body, tail, nil, wait)
}

// sendLockedFDs is sendLocked of a message with descriptors fds attached
// (none if nil): their record goes once the ring has room for the
// message, so that a message that cannot be written leaves no record.
func (c *Conn) sendLockedFDs(ctx context.Context, head, body, tail []byte, fds []int, wait bool) (bool, error) {
	size := len(head) + len(body) + len(tail)
	need, nbulk := uint64(slotsFor(size)), uint64(0)
	bulk := c.cfg.usesBulk(size)
	if bulk {
		need, nbulk = 1, uint64(size)
	}
	if e := c.err.Load(); e != nil {
		return false, e
	}
	if err := c.txPeerEnded(); err != nil {
		return false, err
	}
	t := &c.tx
	if !t.free(need, nbulk) {
		if !wait {
			if err := t.refresh(); err != nil {
				return false, c.fail(err)
			}
			if !t.free(need, nbulk) {
				return false, nil
			}
		} else if err := c.waitSpace(ctx, need, nbulk); err != nil {
			return false, err
		}
	}
	if len(fds) > 0 {
		if sent, err := c.sendFDs(ctx, fds, wait); !sent || err != nil {
			return false, err
		}
	}
	switch {
	case bulk:
		t.writeBulk(head, body, tail)
	case len(body) == 0 && len(tail) == 0:
		t.write(head)
	default: // slots take a message in one piece
		t.joined = append(append(append(t.joined[:0], head...), body...), tail...)
		t.write(t.joined)
	}
	if shouldSignal(atomic.LoadUint64(t.peerWaitp), &t.signaled) {
		wakeSignal(c.txWake)
	}
	return true, nil
}

// txPeerEnded reports whether the peer closed or went away, so that what
// we send would never be read.
func (c *Conn) txPeerEnded() error {
	if w := atomic.LoadUint64(c.peerClosedp); w != 0 {
		// The receiving side checks the word fully; this side checks what
		// it can, so that garbage is not taken for an orderly close: the
		// flag, and a position at or after ours as last published (the
		// published one trails ours by less than a ring).
		cp, h := w&^closedBit, atomic.LoadUint64(c.rx.headp)
		if w&closedBit == 0 || cp < h || cp-h > 2*c.rx.n {
			return c.fail(protoErr(fmt.Sprintf("peer close word %#x, position published %d", w, h)))
		}
		return errClosedPeer
	}
	if e := c.peerEnd.Load(); e != nil {
		return e
	}
	return nil
}

// waitSpace waits until need slots, and nbulk bytes of the bulk region,
// are free in the outgoing ring.
func (c *Conn) waitSpace(ctx context.Context, need, nbulk uint64) error {
	t := &c.tx
	if err := t.refresh(); err != nil {
		return c.fail(err)
	}
	if t.free(need, nbulk) {
		return nil
	}
	done := ctx.Done()
	if b, window := &c.txSpin, c.txSpin.window(); window > 0 {
		var start int64 // nanotime of the first check
		yielded := false
		for i := 1; ; i++ {
			spinPause()
			if err := t.refresh(); err != nil {
				return c.fail(err)
			}
			if t.free(need, nbulk) {
				b.won()
				return nil
			}
			if i&63 != 0 {
				continue
			}
			if err := c.txEnded(ctx, done); err != nil {
				return err
			}
			if now := nanotime(); start == 0 {
				start = now
			} else if now-start > int64(window) {
				b.lost()
				break
			}
			if i > yieldAfter && !yielded && b.yields > 0 {
				osYield()
				yielded = true
			}
		}
	}
	for {
		if err := c.txEnded(ctx, done); err != nil {
			return err
		}
		// The park announces that we sleep (txSleep), once the netpoller
		// can no longer lose a signal of that announcement.
		err := c.txPark.wait(ctx)
		storeRelease(t.waitp, 0)
		if err != nil {
			return err
		}
		if err := t.refresh(); err != nil {
			return c.fail(err)
		}
		if t.free(need, nbulk) {
			return nil
		}
	}
}

// txEnded reports a reason to stop waiting for space.
func (c *Conn) txEnded(ctx context.Context, done <-chan struct{}) error {
	if e := c.err.Load(); e != nil {
		return e
	}
	if err := c.txPeerEnded(); err != nil {
		return err
	}
	if done != nil {
		select {
		case <-done:
			return fmt.Errorf("ump: send: %w", ctx.Err())
		default:
		}
	}
	return nil
}

// txSleep announces that the sender sleeps waiting for space, then
// reports whether it must not: the consumer has moved since the sender
// last looked, or the connection is ending. The producer's position
// checks are done by the caller, after the park.
func (c *Conn) txSleep() bool {
	atomic.StoreUint64(c.tx.waitp, nextEpoch(&c.tx.epoch))
	if c.testAfterAnnounce != nil {
		c.testAfterAnnounce(true)
	}
	awake := atomic.LoadUint64(c.tx.headp) != c.tx.head ||
		c.tx.bulk != nil && atomic.LoadUint64(c.tx.bheadp) != c.tx.bhead || c.closing.Load() ||
		c.peerEnd.Load() != nil || atomic.LoadUint64(c.peerClosedp) != 0
	if !awake && c.testBeforePark != nil {
		c.testBeforePark(true)
	}
	return awake
}

// Receive returns the next message. The returned slice is owned by the
// connection and valid until the next call of Receive (or Close); copy it
// to keep it. Receive blocks until a message arrives, the context ends or
// the connection ends; it reports the end (ErrClosed, ErrPeerDied,
// ErrProtocol) only after every message completely sent before it.
func (c *Conn) Receive(ctx context.Context) ([]byte, error) { return c.receive(ctx, &c.rmu) }

// SwapReceiveBuffer hands over the buffer that holds the message the last
// Receive or ReceiveExclusive returned, which c then never touches again,
// and receives later messages into spare instead (nil: a buffer is made
// when one is needed; spare's contents are overwritten). It must be
// called between two receives of the caller's, after one that returned
// a message, and never while another receive runs. A receiver that keeps
// each message while it reads the next then copies none of them: it
// passes back the buffer it got two messages before.
func (c *Conn) SwapReceiveBuffer(spare []byte) []byte {
	r := &c.rx
	b := r.buf
	r.buf = spare[:0]
	return b
}

// ReceiveExclusive is Receive for a caller that serializes its receives
// itself: it must never run while another Receive or ReceiveExclusive
// runs on c. One that finds another ReceiveExclusive running fails with
// ErrBusy; one beside a Receive, or two that start at the same instant,
// are not detected, so a caller uses one or the other, from one goroutine
// at a time. It skips Receive's lock, whose release would otherwise stand
// between a message's arrival and the caller's answer to it, and, as
// SendExclusive, takes no atomic read-modify-write where the kernel has
// membarrier(2); the chanos connection layer, which lets one goroutine at
// a time read, uses it.
func (c *Conn) ReceiveExclusive(ctx context.Context) ([]byte, error) {
	// Either Close sees rxIn set and waits for it to clear before it
	// unmaps the rings, or we see closing: enterFlag, whose fast way is
	// written out here.
	if p := &c.rxIn; atomic.LoadUint64(p) == 0 && fastFence() {
		*p = 1
		if c.closing.Load() {
			return nil, enterFlag(p, &c.closing, true)
		}
	} else if err := enterFlag(p, &c.closing, false); err != nil {
		return nil, err
	}
	if r := &c.rx; c.err.Load() == nil {
		// receive's first poll, without the cost of its arguments: a
		// message that is there already is the commonest case.
		done, err := r.poll()
		if err != nil {
			err = c.fail(err)
			clearFlag(&c.rxIn)
			return nil, err
		}
		if done {
			if r.publishDue() {
				c.rxPublish(true)
			}
			clearFlag(&c.rxIn)
			return r.buf, nil
		}
	}
	msg, err := c.receive(ctx, nil)
	clearFlag(&c.rxIn) // not a fence: the rings are not touched after it
	return msg, err
}

// receive is the work of Receive, which passes rmu to hold meanwhile,
// and of ReceiveExclusive, which passes nil. (Receive is one inlined call
// of it: a message streamed costs no extra call.)
func (c *Conn) receive(ctx context.Context, mu *sync.Mutex) ([]byte, error) {
	if mu != nil {
		mu.Lock()
		defer mu.Unlock()
	}
	r := &c.rx
	for {
		if e := c.err.Load(); e != nil {
			return nil, e
		}
		done, err := r.poll()
		if err != nil {
			return nil, c.fail(err)
		}
		if done {
			if r.publishDue() {
				c.rxPublish(true)
			}
			return r.buf, nil
		}
		if err := c.waitData(ctx); err != nil {
			return nil, err
		}
	}
}

// rxPublish publishes our position to the producer and wakes it if it
// announced that it sleeps waiting for space. Only a fenced publication
// (a sequentially consistent store) is guaranteed to see a fresh
// announcement; unfenced ones are cheap and the fenced one before parking
// or at the batch boundary catches what they miss.
func (c *Conn) rxPublish(fenced bool) {
	r := &c.rx
	if r.bpos != r.bpub { // before head: the producer reads head first
		r.bpub = r.bpos
		storeRelease(r.bheadp, r.bpos)
	}
	if r.pos != r.pub || fenced {
		r.pub = r.pos
		if fenced {
			atomic.StoreUint64(r.headp, r.pos)
		} else {
			storeRelease(r.headp, r.pos)
		}
	}
	if shouldSignal(atomic.LoadUint64(r.peerWaitp), &r.signaled) {
		wakeSignal(c.rxWake)
	}
}

// rxEnded decides, when no fragment is ready, whether the connection has
// ended. retry means the caller must poll again first: the peer closed or
// died after writing more.
func (c *Conn) rxEnded(ctx context.Context, done <-chan struct{}) (retry bool, err error) {
	if e := c.err.Load(); e != nil {
		return false, e
	}
	r := &c.rx
	if w := atomic.LoadUint64(c.peerClosedp); w != 0 {
		cp := w &^ closedBit
		switch {
		case w&closedBit == 0 || cp < r.pos || cp-r.pos > r.n:
			return false, c.fail(protoErr(fmt.Sprintf("peer close word %#x at position %d", w, r.pos)))
		case cp > r.pos && c.rxRetry != r.pos+1:
			c.rxRetry = r.pos + 1 // poll once more: the close word was written after the data
			return true, nil
		case cp > r.pos:
			return false, c.fail(protoErr(fmt.Sprintf("peer closed at position %d but slot %d is empty", cp, r.pos)))
		case r.msgLen >= 0:
			return false, c.fail(protoErr(fmt.Sprintf("peer closed in the middle of a message at position %d", r.pos)))
		}
		return false, c.fail(errClosedPeer)
	}
	if e := c.peerEnd.Load(); e != nil {
		if !c.rxGone {
			c.rxGone = true // poll once more: what it wrote before dying is visible now
			return true, nil
		}
		return false, c.fail(e)
	}
	if done != nil {
		select {
		case <-done:
			return false, fmt.Errorf("ump: receive: %w", ctx.Err())
		default:
		}
	}
	return false, nil
}

// yieldAfter is how many polls a spinning waiter makes before it gives its
// CPU away (sched_yield), once per wait, at its next periodic check. With
// more busy processes than cores (a ring of domains on two cores), the
// peer a spinner waits for may be runnable on the spinner's own CPU, woken
// there by its own peer's signal: spinning the window only keeps it off
// the CPU it needs. A yield with nothing else runnable returns at once,
// and the first polls, in which a round trip between two running sides
// usually completes, never yield. Once per wait, because a yield that does
// switch (to another process, or to one of the runtime's threads) costs
// the waiter a time slice: yielding at every check showed in the spin
// path's tail latency. Only in a wait that its spinBudget lets yield:
// soon after one that slept.
const yieldAfter = 256

// waitData waits until the next slot may hold a fragment or the connection
// ended.
func (c *Conn) waitData(ctx context.Context) error {
	r := &c.rx
	c.rxPublish(false)
	done := ctx.Done()
	if retry, err := c.rxEnded(ctx, done); retry || err != nil {
		return err
	}
	if b, window := &c.rxSpin, c.rxSpin.window(); window > 0 {
		var start int64 // nanotime of the first check
		yielded := false
		for i := 1; ; i++ {
			if i > tightPolls {
				spinPause()
			}
			if r.changed() {
				b.won()
				return nil
			}
			if i&63 != 0 {
				continue
			}
			if retry, err := c.rxEnded(ctx, done); retry || err != nil {
				return err
			}
			if now := nanotime(); start == 0 {
				start = now
			} else if now-start > int64(window) {
				b.lost()
				break
			}
			if i > yieldAfter && !yielded && b.yields > 0 {
				osYield()
				yielded = true
			}
		}
	}
	// The park announces that we sleep (rxSleep), once the netpoller can
	// no longer lose a signal of that announcement.
	err := c.rxPark.wait(ctx)
	storeRelease(r.waitp, 0)
	return err
}

// rxSleep announces that the receiver sleeps waiting for data, then looks
// again: the producer loads the announcement after it writes, so either
// it sees the announcement and signals, or we see its write here. It
// reports whether the receiver must not sleep: a fragment (or garbage)
// is there, or the connection is ending.
func (c *Conn) rxSleep() bool {
	atomic.StoreUint64(c.rx.waitp, nextEpoch(&c.rx.epoch))
	if c.testAfterAnnounce != nil {
		c.testAfterAnnounce(false)
	}
	c.rxPublish(false) // after the fence above: sees a sleeping producer
	awake := c.rx.changed() || c.closing.Load() || c.peerEnd.Load() != nil ||
		atomic.LoadUint64(c.peerClosedp) != 0
	if !awake && c.testBeforePark != nil {
		c.testBeforePark(false)
	}
	return awake
}

// Close ends the connection. The peer receives everything sent before,
// then ErrClosed; its senders get ErrClosed. Blocked calls on this side
// return ErrClosed. Close releases the shared memory, the sockets and the
// socket, and waits for the connection's socket watcher to exit. Calling
// Close again does nothing.
func (c *Conn) Close() error {
	if !c.closing.CompareAndSwap(false, true) {
		<-c.closed
		return nil
	}
	c.err.CompareAndSwap(nil, errClosedLocal)
	c.wakeSelf() // wake our own parked callers
	if fastFence() {
		// The exclusive calls mark themselves with plain stores: make
		// them visible before looking at txIn and rxIn (enterFlag). A
		// registration still running when closing was set may end
		// before a call's look at fenceState, but that call then loads
		// closing after both and backs out.
		fenceAllThreads()
	}
	c.smu.Lock()
	waitClear(&c.txIn) // a SendExclusive, woken above, returns
	atomic.StoreUint64(c.myClosedp, closedBit|c.tx.tail)
	wakeSignal(c.txWake) // and the peer's
	wakeSignal(c.rxWake)
	c.rmu.Lock()
	waitClear(&c.rxIn) // a ReceiveExclusive, woken above, returns
	err := c.sock.Close()
	if c.watching {
		<-c.watchDone
	}
	if e := syscall.Munmap(c.mem); e != nil && err == nil {
		err = os.NewSyscallError("munmap", e)
	}
	c.mem = nil
	// Descriptors still queued on it are closed with the socket.
	if e := syscall.Close(c.capsFD); e != nil && err == nil {
		err = os.NewSyscallError("close", e)
	}
	c.capsFD = -1
	for _, p := range []*parker{c.txPark, c.rxPark} {
		p.unwatch() // a context must not keep the connection
		if e := p.f.Close(); e != nil && err == nil {
			err = e
		}
	}
	c.rmu.Unlock()
	c.smu.Unlock()
	close(c.closed)
	if err != nil {
		return fmt.Errorf("ump: close: %w", err)
	}
	return nil
}

// watch waits for the peer's end of the socket to close: the peer closed
// the connection or died. Nothing else travels on the socket yet (it is
// reserved for descriptors); bytes on it are a protocol violation.
func (c *Conn) watch() {
	defer close(c.watchDone)
	var b [64]byte
	for {
		n, err := c.sock.Read(b[:])
		if n > 0 && !c.closing.Load() {
			c.fail(protoErr(fmt.Sprintf("%d unexpected bytes on the connection's socket", n)))
			c.wakeSelf()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) && !c.closing.Load() {
			c.sock.SetReadDeadline(time.Time{}) // left over from the handshake
			continue
		}
		if err != nil {
			break
		}
	}
	if c.closing.Load() {
		return
	}
	c.peerGone()
	c.wakeSelf()
}

// peerGone records that the peer's end of a socket closed: the liveness
// socket's, or a wake-up socket's. The close word is written before the
// peer closes its sockets, so it is visible now if the peer closed in
// order.
func (c *Conn) peerGone() {
	if atomic.LoadUint64(c.peerClosedp) != 0 {
		c.peerEnd.CompareAndSwap(nil, errClosedPeer)
	} else {
		c.peerEnd.CompareAndSwap(nil, errPeerDied)
	}
}

// waitClear waits until *p is 0. Close uses it to wait out a
// ReceiveExclusive, which has been woken and returns in a moment.
func waitClear(p *uint64) {
	for i := 0; atomic.LoadUint64(p) != 0; i++ {
		if i < 100 {
			runtime.Gosched()
		} else {
			time.Sleep(10 * time.Microsecond)
		}
	}
}

// wakeSelf wakes this side's parked callers for good, when the connection
// has ended: it shuts the receiving half of both wake-up sockets, which
// stay readable from then on.
func (c *Conn) wakeSelf() {
	wakeShutdown(c.txPark.fd)
	wakeShutdown(c.rxPark.fd)
}

// parker parks a goroutine on a wake-up socket through the runtime's
// netpoller.
//
// The order of a wait is what keeps it from sleeping through a signal.
// RawConn.Read first resets the netpoller's readiness of the socket, then
// calls check, which drains the socket and calls sleep: sleep stores a new
// announcement and looks at the ring once more. A peer can signal that
// announcement only after the store, so after the reset, and the
// netpoller keeps the signal: the park then ends at once. Announcing
// before the reset would lose wake-ups, rarely, under load: a producer
// descheduled between writing a message and loading the wait word could
// read the announcement made after the consumer had already taken that
// message, and signal it before the reset, which would discard the
// signal; its next message would find the announcement signalled and send
// nothing, while the consumer slept (docs/ump.md, "Waiting").
type parker struct {
	f     *os.File
	rc    syscall.RawConn
	fd    int
	sleep func() bool // announces, then reports whether the wait is over already
	gone  func()      // records that the peer's end of the socket closed
	armed bool        // the next call of check calls sleep
	once  func(uintptr) bool
	buf   [64]byte // what a drain reads

	// A context's end interrupts a wait: stop, registered with
	// context.AfterFunc, sets the read deadline in the past. The
	// registration is kept from one wait to the next while the waits use
	// contexts with one Done channel (a Serve loop's, a program's), so
	// that parking does not register and allocate every time.
	done    <-chan struct{} // Done of the context stop is registered with
	cancel  func() bool     // unregisters stop
	stop    func()          // bound once
	stopped chan struct{}   // stop has set the read deadline
	expired bool            // the read deadline is in the past: clear it before the next wait
}

func newParker(fd int, name string, sleep func() bool, gone func()) (*parker, error) {
	f := os.NewFile(uintptr(fd), name) // fd is non-blocking: f is pollable
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	p := &parker{f: f, rc: rc, fd: fd, sleep: sleep, gone: gone, stopped: make(chan struct{}, 1)}
	p.once = p.check
	p.stop = func() {
		p.f.SetReadDeadline(longAgo)
		p.stopped <- struct{}{}
	}
	return p, nil
}

var longAgo = time.Unix(1, 0)

// check is the function RawConn.Read calls: the first time, once the
// readiness has been reset, it drains the socket of earlier signals (they
// were for announcements already withdrawn; left there, they would fill
// the socket until a signal no longer fits), then announces and looks
// (sleep); after any wake-up it ends the wait, so that the caller looks at
// the ring and announces again with a new number before it sleeps. A peer
// signals each announcement once: sleeping again under an announcement it
// has already signalled could sleep forever. The drain comes before the
// announcement, so it cannot take a signal of it.
func (p *parker) check(uintptr) bool {
	if !p.armed {
		return true
	}
	p.armed = false
	if wakeDrain(p.fd, &p.buf) {
		p.gone() // sleep sees it and reports the wait over
	}
	return p.sleep()
}

// watch makes the end of ctx interrupt waits: it registers stop with ctx,
// unless it is registered already with a context of the same Done channel.
func (p *parker) watch(ctx context.Context) error {
	done := ctx.Done()
	if done == p.done {
		return nil
	}
	if err := p.unwatch(); err != nil {
		return err
	}
	if done != nil {
		p.done, p.cancel = done, context.AfterFunc(ctx, p.stop)
	}
	return nil
}

// unwatch undoes watch, and clears a deadline stop has set, which would
// otherwise end the waits of another context.
func (p *parker) unwatch() error {
	if p.cancel == nil {
		return nil
	}
	if !p.cancel() {
		<-p.stopped // it ran, or is running: wait for its deadline
		p.expired = true
	}
	p.done, p.cancel = nil, nil
	if p.expired {
		if err := p.f.SetReadDeadline(time.Time{}); err != nil {
			return fmt.Errorf("ump: wait: %w", err)
		}
		p.expired = false
	}
	return nil
}

// wait announces that the caller sleeps and parks the calling goroutine
// until the socket is signalled, unless the look after the announcement
// finds the wait over, or the context ends.
// The caller withdraws the announcement and looks at the ring again after
// wait returns.
func (p *parker) wait(ctx context.Context) error {
	if err := p.watch(ctx); err != nil {
		return err
	}
	p.armed = true
	err := p.rc.Read(p.once)
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("ump: %w", ctxErr)
	}
	return fmt.Errorf("ump: wait: %w", err)
}
