package net

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	stdnet "net"
	"sync"
	"time"
)

// ErrListenerClosed is returned by Accept once the Listener is closed.
var ErrListenerClosed = errors.New("net: listener closed")

// Dial opens a net connection to the Listener at addr (host:port). It
// returns once the hellos are exchanged. The link redials addr by itself
// whenever its TCP connection breaks.
func Dial(ctx context.Context, addr string, opts *Options) (*Link, error) {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("net: connection id: %w", err)
	}
	l := newLink(opts.resolve(), id, true)
	l.addr = addr
	hctx, cancel := context.WithTimeout(ctx, l.o.HandshakeTimeout)
	c, br, h, err := l.handshake(hctx, false)
	cancel()
	if err != nil {
		l.cancelCtx()
		return nil, err
	}
	if err := l.open(c, br, h, nil); err != nil {
		return nil, err
	}
	l.wg.Add(1)
	go l.run()
	return l, nil
}

// Listener accepts net connections on a TCP listener, and hands the
// connections it holds the TCP connections that resume them.
type Listener struct {
	ln stdnet.Listener
	o  Options

	accepted chan *Link
	done     chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	links   map[[16]byte]*Link
	pending map[stdnet.Conn]struct{} // TCP connections in their hello
	// reserved counts the new connections past the busy check and not
	// yet in accepted: they have room in it.
	reserved int
}

// Listen accepts net connections on ln, which it takes over.
func Listen(ln stdnet.Listener, opts *Options) *Listener {
	L := &Listener{
		ln:      ln,
		o:       opts.resolve(),
		done:    make(chan struct{}),
		links:   make(map[[16]byte]*Link),
		pending: make(map[stdnet.Conn]struct{}),
	}
	L.accepted = make(chan *Link, L.o.AcceptBacklog)
	L.wg.Add(1)
	go L.loop()
	return L
}

// Addr returns the listener's address.
func (L *Listener) Addr() stdnet.Addr { return L.ln.Addr() }

// Accept waits for the next new connection.
func (L *Listener) Accept(ctx context.Context) (*Link, error) {
	select {
	case l := <-L.accepted:
		return l, nil
	case <-L.done:
		return nil, ErrListenerClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops accepting. Connections that Accept returned go on, but can
// no longer be resumed; those it had not returned are closed, all at
// once, so that Close waits at most about one Options.Linger.
func (L *Listener) Close() error {
	L.mu.Lock()
	if L.closed {
		L.mu.Unlock()
		return nil
	}
	L.closed = true
	close(L.done)
	for c := range L.pending {
		c.Close()
	}
	L.mu.Unlock()
	err := L.ln.Close()
	L.wg.Wait()
	// Closed together: each may wait up to its Linger for the peer's
	// acknowledgement.
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case l := <-L.accepted:
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.Close()
			}()
		default:
			return err
		}
	}
}

func (L *Listener) loop() {
	defer L.wg.Done()
	delay := 5 * time.Millisecond
	for {
		c, err := L.ln.Accept()
		if err != nil {
			select {
			case <-L.done:
				return
			default:
			}
			// Out of descriptors, say: wait rather than spin.
			L.o.Logger.Warn("net: accept", "err", err)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-L.done:
				t.Stop()
				return
			}
			delay = min(2*delay, time.Second)
			continue
		}
		delay = 5 * time.Millisecond
		L.mu.Lock()
		if L.closed {
			L.mu.Unlock()
			c.Close()
			return
		}
		if len(L.pending) >= L.o.MaxHandshakes {
			// Whoever opens TCP connections and says nothing holds a
			// handshake each until its timeout: beyond the bound, new
			// ones are dropped at once, and the connections already
			// open are not touched.
			L.mu.Unlock()
			L.o.Logger.Debug("net: too many handshakes in progress; a connection dropped", "from", c.RemoteAddr(), "max", L.o.MaxHandshakes)
			c.Close()
			continue
		}
		L.pending[c] = struct{}{}
		L.mu.Unlock()
		L.wg.Add(1)
		go L.handshake(c)
	}
}

