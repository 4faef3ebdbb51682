package net

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	stdnet "net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// ErrTooLarge is returned by a send of a frame larger than the
// connection's maximum frame size. The link stays open.
var ErrTooLarge = errors.New("net: frame larger than the connection's maximum frame size")

// Link is one end of a net connection (interconnect.Link, PartsSender,
// PeerWatcher and BufferSwapper): chanos frames over TCP, sequenced, acknowledged and kept
// until acknowledged, so that a broken TCP connection is resumed on a new
// one without loss, duplicate or reordering.
//
// A send copies its frame into the send window and writes it to the
// current TCP connection, if there is one; it blocks only while the
// window is full. A Receive reads the TCP connection itself, and one
// goroutine per TCP connection reads it while nobody receives (read.go);
// one more per link sends delayed acknowledgements and keepalives and,
// when the TCP connection breaks, redials (the dialing side) or waits for
// the peer's redial (the accepting side); a third writes the frames of a
// sender that streams, several to a write.
type Link struct {
	o      Options
	id     [16]byte
	dialer bool
	addr   string // the dialing side's peer
	// authOnly: TLS.AuthOnly, records in the clear with tags.
	authOnly bool

	wmu     sync.Mutex // the TCP connection's writer
	bw      *bufio.Writer
	hdr     [recHeaderSize]byte
	scratch []outFrame // the records pump writes (under wmu)
	live    bool       // bw writes to the current connection (under wmu)
	wmac    *recordMAC // tags this side's records, in the authenticated-only mode (under wmu)

	mu            sync.Mutex
	conn          stdnet.Conn // the current TCP connection; nil once ended
	gen           uint64      // counts TCP connections; a reader reports its own
	peerMax       int
	peerWinFrames int
	peerWinBytes  int
	nextSeq       uint64
	unacked       []outFrame // sent, not yet acknowledged, in order
	unackedBytes  int
	peerAcked     uint64
	written       uint64 // the last sequence number written on the current connection
	flushed       uint64 // the last one whose write has returned (see ackLocked)
	closeSeq      uint64 // the sequence number of this side's close record
	closing       bool
	inbox         []inFrame // received, not yet taken
	inboxHead     int
	inboxBytes    int
	received      uint64
	consumed      uint64
	sinceAck      int // frames taken since the last acknowledgement written
	sinceAckBytes int // and their bytes
	ackSent       uint64
	peerClosed    bool
	cur           []byte   // the frame the last Receive returned
	free          [][]byte // buffers to reuse
	freeBytes     int
	endErr        error
	endNow        bool // Receive returns endErr before what is left in the inbox

	done     chan struct{} // closed when the link ends
	gone     chan struct{} // closed when the peer has closed or the link ended
	goneOnce sync.Once
	roomCh   chan struct{} // closed when the window gains room, if waited on (under mu)
	inboxSig chan struct{}
	ackedSig chan struct{}
	ackKick  chan struct{}
	// ackArm sets the link goroutine's timer that acknowledges and kicks
	// the background reader AckDelay after a Receive (readOnLater);
	// ackArmed says it is set.
	ackArm   chan struct{}
	ackArmed atomic.Bool
	pumpKick chan struct{} // wakes writeLoop
	// brokenGen is the generation of the last TCP connection reported
	// broken, and brokenSig wakes the link's goroutine for it.
	brokenGen atomic.Uint64
	brokenSig chan struct{}
	resumeCh  chan *resumeReq
	lastWrt   atomic.Int64
	badTags   atomic.Uint64

	// The reading turn (read.go): held by whoever reads the current TCP
	// connection, whose reading side is rcur (under mu; nil while none).
	// rcvWant says that a Receive waits for a frame.
	rturn   sync.Mutex
	rcur    *connReader
	rcvWant atomic.Bool

	ctx        context.Context // ends when the link does: it bounds redials
	cancelCtx  context.CancelFunc
	peerFP     [32]byte // the accepting side's record of the client certificate, with TLS
	serverName string   // the server name the connection opened with, with TLS (accepting side)
	closeOnce  sync.Once
	wg         sync.WaitGroup
	onEnd      func()
}

type outFrame struct {
	seq uint64
	typ uint8
	buf []byte
	// rec, for a frame too large for the buffered writer, is the window
	// buffer buf lies in, with room for the record's header before it
	// and, in the authenticated-only mode, its tag after it, so that the
	// record is tagged and written without a copy.
	rec []byte
}

type inFrame struct {
	seq uint64
	buf []byte
	rec []byte // the window buffer buf lies in, if not buf itself
}

// bufSize is the size of the buffered reader and writer of each TCP
// connection.
const bufSize = 64 << 10

// wholeRecord says whether a frame of n bytes is kept in a buffer with
// room for its record around it: when the record is larger than the
// buffered reader and writer, so that it goes to the connection in one
// write, not copied through the writer's buffer.
func (l *Link) wholeRecord(n int) bool {
	return recHeaderSize+n+tagSize > bufSize
}

// resumeReq hands the accepting side's link a TCP connection whose hello
// asks to resume it.
type resumeReq struct {
	c  stdnet.Conn
	br *bufio.Reader
	h  hello
}

