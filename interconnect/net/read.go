package net

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	stdnet "net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// The reading side of a link.
//
// A frame goes from the TCP connection to its taker without a goroutine
// between them, as in a plain TCP program: a Receive that finds nothing
// waiting reads the connection itself. Handing each frame from a reading
// goroutine to the receiving one would cost a wake-up per frame, and on
// a machine with idle CPUs the scheduler's hunt for work with it: that
// doubled a round trip on the 2-CPU machine chanos is built on
// (docs/net.md, "Reading").
//
// The rest of a record may take long to arrive (a slow network, a peer
// that stalls), and a Receive must still end with its context. A Receive
// that reads a record not yet whole in the buffer therefore reads it
// under a read deadline that its context's end sets; a read so cut
// short leaves the record, as far as it came, in connReader.part, and
// whoever reads next (a Receive or the background reader) goes on from
// there. The TCP connection goes on.
//
// Records must be read also while nobody receives: the acknowledgements
// that free the send window, the peer's close, keepalives. Each TCP
// connection has a goroutine of its own for that, the background reader.
// Whoever reads holds the link's reading turn (Link.rturn); the
// background reader takes it only when no Receive waits, and gives it up
// after the record at hand once one does. It takes it when kicked: by a
// sender waiting for room, by Close waiting for its acknowledgement, by
// a break to notice, by the link's keepalive tick, so that an idle
// connection is read at least that often, and AckDelay after a Receive
// ends (readOnLater). That last kick is what reads the peer's close,
// which the peer's Close waits for, when the application has received
// and gone on to other work: without it the close would wait for the
// keepalive tick. An application that receives again within AckDelay
// finds the turn free and reads itself, as before; one that comes back
// later, or just as the kick comes, takes its next frame from the
// background reader, at the cost of one wake-up.

// connReader is the reading side of one TCP connection of the link.
type connReader struct {
	c    stdnet.Conn
	br   *bufio.Reader
	mac  *recordMAC // checks the peer's tags, in the authenticated-only mode
	gen  uint64
	kick chan struct{} // wakes the background reader
	stop chan struct{} // closed once the connection is not to be read any more
	once sync.Once
	// live notes when c last read anything, for its liveness watch
	// (Link.watch), which unwatch stops.
	live    *liveConn
	unwatch func()
	// done is when a record last completed, or had its header read
	// (now()); need is how much of the record begun (begin) is still to
	// come, 0 between records: the watch's record-progress rule
	// (Options.MinRecordRate).
	done atomic.Int64
	need atomic.Int64

	// A Receive's read is interrupted by its context's end through c's
	// read deadline; dl orders that with the end of the read, so that the
	// deadline never outlives it.
	dl      sync.Mutex
	waiting bool // a Receive reads and may be interrupted
	kicked  bool // c's read deadline was set to interrupt it

	// part is the record a read cut short by a deadline left, as far as
	// it came; nil if none. Only the holder of the reading turn uses it.
	part    *partRecord
	partRec partRecord // what part points at, so that a record allocates nothing for it
}

// partRecord is a record whose header has been read and whose rest had
// not all arrived when a deadline cut its read short.
type partRecord struct {
	hb  [recHeaderSize]byte
	buf []byte // what the rest goes into: the payload, or (authenticated-only mode) the whole record
	got int    // bytes of buf read
}

// liveConn is a TCP connection of the link that notes when it last read
// anything. It lies under TLS, if any, so that the bytes of a TLS record
// count as they arrive, not once the record is whole.
type liveConn struct {
	stdnet.Conn
	last atomic.Int64 // when a read last returned bytes (now())
}

func (c *liveConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.last.Store(now())
	}
	return n, err
}

// liveOf returns the liveConn under c, or nil if there is none.
func liveOf(c stdnet.Conn) *liveConn {
	switch c := c.(type) {
	case *liveConn:
		return c
	case *tlsConn:
		return liveOf(c.raw)
	}
	return nil
}

func (r *connReader) stopped() bool {
	select {
	case <-r.stop:
		return true
	default:
		return false
	}
}