// handshake reads a TCP connection's hello and opens or resumes the
// connection it names. A connection whose hello is wrong is closed; no
// other is affected.
func (L *Listener) handshake(c stdnet.Conn) {
	defer L.wg.Done()
	keep := false
	raw0 := c
	defer func() {
		L.mu.Lock()
		delete(L.pending, raw0)
		L.mu.Unlock()
		if !keep {
			raw0.Close()
		}
	}()
	if tc, ok := c.(*stdnet.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c = &liveConn{Conn: c}
	c.SetDeadline(time.Now().Add(L.o.HandshakeTimeout))
	raw := c
	var (
		fp   [32]byte
		name string
	)
	if L.o.TLS != nil {
		ctx, cancel := context.WithTimeout(context.Background(), L.o.HandshakeTimeout)
		tc, sn, got, err := L.o.TLS.server(ctx, raw)
		cancel()
		if err != nil {
			L.o.Logger.Debug("net: tls handshake", "from", raw.RemoteAddr(), "err", err)
			return
		}
		c, name, fp = tc, sn, got
	}
	br := bufio.NewReaderSize(c, bufSize)
	var hb [recHeaderSize]byte
	if _, err := io.ReadFull(br, hb[:]); err != nil {
		return
	}
	rh := parseHeader(hb[:])
	if rh.typ != recHello || rh.length != helloSize {
		L.o.Logger.Debug("net: a connection that does not begin with a hello", "from", c.RemoteAddr())
		c.Write(rejectRecord(rejectBadHello))
		return
	}
	p := make([]byte, helloSize)
	if _, err := io.ReadFull(br, p); err != nil {
		return
	}
	h, err := parseHello(rh, p)
	if err != nil {
		L.o.Logger.Debug("net: a bad hello", "from", c.RemoteAddr(), "err", err)
		c.Write(rejectRecord(rejectBadHello))
		return
	}
	if tc, ok := c.(*tlsConn); ok && tc.authOnly != L.o.TLS.authOnlyFor(name) {
		// Before admission, which a client of the wrong mode does not
		// spend.
		L.o.Logger.Debug("net: a client of the other mode", "from", raw.RemoteAddr(), "auth-only", tc.authOnly)
		c.Write(rejectRecord(rejectMode))
		return
	}
	if h.resume {
		L.mu.Lock()
		l := L.links[h.id]
		L.mu.Unlock()
		if l == nil || L.o.TLS != nil && (l.peerFP != fp || l.serverName != name) {
			c.Write(rejectRecord(rejectUnknown))
			return
		}
		c.SetDeadline(time.Time{})
		t := time.NewTimer(L.o.HandshakeTimeout)
		defer t.Stop()
		select {
		case l.resumeCh <- &resumeReq{c: c, br: br, h: h}:
			keep = true
		case <-l.done:
		case <-L.done:
		case <-t.C:
		}
		return
	}
	if h.received != 0 {
		c.Write(rejectRecord(rejectBadHello))
		return
	}
	// Busy is decided before admission, which a grant allows once: a
	// connection refused for room must be able to try again. Its place
	// in the backlog is held meanwhile, so that the connections admitted
	// at once do not overrun it.
	l := newLink(L.o, h.id, false)
	l.peerFP, l.serverName = fp, name
	L.mu.Lock()
	if L.closed || L.links[h.id] != nil || len(L.accepted)+L.reserved >= cap(L.accepted) {
		L.mu.Unlock()
		c.Write(rejectRecord(rejectBusy))
		l.cancelCtx()
		return
	}
	L.links[h.id] = l
	L.reserved++
	L.mu.Unlock()
	queued := false
	defer func() {
		L.mu.Lock()
		L.reserved--
		if !queued && L.links[h.id] == l {
			delete(L.links, h.id)
		}
		L.mu.Unlock()
	}()
	if L.o.TLS != nil && (L.o.TLS.Admit == nil || !L.o.TLS.Admit(name, fp)) {
		L.o.Logger.Debug("net: a client certificate not admitted", "from", raw.RemoteAddr())
		c.Write(rejectRecord(rejectAuth))
		l.cancelCtx()
		return
	}
	l.onEnd = func() {
		L.mu.Lock()
		if L.links[h.id] == l {
			delete(L.links, h.id)
		}
		L.mu.Unlock()
	}
	c.SetDeadline(time.Time{})
	reply := hello{id: h.id, maxFrame: uint32(L.o.MaxFrameSize), winFrames: uint32(L.o.WindowFrames), winBytes: uint32(L.o.WindowBytes)}
	if err := l.open(c, br, h, reply.encode()); err != nil {
		return
	}
	keep = true
	l.wg.Add(1)
	go l.run()
	L.mu.Lock()
	if !L.closed {
		// Room was held for it above, so this never waits; and the
		// listener's Close, which empties the backlog, has not begun.
		select {
		case L.accepted <- l:
			queued = true
		default:
		}
	}
	L.mu.Unlock()
	if !queued {
		l.Close()
	}
}