func newLink(o Options, id [16]byte, dialer bool) *Link {
	ctx, cancel := context.WithCancel(context.Background())
	return &Link{
		ctx:       ctx,
		cancelCtx: cancel,
		o:         o,
		id:        id,
		dialer:    dialer,
		authOnly:  o.TLS != nil && o.TLS.AuthOnly,
		nextSeq:   1,
		done:      make(chan struct{}),
		gone:      make(chan struct{}),
		inboxSig:  make(chan struct{}, 1),
		ackedSig:  make(chan struct{}, 1),
		ackKick:   make(chan struct{}, 1),
		ackArm:    make(chan struct{}, 1),
		pumpKick:  make(chan struct{}, 1),
		brokenSig: make(chan struct{}, 1),
		resumeCh:  make(chan *resumeReq),
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func now() int64 { return time.Now().UnixNano() }

// Kind returns "net".
func (l *Link) Kind() string { return "net" }

// ServerName returns, on the accepting side of a TLS connection, the
// server name the dialing side asked for (TLS.ServerName), which tells an
// accepting program which of the connections it was told to expect this
// one is; "" otherwise.
func (l *Link) ServerName() string { return l.serverName }

// PeerFingerprint returns, on the accepting side of a TLS connection, the
// fingerprint of the client's certificate; zero otherwise.
func (l *Link) PeerFingerprint() [32]byte { return l.peerFP }

// AuthFailures returns how many records, in the authenticated-only mode
// (TLS.AuthOnly), failed their authentication: each ended its TCP
// connection, and the connection resumed on a new one.
func (l *Link) AuthFailures() uint64 { return l.badTags.Load() }

// ID returns the connection's id, which both sides share. It is the
// token that resumes the connection: it is not to be shown to others.
func (l *Link) ID() [16]byte { return l.id }

// Pending returns how many frames have arrived that Receive has not
// taken.
func (l *Link) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.inbox) - l.inboxHead
}

// Resumes returns how many times the connection has been resumed on a
// new TCP connection.
func (l *Link) Resumes() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen == 0 {
		return 0
	}
	return l.gen - 1
}

// Gone returns a channel closed once the peer has closed its end or the
// link has ended.
func (l *Link) Gone() <-chan struct{} { return l.gone }

func (l *Link) closeGone() { l.goneOnce.Do(func() { close(l.gone) }) }

// SendFrame sends frame, waiting for room in the send window until ctx
// ends. Its capabilities must be RefCaps, which travel as their irefs
// (docs/net.md, "Capabilities"); any other is refused with
// interconnect.ErrCapsUnsupported: descriptors do not cross machines.
func (l *Link) SendFrame(ctx context.Context, frame []byte, caps []wire.Cap) error {
	if len(caps) > 0 {
		refs, err := refTrailer(caps)
		if err != nil {
			return err
		}
		_, err = l.send(ctx, true, frame, refs, nil)
		return err
	}
	_, err := l.send(ctx, true, frame, nil, nil)
	return err
}

// TrySendFrame sends frame if the send window has room now.
func (l *Link) TrySendFrame(frame []byte, caps []wire.Cap) (bool, error) {
	if len(caps) > 0 {
		refs, err := refTrailer(caps)
		if err != nil {
			return false, err
		}
		return l.send(context.Background(), false, frame, refs, nil)
	}
	return l.send(context.Background(), false, frame, nil, nil)
}

// RefCap is a capability that crosses machines: an iref, token and all,
// which the receiver binds to reach what the sender handed over (a
// channel endpoint, re-bound through the monitors). A net link carries a
// frame's RefCaps after the frame, and gives the receiver RefCaps. Closing
// one does nothing; the sender withdraws what it names.
type RefCap struct{ Ref wire.Iref }

// Close implements wire.Cap.
func (*RefCap) Close() error { return nil }

// refTrailer encodes caps, which must all be RefCaps, as a record's
// trailer: their irefs in order.
func refTrailer(caps []wire.Cap) ([]byte, error) {
	b := make([]byte, 0, len(caps)*wire.IrefSize)
	for i, c := range caps {
		r, ok := c.(*RefCap)
		if !ok {
			return nil, fmt.Errorf("net: capability %d of the frame is a %T, not an iref: %w", i, c, interconnect.ErrCapsUnsupported)
		}
		b = binary.LittleEndian.AppendUint64(b, r.Ref.Machine)
		b = binary.LittleEndian.AppendUint64(b, r.Ref.Export)
		b = append(b, r.Ref.Token[:]...)
	}
	return b, nil
}

// SendParts sends the frame made of head, body and tail, each copied once
// into the send window.
func (l *Link) SendParts(ctx context.Context, head, body, tail []byte) error {
	_, err := l.send(ctx, true, head, body, tail)
	return err
}

// TrySendParts is SendParts if the send window has room now.
func (l *Link) TrySendParts(head, body, tail []byte) (bool, error) {
	return l.send(context.Background(), false, head, body, tail)
}