// aLongTimeAgo is a read deadline that interrupts a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// startReaderLocked makes c, the link's TCP connection of generation
// gen, the one the link reads, and starts its background reader and its
// watch. The caller holds mu.
func (l *Link) startReaderLocked(c stdnet.Conn, br *bufio.Reader, mac *recordMAC, gen uint64) {
	r := &connReader{c: c, br: br, mac: mac, gen: gen, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	if r.live = liveOf(c); r.live == nil {
		// Not one of the link's own connections: only its records,
		// once read, tell that it is alive (readRecord).
		r.live = &liveConn{}
	}
	r.live.last.Store(now())
	r.done.Store(now())
	r.unwatch = l.watch(r)
	l.rcur = r
	l.wg.Add(1)
	go l.background(r)
}

// dropReader stops reading r's connection and closes it, once; report
// says whether its break is reported to the link's goroutine, which then
// resumes the connection (not when the link has ended, or when that
// goroutine stops it itself).
func (l *Link) dropReader(r *connReader, err error, report bool) {
	r.once.Do(func() {
		l.stopReading(r)
		r.c.Close()
		if !report || interconnect.IsEnd(err) {
			return
		}
		l.o.Logger.Debug("net: connection broke", "err", err, "gen", r.gen)
		l.brokenGen.Store(r.gen)
		signal(l.brokenSig)
	})
}

// keepReader stops reading r's connection, once, as dropReader does, but
// leaves it open, for Close to close it lingering; false if r was stopped
// already (its connection closed). A read in progress on it, a Receive's
// or the background reader's, fails at once; its failure reports nothing,
// and no read follows, r being stopped.
func (l *Link) keepReader(r *connReader) bool {
	kept := false
	r.once.Do(func() {
		l.stopReading(r)
		r.c.SetReadDeadline(aLongTimeAgo)
		kept = true
	})
	return kept
}

// stopReading stops r and its watch; r's connection is left as it is.
func (l *Link) stopReading(r *connReader) {
	close(r.stop)
	l.mu.Lock()
	if l.rcur == r {
		l.rcur = nil
	}
	unwatch := r.unwatch // set under mu, before the watch could call this
	l.mu.Unlock()
	unwatch()
}

// kickReader wakes the current connection's background reader, which
// reads if nobody else does.
func (l *Link) kickReader() {
	l.mu.Lock()
	r := l.rcur
	l.mu.Unlock()
	if r != nil {
		signal(r.kick)
	}
}

// awaitReaders waits until nobody reads a stopped connection any more:
// the one who held the reading turn has finished the record at hand.
func (l *Link) awaitReaders() {
	l.rturn.Lock()
	//lint:ignore SA2001 taking the turn is the wait: its holder is done once it has it
	l.rturn.Unlock()
	signal(l.inboxSig) // a Receive that found the turn taken tries again
}

// watch takes r's connection for broken once nothing has been read
// from it for DeadAfter (a cut cable resets nothing): closed, so that its
// reader and any write blocked on it fail, and the connection is resumed.
// Any byte read counts, not only whole records: a record may take longer
// than DeadAfter to arrive over a slow network, and its connection is
// alive all the while. But only so slow (recordOverdue): bytes that come
// while no record completes are the peer's keepalives swallowed by a
// record whose corrupted length the reader waits out. It runs on a timer
// of its own, apart from the goroutines that may block on the connection.
// The returned function stops it.
func (l *Link) watch(r *connReader) func() {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	period := max(l.o.DeadAfter/4, time.Millisecond)
	mu.Lock()
	t = time.AfterFunc(period, func() {
		if time.Duration(now()-r.live.last.Load()) > l.o.DeadAfter {
			l.dropReader(r, errors.New("nothing read for too long"), true)
			return
		}
		if l.recordOverdue(r) {
			l.dropReader(r, errors.New("no record completed for too long while bytes came (a corrupted length?)"), true)
			return
		}
		mu.Lock()
		if !stopped {
			t.Reset(period)
		}
		mu.Unlock()
	})
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// tlsRecordSlack is how much a TLS record may hold ahead of the next
// record's header: the record-progress rule allows for it, as the link
// sees no header while TLS waits for the rest of its record.
const tlsRecordSlack = 16<<10 + 256

// recordOverdue reports whether no record of r's connection has completed
// for longer than Options.MinRecordRate allows: DeadAfter, plus the rest
// of the record under way and tlsRecordSlack at that rate.
func (l *Link) recordOverdue(r *connReader) bool {
	rate := int64(l.o.MinRecordRate)
	if rate <= 0 {
		return false
	}
	allow := l.o.DeadAfter + time.Duration((r.need.Load()+tlsRecordSlack)*int64(time.Second)/rate)
	return time.Duration(now()-r.done.Load()) > allow
}

// background is r's background reader (see above), until r is stopped.
func (l *Link) background(r *connReader) {
	defer l.wg.Done()
	for {
		if !l.rcvWant.Load() && l.rturn.TryLock() {
			for !r.stopped() {
				if _, err := l.readRecord(r, true); err != nil {
					l.dropReader(r, err, true)
					break
				}
				if l.rcvWant.Load() {
					break
				}
			}
			l.rturn.Unlock()
			signal(l.inboxSig)
		}
		select {
		case <-r.stop:
			return
		case <-l.done:
			// end stops the current reader already (dropReader runs
			// once); a reader never outlives the link, whatever the order.
			l.dropReader(r, nil, false)
			return
		case <-r.kick:
		}
	}
}

// SwapReceiveBuffer implements interconnect.BufferSwapper: it hands over
// the buffer of the frame the last Receive set, which the link then
// neither reuses nor frees, and takes spare among the buffers it reuses
// for the records it reads.
func (l *Link) SwapReceiveBuffer(spare []byte) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.cur
	l.cur = nil
	l.putBufLocked(spare)
	return b
}

// Receive waits for the next frame and sets *in to it; in.Frame is valid
// until the next Receive. A malformed frame ends the link with
// ErrProtocol.
func (l *Link) Receive(ctx context.Context, in *interconnect.Incoming) error {
	l.mu.Lock()
	if l.cur != nil {
		l.putBufLocked(l.cur)
		l.cur = nil
	}
	if l.noFrameLocked() {
		l.rcvWant.Store(true)
		for l.noFrameLocked() {
			if err := l.receiveEndLocked(); err != nil {
				r := l.rcur
				peerClosed := l.endErr == nil
				l.mu.Unlock()
				l.rcvWant.Store(false)
				if peerClosed && r != nil {
					// The peer closed: all that is left to read is the
					// end of its stream, which its Close waits for
					// (lingerClose). The background reader reads on
					// for it now, not at the next keepalive tick.
					signal(r.kick)
				}
				*in = interconnect.Incoming{}
				return err
			}
			r := l.rcur
			l.mu.Unlock()
			if testHookTakeTurn != nil {
				testHookTakeTurn(l)
			}
			wait := true
			if r != nil && l.rturn.TryLock() {
				// The turn's last holder may have pushed a frame, or read
				// the peer's close, since the look above: it is not to be
				// left waiting while this Receive reads the connection.
				var err error
				if l.nothingToTake() {
					err = l.readFor(ctx, r)
				}
				l.rturn.Unlock()
				if err != nil {
					l.rcvWant.Store(false)
					l.readOnLater()
					*in = interconnect.Incoming{}
					return err
				}
				wait = false
			}
			if wait {
				select {
				case <-l.inboxSig:
				case <-l.done:
				case <-ctx.Done():
					l.rcvWant.Store(false)
					l.readOnLater()
					*in = interconnect.Incoming{}
					return ctx.Err()
				}
			}
			l.mu.Lock()
		}
		l.rcvWant.Store(false)
	}
	f := l.inbox[l.inboxHead]
	l.inbox[l.inboxHead] = inFrame{}
	l.inboxHead++
	if l.inboxHead == len(l.inbox) {
		l.inbox, l.inboxHead = l.inbox[:0], 0
	}
	l.inboxBytes -= len(f.buf)
	l.consumed = f.seq
	l.cur = f.buf
	if f.rec != nil {
		l.cur = f.rec
	}
	l.sinceAck++
	l.sinceAckBytes += len(f.buf)
	// A quarter of the window, in frames or in bytes, is acknowledged at
	// once: large frames fill the window's bytes long before its frames.
	// The Receive writes it itself: waking the link's goroutine for it
	// would, on a machine with few CPUs, leave it waiting for one while
	// the sender's window stays full.
	ackNow := l.sinceAck >= max(1, l.o.WindowFrames/4) || l.sinceAckBytes >= l.o.WindowBytes/4
	l.mu.Unlock()
	if ackNow {
		l.writeAck(false)
	}
	l.readOnLater()
	frame, caps, err := splitRefs(f.buf)
	if err != nil {
		*in = interconnect.Incoming{}
		return l.fail(interconnect.Violation(err))
	}
	if err := in.SetFrame(frame, caps); err != nil {
		return l.fail(interconnect.Violation(fmt.Errorf("bad frame: %w", err)))
	}
	return nil
}

// testHookTakeTurn, if set, runs in a Receive that found nothing to take,
// before it tries to take the reading turn.
var testHookTakeTurn func(l *Link)

// noFrameLocked says whether a Receive has no frame to take now: the
// inbox is empty, or the link's end is to be returned before what is
// left in it.
func (l *Link) noFrameLocked() bool { return l.inboxHead == len(l.inbox) || l.endNow }

// nothingToTake says whether a Receive still finds nothing to take: no
// frame, and no end to return.
func (l *Link) nothingToTake() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.noFrameLocked() && l.receiveEndLocked() == nil
}