func (l *Link) send(ctx context.Context, wait bool, head, body, tail []byte) (bool, error) {
	n := len(head) + len(body) + len(tail)
	l.mu.Lock()
	if n > l.peerMax || n > l.o.MaxFrameSize {
		limit := min(l.peerMax, l.o.MaxFrameSize)
		l.mu.Unlock()
		return false, fmt.Errorf("net: a frame of %d bytes, the limit is %d: %w", n, limit, ErrTooLarge)
	}
	for {
		if l.endErr != nil {
			err := l.endErr
			l.mu.Unlock()
			return false, err
		}
		if l.closing || l.peerClosed {
			l.mu.Unlock()
			return false, interconnect.Ended(interconnect.ErrClosed, errors.New("chanos: connection closed"))
		}
		if len(l.unacked) < l.peerWinFrames && l.unackedBytes+n <= l.peerWinBytes {
			break
		}
		if !wait {
			l.mu.Unlock()
			return false, nil
		}
		// Several senders may wait (the engine sends replies and calls
		// from several goroutines), so room is broadcast: roomCh closes.
		if l.roomCh == nil {
			l.roomCh = make(chan struct{})
		}
		room := l.roomCh
		r := l.rcur
		l.mu.Unlock()
		if r != nil {
			signal(r.kick) // the acknowledgements are read even if nobody receives
		}
		select {
		case <-room:
		case <-l.done:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		l.mu.Lock()
	}
	var buf, rec []byte
	if l.wholeRecord(n) {
		rec = l.getBufLocked(recHeaderSize + n + tagSize)
		buf = rec[recHeaderSize : recHeaderSize+n]
	} else {
		buf = l.getBufLocked(n)
	}
	copy(buf[copy(buf[copy(buf, head):], body):], tail)
	l.unacked = append(l.unacked, outFrame{seq: l.nextSeq, typ: recData, buf: buf, rec: rec})
	l.nextSeq++
	l.unackedBytes += n
	batch := len(l.unacked) > 1 && n < bigFrame
	l.mu.Unlock()
	if batch {
		// Earlier frames still wait for their acknowledgement: the
		// sender streams small frames. Its frame is left to writeLoop,
		// which writes every record queued by then in one flush, so that
		// the frames queued while the network takes one write leave
		// together in the next.
		signal(l.pumpKick)
	} else {
		// A lone frame (a call, a reply) is written here, with no
		// goroutine to wake on its way; so is a large one, which gains
		// nothing from company in a write, and whose sender would
		// otherwise copy the next frames while another thread writes
		// this one: on a machine with few CPUs the receiving side then
		// waits for a CPU.
		l.pump()
	}
	return true, nil
}

// bigFrame is the size from which a frame is written by its sender even
// while earlier frames wait for their acknowledgement (see send).
const bigFrame = 16 << 10

// writeLoop writes the frames that senders leave to it (see send) until
// the link ends.
func (l *Link) writeLoop() {
	defer l.wg.Done()
	for {
		select {
		case <-l.done:
			return
		case <-l.pumpKick:
			l.pump()
		}
	}
}

// getBufLocked returns a buffer of n bytes, reused if one is free.
func (l *Link) getBufLocked(n int) []byte {
	if k := len(l.free); k > 0 {
		b := l.free[k-1]
		if cap(b) >= n {
			l.free = l.free[:k-1]
			l.freeBytes -= cap(b)
			return b[:n]
		}
	}
	return make([]byte, n)
}

func (l *Link) putBufLocked(b []byte) {
	// Kept up to a window's worth, the most a link holds at once either
	// way, so that a steady stream allocates nothing.
	if b != nil && cap(b) <= bufSize+recHeaderSize+tagSize && l.freeBytes+cap(b) <= l.o.WindowBytes {
		l.free = append(l.free, b)
		l.freeBytes += cap(b)
	}
}

// ackValueLocked is the acknowledgement this side gives: the frames
// Receive has taken, or everything once the peer has closed (it waits
// for the acknowledgement of its close, and will send nothing more).
func (l *Link) ackValueLocked() uint64 {
	if l.peerClosed {
		return l.received
	}
	return l.consumed
}

// pump writes to the current TCP connection every queued record it has
// not carried yet, in order, with the current acknowledgement. It holds
// mu only to pick the records: a write may block until the peer reads,
// and the peer's reader must never wait on this side's lock.
func (l *Link) pump() {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if !l.live {
		return
	}
	l.mu.Lock()
	ack := l.ackValueLocked()
	i := len(l.unacked)
	for i > 0 && l.unacked[i-1].seq > l.written {
		i--
	}
	l.scratch = append(l.scratch[:0], l.unacked[i:]...)
	if n := len(l.scratch); n > 0 {
		// Counted as written before the write: the peer may acknowledge a
		// record as soon as its bytes leave. A record's buffer is reused
		// only once acknowledged and its write has returned (flushed).
		l.written = l.scratch[n-1].seq
		// The acknowledgement rides on these records. Only then: when
		// nothing is written, the one due (after a resume, or delayed) is
		// still to be written by writeAck.
		l.ackSent = ack
		l.sinceAck, l.sinceAckBytes = 0, 0
	}
	l.mu.Unlock()
	var err error
	var last uint64
	for _, f := range l.scratch {
		if err = l.writeRecord(f.typ, f.buf, f.rec, f.seq, ack); err != nil {
			break
		}
		last = f.seq
	}
	clear(l.scratch)
	if err == nil {
		err = l.bw.Flush()
	}
	if err == nil && last > 0 {
		l.mu.Lock()
		l.flushed = max(l.flushed, last)
		l.mu.Unlock()
	}
	l.lastWrt.Store(now())
	if err != nil {
		l.breakLocked(err)
	}
}

// writeAck writes an acknowledgement record if there is something new to
// acknowledge, or always if force (a keepalive).
func (l *Link) writeAck(force bool) {
	if !l.wmu.TryLock() {
		// A sender is writing: its record carries an acknowledgement, and
		// the delayed one is tried again. The link's goroutine never
		// waits behind a write the network holds up.
		if !l.ackArmed.Swap(true) {
			signal(l.ackArm)
		}
		return
	}
	defer l.wmu.Unlock()
	l.writeAckLocked(force)
}

// writeAckLocked is writeAck for a caller that holds wmu.
func (l *Link) writeAckLocked(force bool) {
	if !l.live {
		return
	}
	l.mu.Lock()
	ack := l.ackValueLocked()
	if ack == l.ackSent && !force {
		l.mu.Unlock()
		return
	}
	l.ackSent = ack
	l.sinceAck, l.sinceAckBytes = 0, 0
	l.mu.Unlock()
	err := l.writeRecord(recAck, nil, nil, 0, ack)
	if err == nil {
		err = l.bw.Flush()
	}
	l.lastWrt.Store(now())
	if err != nil {
		l.breakLocked(err)
	}
}

// writeRecord writes a record of payload p to bw, with its tag in the
// authenticated-only mode; rec, if not nil, is the buffer p lies in with
// room for the header and the tag (outFrame.rec). The caller holds wmu.
func (l *Link) writeRecord(typ uint8, p, rec []byte, seq, ack uint64) error {
	putHeader(l.hdr[:], typ, len(p), seq, ack)
	m := l.wmac
	if rec != nil {
		copy(rec, l.hdr[:])
		r := rec[:recHeaderSize+len(p)]
		if m != nil {
			r = m.seal(r)
		}
		_, err := l.bw.Write(r)
		return err
	}
	if m == nil {
		if _, err := l.bw.Write(l.hdr[:]); err != nil {
			return err
		}
		_, err := l.bw.Write(p)
		return err
	}
	// The tag covers header and payload together: they are put side by
	// side in the writer's own buffer when they fit (no copy more than
	// without the tag), else in the MAC's.
	n := recHeaderSize + len(p) + tagSize
	if n <= l.bw.Size() {
		if l.bw.Available() < n {
			if err := l.bw.Flush(); err != nil {
				return err
			}
		}
		rec = l.bw.AvailableBuffer()
	} else {
		rec = m.buf[:0]
	}
	rec = m.seal(append(append(rec, l.hdr[:]...), p...))
	if n > l.bw.Size() {
		m.buf = rec[:0]
	}
	_, err := l.bw.Write(rec)
	return err
}

// breakLocked takes the current TCP connection for broken (a write
// failed): nothing more is written to it, and closing it ends its reader,
// which reports the break. The caller holds wmu.
func (l *Link) breakLocked(err error) {
	l.live = false
	l.mu.Lock()
	r := l.rcur
	l.mu.Unlock()
	l.o.Logger.Debug("net: write failed", "err", err)
	if r != nil {
		l.dropReader(r, err, true)
	}
}

// fail ends the link with err and returns err.
func (l *Link) fail(err error) error {
	l.end(err, true)
	return err
}

// end ends the link with err, the first reason winning; now says whether
// Receive stops at once rather than after what it holds.
func (l *Link) end(err error, now bool) { l.finish(err, now, false) }

// finish is end. With keep, the TCP connection being read is not closed
// but returned, its reads interrupted and none to follow, for Close to
// close it lingering (lingerClose); nil if there is none to keep.
func (l *Link) finish(err error, now, keep bool) stdnet.Conn {
	l.mu.Lock()
	if l.endErr != nil {
		l.mu.Unlock()
		return nil
	}
	l.endErr, l.endNow = err, now
	c := l.conn
	l.conn = nil
	r := l.rcur
	close(l.done)
	l.mu.Unlock()
	l.cancelCtx()
	l.closeGone()
	var kept stdnet.Conn
	if keep && c != nil && r != nil && r.c == c && l.keepReader(r) {
		kept = c
	} else {
		if r != nil {
			// Its watch too: nothing of the link runs on once it has ended.
			l.dropReader(r, nil, false)
		}
		if c != nil {
			c.Close()
		}
	}
	l.o.Logger.Debug("net: link ended", "err", err)
	if l.onEnd != nil {
		l.onEnd()
	}
	return kept
}

// End ends the link at once with err (interconnect.Ended of ErrPeerDied
// or ErrNetworkLost, say), without the close exchange: Receive returns
// what it holds, then err; sends and the calls waiting for replies fail
// with it. A domain ends a connection this way when its monitor reports
// that the peer died, or that the peer's machine left the cluster, rather
// than wait for the grace period.
func (l *Link) End(err error) { l.end(err, false) }

// Err returns why the link ended, or nil while it goes on.
func (l *Link) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endErr
}

// Close ends the link in order: it sends a close record after every frame
// sent before, and waits until the peer has acknowledged it (the peer then
// holds everything), the link has ended otherwise, or Options.Linger has
// passed. The peer's Receive returns what was sent, then ErrClosed. It
// then shuts down the TCP connection's writing and reads it until the
// peer closes it too, within the same Linger (lingerClose). When Close
// returns, the link's goroutines have ended and its TCP connection is
// closed.
func (l *Link) Close() error {
	l.closeOnce.Do(func() {
		deadline := time.Now().Add(l.o.Linger)
		l.mu.Lock()
		l.closing = true
		l.roomLocked()
		skip := l.endErr != nil || l.peerClosed
		// The peer closed first and waits for the acknowledgement of its
		// close: write it now, before the TCP connection goes, rather
		// than leave it to the link's goroutine, which may come too late
		// and leave the peer to wait for its Linger.
		finalAck := l.endErr == nil && l.peerClosed
		if !skip {
			l.closeSeq = l.nextSeq
			l.unacked = append(l.unacked, outFrame{seq: l.nextSeq, typ: recClose})
			l.nextSeq++
		}
		l.mu.Unlock()
		if !skip {
			l.pump()
			t := time.NewTimer(time.Until(deadline))
		wait:
			for {
				l.mu.Lock()
				ok := l.peerAcked >= l.closeSeq || l.endErr != nil || l.peerClosed
				l.mu.Unlock()
				if ok {
					break
				}
				l.kickReader() // its acknowledgement is read even if nobody receives
				select {
				case <-l.ackedSig:
				case <-l.done:
				case <-t.C:
					break wait
				}
			}
			t.Stop()
			// Both sides closed at once: the peer's close, which may
			// have ended the wait, is acknowledged now too, for the
			// same reason.
			l.mu.Lock()
			finalAck = l.endErr == nil && l.peerClosed
			l.mu.Unlock()
		}
		if finalAck {
			l.wmu.Lock()
			l.writeAckLocked(false)
			l.wmu.Unlock()
		}
		c := l.finish(interconnect.Ended(interconnect.ErrClosed, errors.New("chanos: connection closed by this side")), true, true)
		if c != nil {
			// A write that the network holds up (a sender's, the link
			// goroutine's) ends by then, so that neither the goroutines
			// nor the writer's lock are waited for longer.
			c.SetWriteDeadline(deadline)
		}
		l.wg.Wait()
		if c != nil {
			l.wmu.Lock()
			l.live = false // nothing is written after the shutdown
			l.wmu.Unlock()
			l.awaitReaders() // a Receive's read, interrupted, has let go of c
			lingerClose(c, deadline, l.lingerLimit())
		}
	})
	return nil
}