// readOnLater has the link's goroutine, AckDelay from now, write the
// acknowledgement of what was taken (if no frame of this side's carried
// it meanwhile) and kick the background reader, which then reads on if
// no Receive does (see the top of this file). A timer already set serves.
func (l *Link) readOnLater() {
	if !l.ackArmed.Swap(true) {
		signal(l.ackArm)
	}
}

// receiveEndLocked is what a Receive that finds no frame returns instead
// of waiting: the link's end, or the peer's close; nil if it may wait.
func (l *Link) receiveEndLocked() error {
	if l.endErr != nil {
		return l.endErr
	}
	if l.peerClosed {
		return interconnect.Ended(interconnect.ErrClosed, errors.New("chanos: connection closed by the peer"))
	}
	return nil
}

// readFor reads r's records, as the holder of the reading turn, until
// one gives Receive something to take (a frame, the peer's close) or r
// breaks; it returns an error only when ctx ends first.
func (l *Link) readFor(ctx context.Context, r *connReader) error {
	for !r.stopped() {
		var got bool
		var err error
		if r.part == nil && l.whole(r) {
			got, err = l.readRecord(r, false)
		} else {
			// The header has not come yet, or the record has not all
			// come: reading may wait, as long as ctx allows.
			err = r.interruptible(ctx, func() (err error) {
				got, err = l.readRecord(r, false)
				return err
			})
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil {
				return ctx.Err() // r.part keeps what came
			}
			l.dropReader(r, err, true)
			return nil
		}
		if got {
			return nil
		}
	}
	return nil
}