// lingerClose closes c, the link's TCP connection once this side's last
// records are written to it: it shuts down c's writing, so that the peer
// reads them and then the end of the stream, and reads and drops what the
// peer still sends until the peer closes its side too, deadline passes or
// limit bytes have come. A socket closed with bytes unread in it sends a
// reset rather than an orderly end, and the reset drops what it
// overtakes: this side's close record among them, so that the peer would
// resume, find the connection forgotten and end "peer died". Reading to
// the peer's end leaves nothing unread, and both sides close in order.
// Under TLS the raw TCP connection is shut down and read: what is left
// of the stream is of no use, and TLS's own close_notify is not needed
// after the protocol's close (nor sent in the authenticated-only mode).
func lingerClose(c stdnet.Conn, deadline time.Time, limit int64) {
	defer c.Close()
	raw := rawConn(c)
	cw, ok := raw.(interface{ CloseWrite() error })
	if !ok || !time.Now().Before(deadline) || cw.CloseWrite() != nil || raw.SetReadDeadline(deadline) != nil {
		return
	}
	io.Copy(io.Discard, io.LimitReader(raw, limit))
}

// rawConn returns the connection under the link's layers of c (TLS, the
// liveness count): the TCP connection, for one the link dialed or
// accepted.
func rawConn(c stdnet.Conn) stdnet.Conn {
	for {
		switch x := c.(type) {
		case *tlsConn:
			c = x.raw
		case *liveConn:
			c = x.Conn
		default:
			return c
		}
	}
}

// lingerLimit bounds what lingerClose reads. After this side's close an
// honest peer sends at most the frames of one window that it sent before
// it read the close, and acknowledgements: the window's bytes twice over,
// room for its records' headers, tags and TLS's overhead, and 64 KiB more.
// A peer that sends more is not waited for: its socket is reset.
func (l *Link) lingerLimit() int64 {
	return 2*int64(l.o.WindowBytes) + 64*int64(l.o.WindowFrames) + 64<<10
}

// open makes c, on which the hellos were exchanged (the peer's is h), the
// link's TCP connection; reply, if not nil, is this side's hello, still
// to be written. In the authenticated-only mode the reply goes in TLS,
// and the records that follow in the clear on the TCP connection.
func (l *Link) open(c stdnet.Conn, br *bufio.Reader, h hello, reply []byte) error {
	tc, ok := c.(*tlsConn)
	if !ok || !tc.authOnly {
		return l.attach(c, br, h, reply, nil, nil)
	}
	if reply != nil {
		if _, err := tc.Write(reply); err != nil {
			// Broken already: its reader fails at once and reports it.
			tc.Close()
		}
	}
	raw, rbr, mine, peer, err := plainAfterHellos(tc, br, l.dialer)
	if err != nil {
		c.Close()
		return l.fail(interconnect.Violation(err))
	}
	return l.attach(raw, rbr, h, nil, mine, peer)
}

// attach makes c the link's TCP connection, after a hello exchange whose
// peer hello is h; reply, if not nil, is this side's hello, written first.
// wmac and rmac, in the authenticated-only mode, tag this side's records
// and check the peer's. It retransmits what the peer has not received and
// starts c's reader.
func (l *Link) attach(c stdnet.Conn, br *bufio.Reader, h hello, reply []byte, wmac, rmac *recordMAC) error {
	l.mu.Lock()
	if l.endErr != nil {
		l.mu.Unlock()
		c.Close()
		return l.endErr
	}
	if h.received < l.peerAcked || h.received >= l.nextSeq {
		l.mu.Unlock()
		c.Close()
		return l.fail(interconnect.Violation(fmt.Errorf("the peer resumes having received %d, but %d were acknowledged and %d sent", h.received, l.peerAcked, l.nextSeq-1)))
	}
	if l.gen == 0 {
		l.peerMax, l.peerWinFrames, l.peerWinBytes = int(h.maxFrame), int(h.winFrames), int(h.winBytes)
	}
	l.gen++
	l.conn = c
	l.written = h.received
	// What follows h.received is written again on the new connection.
	l.flushed = min(l.flushed, h.received)
	l.ackSent = 0
	l.mu.Unlock()

	l.wmu.Lock()
	if l.bw == nil {
		l.bw = bufio.NewWriterSize(c, bufSize)
	} else {
		l.bw.Reset(c)
	}
	l.live = true
	l.wmac = wmac
	if reply != nil {
		if _, err := l.bw.Write(reply); err != nil {
			l.breakLocked(err)
		}
	}
	l.wmu.Unlock()
	// The reader first: the peer retransmits too, perhaps more than the
	// socket buffers hold, and reads only while this side reads.
	l.mu.Lock()
	if l.endErr != nil {
		// Ended meanwhile, which closed c: no reader (and no watch) is
		// to outlive the link.
		err := l.endErr
		l.mu.Unlock()
		return err
	}
	l.startReaderLocked(c, br, rmac, l.gen)
	l.mu.Unlock()
	signal(l.inboxSig)
	l.pump()
	signal(l.ackKick)
	return nil
}

// badTag counts a record that failed its authentication and returns err.
func (l *Link) badTag(err error) error {
	l.badTags.Add(1)
	l.o.Logger.Warn("net: a record failed authentication; the TCP connection is dropped and resumed", "err", err)
	return err
}

// roomLocked wakes the senders waiting for room.
func (l *Link) roomLocked() {
	if l.roomCh != nil {
		close(l.roomCh)
		l.roomCh = nil
	}
}

// ackLocked applies the peer's cumulative acknowledgement a.
func (l *Link) ackLocked(a uint64) error {
	if a <= l.peerAcked {
		return nil
	}
	if a > l.written {
		return interconnect.Violation(fmt.Errorf("the peer acknowledges %d, but %d were sent", a, l.written))
	}
	i := 0
	for i < len(l.unacked) && l.unacked[i].seq <= a {
		f := l.unacked[i]
		l.unackedBytes -= len(f.buf)
		// The peer may acknowledge a record before the write that carried
		// it has returned (its bytes have left; the writer goroutine has
		// not come back): its buffer is then left to the collector, not
		// reused under the writer.
		if f.seq <= l.flushed {
			b := f.buf
			if f.rec != nil {
				b = f.rec
			}
			l.putBufLocked(b)
		}
		l.unacked[i] = outFrame{}
		i++
	}
	l.unacked = append(l.unacked[:0], l.unacked[i:]...)
	l.peerAcked = a
	l.roomLocked()
	signal(l.ackedSig)
	return nil
}