// whole says whether all of r's next record is in r's buffer, its header
// included: reading it cannot wait. A record over the maximum frame size
// counts as whole, for readRecord to refuse it.
func (l *Link) whole(r *connReader) bool {
	if r.br.Buffered() < recHeaderSize {
		return false
	}
	h, _ := r.br.Peek(recHeaderSize)
	n := int64(binary.LittleEndian.Uint32(h[4:]))
	if n > int64(l.o.MaxFrameSize) {
		return true
	}
	need := recHeaderSize + int(n)
	if r.mac != nil {
		need += tagSize
	}
	return r.br.Buffered() >= need
}

// interruptible runs read, which reads r, so that ctx's end interrupts
// it through r's read deadline: read then fails with
// os.ErrDeadlineExceeded, and must leave r as it can go on from.
func (r *connReader) interruptible(ctx context.Context, read func() error) error {
	if ctx.Done() == nil {
		return read()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("net: read: %w", os.ErrDeadlineExceeded)
	}
	r.dl.Lock()
	r.waiting = true
	r.dl.Unlock()
	stop := context.AfterFunc(ctx, func() {
		r.dl.Lock()
		if r.waiting {
			r.kicked = true
			r.c.SetReadDeadline(aLongTimeAgo)
		}
		r.dl.Unlock()
	})
	err := read()
	stop()
	r.dl.Lock()
	r.waiting = false
	if r.kicked {
		r.kicked = false
		r.c.SetReadDeadline(time.Time{})
	}
	r.dl.Unlock()
	return err
}