// run is the link's own goroutine: delayed acknowledgements, keepalives,
// and the resumption of broken TCP connections, until the link ends.
func (l *Link) run() {
	defer l.wg.Done()
	l.wg.Add(1)
	go l.writeLoop()
	ackT := time.NewTimer(time.Hour)
	ackT.Stop()
	defer ackT.Stop()
	tick := time.NewTicker(l.o.KeepAlive / 2)
	defer tick.Stop()
	var graceC <-chan time.Time
	var graceT *time.Timer
	defer func() {
		if graceT != nil {
			graceT.Stop()
		}
	}()
	connected := true
	for {
		select {
		case <-l.done:
			return
		case <-l.ackKick:
			l.writeAck(false)
		case <-l.ackArm:
			ackT.Reset(l.o.AckDelay)
		case <-ackT.C:
			l.ackArmed.Store(false)
			l.writeAck(false)
			if !l.rcvWant.Load() {
				// Nobody receives: read on (read.go). A Receive that
				// waits reads itself, and its end sets the timer again.
				l.kickReader()
			}
		case <-tick.C:
			if !connected {
				continue
			}
			if time.Duration(now()-l.lastWrt.Load()) >= l.o.KeepAlive {
				l.writeAck(true)
			}
			// Read what came while nobody received (read.go).
			l.kickReader()
		case <-l.brokenSig:
			l.mu.Lock()
			stale := l.brokenGen.Load() != l.gen
			over := l.exchangeOverLocked()
			l.mu.Unlock()
			if stale {
				continue
			}
			l.wmu.Lock()
			l.live = false
			l.wmu.Unlock()
			connected = false
			if over {
				// Nothing is left to resume. A peer that acknowledged
				// this side's close then closes its TCP connection (and
				// forgets the connection) without a close of its own
				// when it had read this side's first: a resume would
				// be refused, and Close, about to see the
				// acknowledgement, would end "peer died".
				continue
			}
			if l.dialer {
				if !l.redial() {
					return
				}
				connected = true
				continue
			}
			graceT = time.NewTimer(l.o.Grace)
			graceC = graceT.C
		case r := <-l.resumeCh:
			if connected {
				// The peer redialed before this side saw the break.
				l.dropConn()
			}
			// Nothing more is taken from the old connection once the
			// hello below says what was received.
			l.awaitReaders()
			if graceT != nil {
				graceT.Stop()
				graceT, graceC = nil, nil
			}
			l.mu.Lock()
			rh := hello{id: l.id, maxFrame: uint32(l.o.MaxFrameSize), winFrames: uint32(l.o.WindowFrames), winBytes: uint32(l.o.WindowBytes), received: l.received}
			l.mu.Unlock()
			if err := l.open(r.c, r.br, r.h, rh.encode()); err != nil {
				return
			}
			connected = true
		case <-graceC:
			l.end(interconnect.Ended(interconnect.ErrNetworkLost, fmt.Errorf("chanos: network lost: no resume within %v", l.o.Grace)), false)
			return
		}
	}
}

// exchangeOverLocked says whether the close exchange has ended what the
// two sides have to say to each other: the peer's close has arrived, or
// the peer has acknowledged this side's close. In the latter case the
// peer had sent nothing more (it sends only acknowledgements after this
// side's close, and its frames before came ahead of the acknowledgement).
// The caller holds mu.
func (l *Link) exchangeOverLocked() bool {
	return l.peerClosed || l.closeSeq > 0 && l.peerAcked >= l.closeSeq
}

// dropConn stops reading the current TCP connection and closes it.
func (l *Link) dropConn() {
	l.mu.Lock()
	r := l.rcur
	l.mu.Unlock()
	if r != nil {
		l.dropReader(r, nil, false) // first: a writer blocked on it, holding wmu, fails now
	}
	l.wmu.Lock()
	l.live = false
	l.wmu.Unlock()
}

// redial resumes the connection from the dialing side, with backoff,
// until it succeeds (true) or the grace period passes or the peer refuses
// (the link ends; false).
func (l *Link) redial() bool {
	deadline := time.Now().Add(l.o.Grace)
	delay := l.o.RedialMin
	var last error // the last try's failure, which says what the peer's side did
	for {
		left := time.Until(deadline)
		if left <= 0 {
			err := fmt.Errorf("chanos: network lost: no resume within %v", l.o.Grace)
			if last != nil {
				// A refused connection, say, tells a peer whose side of
				// the connection has gone (its machine ended it when this
				// one left the cluster) from a network that stays down.
				err = fmt.Errorf("%w (the last try: %v)", err, last)
			}
			l.end(interconnect.Ended(interconnect.ErrNetworkLost, err), false)
			return false
		}
		// Nothing more is taken from the old connection once the hello
		// says what was received.
		l.awaitReaders()
		ctx, cancel := context.WithTimeout(l.ctx, min(left, l.o.HandshakeTimeout))
		c, br, h, err := l.handshake(ctx, true)
		cancel()
		if err == nil {
			if l.open(c, br, h, nil) != nil {
				return false
			}
			l.o.Logger.Debug("net: resumed", "id", fmt.Sprintf("%x", l.id[:4]))
			return true
		}
		switch {
		case errors.Is(err, errRejectedUnknown):
			l.mu.Lock()
			closed := l.exchangeOverLocked()
			l.mu.Unlock()
			if closed {
				// The peer closed, or acknowledged this side's close,
				// then forgot the connection once its own close was
				// over (or its Linger passed): an orderly end, not a
				// death.
				l.end(interconnect.Ended(interconnect.ErrClosed, errors.New("chanos: connection closed by the peer")), false)
				return false
			}
			l.end(interconnect.Ended(interconnect.ErrPeerDied, fmt.Errorf("chanos: peer died: %w", err)), false)
			return false
		case interconnect.IsEnd(err):
			l.fail(err)
			return false
		}
		last = err
		l.o.Logger.Debug("net: redial failed", "err", err)
		t := time.NewTimer(min(delay, time.Until(deadline)))
		select {
		case <-t.C:
		case <-l.done:
			t.Stop()
			return false
		}
		delay = min(2*delay, l.o.RedialMax)
	}
}

// handshake dials the peer and exchanges hellos.
func (l *Link) handshake(ctx context.Context, resume bool) (stdnet.Conn, *bufio.Reader, hello, error) {
	c, err := l.o.Dial(ctx, l.addr)
	if err != nil {
		return nil, nil, hello{}, fmt.Errorf("net: dial %s: %w", l.addr, err)
	}
	if tc, ok := c.(*stdnet.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c = &liveConn{Conn: c}
	if l.o.TLS != nil {
		if c, err = l.o.TLS.client(ctx, c); err != nil {
			return nil, nil, hello{}, err
		}
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	l.mu.Lock()
	mine := hello{resume: resume, id: l.id, maxFrame: uint32(l.o.MaxFrameSize), winFrames: uint32(l.o.WindowFrames), winBytes: uint32(l.o.WindowBytes), received: l.received}
	l.mu.Unlock()
	br := bufio.NewReaderSize(c, bufSize)
	h, err := exchange(c, br, mine.encode())
	if err == nil && h.id != l.id {
		err = interconnect.Violation(errors.New("the peer's hello names another connection"))
	}
	if err == nil && !stop() {
		err = ctx.Err()
	}
	if err != nil {
		c.Close()
		return nil, nil, hello{}, err
	}
	c.SetDeadline(time.Time{})
	return c, br, h, nil
}

// exchange writes this side's hello and reads the peer's.
func exchange(c stdnet.Conn, br *bufio.Reader, mine []byte) (hello, error) {
	if _, err := c.Write(mine); err != nil {
		return hello{}, err
	}
	var hb [recHeaderSize]byte
	if _, err := io.ReadFull(br, hb[:]); err != nil {
		return hello{}, err
	}
	rh := parseHeader(hb[:])
	if rh.flags != 0 || rh.reserved != 0 {
		return hello{}, interconnect.Violation(fmt.Errorf("a record of type %d with flags %#x and reserved bytes %#x where a hello was due", rh.typ, rh.flags, rh.reserved))
	}
	if rh.typ == recReject {
		var code [4]byte
		io.ReadFull(br, code[:])
		switch code[0] {
		case rejectUnknown:
			return hello{}, errRejectedUnknown
		case rejectAuth:
			return hello{}, fmt.Errorf("%w: the peer does not admit this side's certificate", ErrAuth)
		case rejectMode:
			return hello{}, fmt.Errorf("%w: the peer refused this side's mode", ErrMode)
		}
		return hello{}, fmt.Errorf("net: the peer refused the connection (code %d)", code[0])
	}
	if rh.length != helloSize {
		return hello{}, interconnect.Violation(fmt.Errorf("a record of type %d where a hello was due", rh.typ))
	}
	p := make([]byte, helloSize)
	if _, err := io.ReadFull(br, p); err != nil {
		return hello{}, err
	}
	h, err := parseHello(rh, p)
	if err != nil {
		return hello{}, interconnect.Violation(err)
	}
	return h, nil
}

var (
	_ interconnect.Link          = (*Link)(nil)
	_ interconnect.PartsSender   = (*Link)(nil)
	_ interconnect.PeerWatcher   = (*Link)(nil)
	_ interconnect.BufferSwapper = (*Link)(nil)
)

// splitRefs splits a DATA record's payload into its frame and the RefCaps
// of its trailer: the frame's header says how many (ncaps) and how long
// the frame is; the trailer must be exactly ncaps irefs.
func splitRefs(p []byte) ([]byte, []wire.Cap, error) {
	if len(p) < wire.HeaderSize {
		return p, nil, nil // SetFrame says what is wrong
	}
	ncaps := int(p[7])
	if ncaps == 0 {
		return p, nil, nil
	}
	size := int(binary.LittleEndian.Uint32(p))
	if size < wire.HeaderSize || size+ncaps*wire.IrefSize != len(p) {
		return nil, nil, fmt.Errorf("a frame of %d bytes with %d capabilities in a record of %d bytes (want %d irefs after the frame)", size, ncaps, len(p), ncaps)
	}
	caps := make([]wire.Cap, ncaps)
	for i := range caps {
		b := p[size+i*wire.IrefSize:]
		r := &RefCap{Ref: wire.Iref{Machine: binary.LittleEndian.Uint64(b), Export: binary.LittleEndian.Uint64(b[8:])}}
		copy(r.Ref.Token[:], b[16:32])
		if r.Ref.IsZero() {
			return nil, nil, fmt.Errorf("capability %d of a frame is the null iref", i)
		}
		caps[i] = r
	}
	return p[:size], caps, nil
}