// readRecord reads r's next record and acts on it; got says whether it
// gave Receive something to take, and wake whether a Receive waiting for
// it is woken (it is not when it reads the record itself). The caller
// holds the reading turn.
func (l *Link) readRecord(r *connReader, wake bool) (got bool, err error) {
	var hb [recHeaderSize]byte
	// The record's payload and the buffer it lies in, read with the tag
	// (authenticated-only mode).
	var payload, rec []byte
	switch {
	case r.part != nil:
		// The rest of a record whose read a deadline cut short.
		p := r.part
		if err := r.fill(); err != nil {
			return false, err
		}
		hb = p.hb
		if r.mac == nil {
			payload = p.buf
		} else if payload, rec, err = l.openWhole(r.mac, p.buf); err != nil {
			return false, err
		}
	case r.mac == nil:
		// Peeked first: a read cut short by a deadline takes nothing.
		h, err := r.br.Peek(recHeaderSize)
		if err != nil {
			return false, err
		}
		copy(hb[:], h)
		r.br.Discard(recHeaderSize)
	default:
		if payload, rec, err = l.readTagged(r, &hb); err != nil {
			return false, err
		}
	}
	t := now()
	r.live.last.Store(t)
	r.done.Store(t)
	h := parseHeader(hb[:])
	if h.flags != 0 || h.reserved != 0 {
		return false, l.fail(interconnect.Violation(fmt.Errorf("a record with flags %#x and reserved bytes %#x", h.flags, h.reserved)))
	}
	switch h.typ {
	case recData:
		if h.length < wire.HeaderSize || int64(h.length) > int64(l.o.MaxFrameSize) {
			return false, l.fail(interconnect.Violation(fmt.Errorf("a frame of %d bytes (the limit is %d)", h.length, l.o.MaxFrameSize)))
		}
		n := int(h.length)
		l.mu.Lock()
		if l.peerClosed {
			// After its close a peer sends acknowledgements only.
			l.mu.Unlock()
			return false, l.fail(interconnect.Violation(fmt.Errorf("frame %d after the peer's close", h.seq)))
		}
		if h.seq != l.received+1 {
			want := l.received + 1
			l.mu.Unlock()
			return false, l.fail(interconnect.Violation(fmt.Errorf("frame %d where %d was due", h.seq, want)))
		}
		if len(l.inbox)-l.inboxHead >= l.o.WindowFrames || l.inboxBytes+n > l.o.WindowBytes {
			l.mu.Unlock()
			return false, l.fail(interconnect.Violation(errors.New("the peer overran the receive window")))
		}
		buf := payload
		if buf == nil {
			buf = l.getBufLocked(n)
			l.mu.Unlock()
			r.begin(hb, buf)
			if err := r.fill(); err != nil {
				return false, err
			}
			l.mu.Lock()
		}
		l.pushInboxLocked(inFrame{seq: h.seq, buf: buf, rec: rec})
		l.inboxBytes += n
		l.received = h.seq
		err := l.ackLocked(h.ack)
		l.mu.Unlock()
		if err != nil {
			return false, l.fail(err)
		}
		if wake {
			signal(l.inboxSig)
		}
		return true, nil
	case recAck:
		if h.length != 0 || h.seq != 0 {
			return false, l.fail(interconnect.Violation(errors.New("a malformed acknowledgement")))
		}
		l.mu.Lock()
		err := l.ackLocked(h.ack)
		l.mu.Unlock()
		if err != nil {
			return false, l.fail(err)
		}
		return false, nil
	case recClose:
		l.mu.Lock()
		if l.peerClosed {
			l.mu.Unlock()
			return false, l.fail(interconnect.Violation(fmt.Errorf("a second close from the peer (%d)", h.seq)))
		}
		if h.length != 0 || h.seq != l.received+1 {
			l.mu.Unlock()
			return false, l.fail(interconnect.Violation(errors.New("a malformed close")))
		}
		l.received = h.seq
		l.peerClosed = true
		l.roomLocked()
		err := l.ackLocked(h.ack)
		l.mu.Unlock()
		if err != nil {
			return false, l.fail(err)
		}
		l.closeGone()
		signal(l.inboxSig)
		signal(l.ackKick)
		// A Close of this side waits for the acknowledgement of its own
		// close or for the peer's close: this is the latter.
		signal(l.ackedSig)
		return true, nil
	default:
		return false, l.fail(interconnect.Violation(fmt.Errorf("a record of type %d", h.typ)))
	}
}

// pushInboxLocked appends f to the inbox. Receive takes frames from its
// head, and resets it only when it empties, which a receiver that lags
// behind may never let happen: the frames taken are dropped from the
// front instead, when the inbox is full and they are at least half of
// it. Its room then grows only while more than half of it is frames
// waiting, at most the window, so that it stays within a few windows,
// and a compaction moves no more frames than were taken since the last.
func (l *Link) pushInboxLocked(f inFrame) {
	if len(l.inbox) == cap(l.inbox) && l.inboxHead > 0 && 2*l.inboxHead >= len(l.inbox) {
		n := copy(l.inbox, l.inbox[l.inboxHead:])
		clear(l.inbox[n:]) // the frames moved, not to be held twice
		l.inbox, l.inboxHead = l.inbox[:n], 0
	}
	l.inbox = append(l.inbox, f)
}

// readTagged reads a record of the authenticated-only mode into hb and a
// window buffer, and checks its tag. It returns the payload (nil if
// empty) and, when the payload lies in a larger buffer (a record larger
// than the reader's buffer, read whole), that buffer. Until the tag is
// checked nothing in the header is trusted but its length, bounded by the
// maximum frame size, and a record that fails is a broken TCP connection
// (errBadTag), not the peer's violation.
func (l *Link) readTagged(r *connReader, hb *[recHeaderSize]byte) (payload, whole []byte, err error) {
	br, m := r.br, r.mac
	h, err := br.Peek(recHeaderSize)
	if err != nil {
		return nil, nil, err
	}
	copy(hb[:], h)
	n := int64(binary.LittleEndian.Uint32(hb[4:]))
	if n > int64(l.o.MaxFrameSize) {
		return nil, nil, l.badTag(fmt.Errorf("%w: a record of %d bytes, over the maximum, before its tag", errBadTag, n))
	}
	total := recHeaderSize + int(n) + tagSize
	if total > br.Size() {
		// Read whole into a window buffer; the payload stays where it is.
		l.mu.Lock()
		whole = l.getBufLocked(total)
		l.mu.Unlock()
		r.begin(*hb, whole)
		if err := r.fill(); err != nil {
			return nil, nil, err
		}
		return l.openWhole(m, whole)
	}
	// The whole record in the reader's buffer: checked in place. Peek
	// takes nothing, so a deadline may cut it short. Only a Peek that
	// must wait for the rest tells the watch how much is to come: the
	// usual record is buffered whole already.
	waits := br.Buffered() < total
	if waits {
		r.need.Store(int64(total))
	}
	rec, err := br.Peek(total)
	if err != nil {
		return nil, nil, err
	}
	if waits {
		r.need.Store(0)
	}
	if n > 0 {
		l.mu.Lock()
		payload = l.getBufLocked(int(n))
		l.mu.Unlock()
	}
	ok := m.open(rec[:total-tagSize], rec[total-tagSize:])
	copy(payload, rec[recHeaderSize:])
	br.Discard(total)
	if !ok {
		l.mu.Lock()
		l.putBufLocked(payload)
		l.mu.Unlock()
		return nil, nil, l.badTag(errBadTag)
	}
	return payload, nil, nil
}

// openWhole checks the tag of whole, a record of the authenticated-only
// mode read whole into a window buffer, and returns its payload.
func (l *Link) openWhole(m *recordMAC, whole []byte) (payload, rec []byte, err error) {
	total := len(whole)
	if !m.open(whole[:total-tagSize], whole[total-tagSize:]) {
		l.mu.Lock()
		l.putBufLocked(whole)
		l.mu.Unlock()
		return nil, nil, l.badTag(errBadTag)
	}
	return whole[recHeaderSize : total-tagSize], whole, nil
}

// begin starts a record whose rest, after the header hb, goes into buf.
func (r *connReader) begin(hb [recHeaderSize]byte, buf []byte) {
	r.partRec = partRecord{hb: hb, buf: buf}
	r.part = &r.partRec
	r.need.Store(int64(len(buf)))
}

// fill reads the rest of the record begun, and ends it once it has all
// come; a read cut short keeps what came in r.part.
func (r *connReader) fill() error {
	p := r.part
	n, err := io.ReadFull(r.br, p.buf[p.got:])
	p.got += n
	if err != nil {
		return err
	}
	r.part = nil
	r.need.Store(0)
	r.done.Store(now())
	return nil
}
