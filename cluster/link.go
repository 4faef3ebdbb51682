package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// Defaults of Options.
const (
	// DefaultHandshakeTimeout bounds a link's handshake: TCP connect (on
	// Dial), TLS, and the exchange of preambles that confirms both sides
	// took the other.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxFrameSize is the largest frame a link sends or receives.
	DefaultMaxFrameSize = 1 << 20
	// DefaultMaxHandshakes is how many handshakes a Listener runs at once;
	// a connection beyond them is closed at once.
	DefaultMaxHandshakes = 64
)

// preamble is what each side sends first on a link once its handshake
// has accepted the peer, and expects from the other: in TLS 1.3 the
// client finishes its handshake before the server has checked the
// client's credential, so only the server's preamble tells the client it
// was taken. It also names the link's protocol and version.
var preamble = [8]byte{'c', 'h', 'a', 'n', 'o', 's', 'L', '1'}

// refusal is why a handshake refused its peer: one of the Err values
// below, each of which matches ErrRefused.
type refusal struct{ reason string }

func (e *refusal) Error() string        { return e.reason }
func (e *refusal) Is(target error) bool { return target == ErrRefused }

// ErrRefused is matched by every error of a link's handshake that refused
// the peer, or was refused by it; the more precise value below names the
// reason, and the logs give it as the attribute "reason".
var ErrRefused = errors.New("cluster link refused")

// The reasons a handshake refuses a peer, each matched by errors.Is and
// each matching ErrRefused.
var (
	// ErrNoCertificate: the peer presented no credential.
	ErrNoCertificate error = &refusal{"no client cert"}
	// ErrUnknownRoot: the peer's credential names this cluster but this
	// cluster's root did not sign it.
	ErrUnknownRoot error = &refusal{"unknown root"}
	// ErrWrongCluster: the peer's credential is of another cluster.
	ErrWrongCluster error = &refusal{"wrong cluster"}
	// ErrExpired: the peer's credential is not valid now (expired, or not
	// yet valid).
	ErrExpired error = &refusal{"expired"}
	// ErrRevoked: the revocation list revokes the peer's credential.
	ErrRevoked error = &refusal{"revoked"}
	// ErrWrongMachine: the peer is an admitted machine, but not the one
	// the dialler asked for (Options.Machine).
	ErrWrongMachine error = &refusal{"wrong machine"}
	// ErrBadCertificate: the peer's credential is not a machine
	// credential this package issues (not Ed25519, a CA, no machine name).
	ErrBadCertificate error = &refusal{"bad certificate"}
	// ErrRefusedByPeer: the peer ended the handshake with a TLS alert:
	// it refused this machine's credential. Its own log says why.
	ErrRefusedByPeer error = &refusal{"refused by peer"}
	// ErrHandshakeFailed: the handshake broke off for a reason other than
	// a refusal: the peer closed the connection, or does not speak TLS or
	// this protocol.
	ErrHandshakeFailed error = &refusal{"handshake failed"}
	// ErrHandshakeTimeout: the handshake did not finish within
	// Options.HandshakeTimeout (or the caller's context).
	ErrHandshakeTimeout error = &refusal{"handshake timeout"}
)

// Reason returns the reason an error of a handshake gives, as logged:
// "unknown root", "revoked", ...; "" if err is not a refusal.
func Reason(err error) string {
	for _, r := range []error{ErrNoCertificate, ErrUnknownRoot, ErrWrongCluster, ErrExpired, ErrRevoked,
		ErrWrongMachine, ErrBadCertificate, ErrRefusedByPeer, ErrHandshakeFailed, ErrHandshakeTimeout} {
		if errors.Is(err, r) {
			return r.Error()
		}
	}
	return ""
}

// ErrFrameTooLarge: a frame to send larger than the link's maximum. The
// link stays open.
var ErrFrameTooLarge = errors.New("frame too large for the cluster link")

// Options tune Listen and Dial; the zero value (or nil) means the
// defaults.
type Options struct {
	// Machine, on Dial, is the name the peer's credential must give
	// (ErrWrongMachine otherwise); "" takes any admitted machine.
	Machine string
	// HandshakeTimeout bounds each handshake (DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// MaxFrameSize bounds the frames of each link (DefaultMaxFrameSize).
	// Both ends must use the same.
	MaxFrameSize int
	// MaxHandshakes bounds a Listener's handshakes in progress
	// (DefaultMaxHandshakes).
	MaxHandshakes int
	// Logger gets the refusals, with their reason (slog.Default()).
	Logger *slog.Logger
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.HandshakeTimeout <= 0 {
		r.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if r.MaxFrameSize <= 0 {
		r.MaxFrameSize = DefaultMaxFrameSize
	}
	if r.MaxFrameSize < wire.HeaderSize {
		r.MaxFrameSize = wire.HeaderSize
	}
	if r.MaxHandshakes <= 0 {
		r.MaxHandshakes = DefaultMaxHandshakes
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	return r
}

// Dial connects to the monitor listening at addr (host:port, TCP) as the
// machine id and returns the link once both sides have accepted each
// other. The whole of it, connect included, is bounded by ctx and by
// opts.HandshakeTimeout. A refusal is logged, and its error matches
// ErrRefused and the reason (ErrRevoked, ErrRefusedByPeer, ...).
func Dial(ctx context.Context, addr string, id *Identity, opts *Options) (*Link, error) {
	o := opts.withDefaults()
	hctx, cancel := context.WithTimeout(ctx, o.HandshakeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(hctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster link to %s: %w", addr, err)
	}
	l, err := handshake(hctx, c, id, &o, true)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ErrHandshakeTimeout) {
			return nil, fmt.Errorf("cluster link to %s: %w", addr, ctx.Err())
		}
		return nil, fmt.Errorf("cluster link to %s: %w", addr, err)
	}
	return l, nil
}

// The bounds of a Listener's wait before it retries a failed accept.
const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
)

// Listener accepts control links from other machines. Each connection's
// handshake runs on its own goroutine, bounded in time and in number, so
// a peer that stalls holds neither Accept nor anything past its timeout.
type Listener struct {
	ln    net.Listener
	id    *Identity
	opts  Options
	links chan *Link
	slots chan struct{}
	done  chan struct{}
	once  sync.Once
	// ctx ends at Close, and with it the handshakes in progress.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu  sync.Mutex
	err error // why the accept loop stopped
}

// Listen listens for control links on addr (host:port, TCP) as the
// machine id.
func Listen(addr string, id *Identity, opts *Options) (*Listener, error) {
	o := opts.withDefaults()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster listen: %w", err)
	}
	return serveListener(ln, id, o), nil
}

// serveListener accepts control links on ln, which it takes over.
func serveListener(ln net.Listener, id *Identity, o Options) *Listener {
	l := &Listener{ln: ln, id: id, opts: o, links: make(chan *Link), slots: make(chan struct{}, o.MaxHandshakes),
		done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.loop()
	return l
}

// Addr returns the address the listener listens on.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

func (l *Listener) loop() {
	defer l.wg.Done()
	var backoff time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
				l.shutdown()
				return
			}
			// Anything else a listening socket reports is about the
			// connection it was taking (ECONNABORTED) or about the
			// moment (EMFILE, ENFILE, ENOBUFS, ENOMEM): the machine must
			// accept links again once it passes. So the loop retries, as
			// net/http's server does, backing off to at most a second so
			// that a lasting shortage does not spin.
			backoff = min(max(2*backoff, minAcceptBackoff), maxAcceptBackoff)
			l.opts.Logger.Warn("cluster accept failed; retrying", "err", err.Error(), "in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-l.done:
				return
			}
		}
		backoff = 0
		select {
		case l.slots <- struct{}{}:
		default:
			l.opts.Logger.Warn("cluster link refused", "side", "accept", "remote", c.RemoteAddr().String(),
				"reason", "too many handshakes", "limit", l.opts.MaxHandshakes)
			c.Close()
			continue
		}
		l.wg.Add(1)
		go l.serve(c)
	}
}

// serve runs one connection's handshake and hands the link to Accept.
func (l *Listener) serve(c net.Conn) {
	defer l.wg.Done()
	defer func() { <-l.slots }()
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.HandshakeTimeout)
	link, err := handshake(ctx, c, l.id, &l.opts, false)
	cancel()
	if err != nil {
		return
	}
	select {
	case l.links <- link:
	case <-l.done:
		link.Close()
	}
}

// Accept waits for the next link that passed its handshake, until ctx
// ends or the listener is closed (net.ErrClosed).
func (l *Listener) Accept(ctx context.Context) (*Link, error) {
	select {
	case link := <-l.links:
		return link, nil
	case <-l.done:
		l.mu.Lock()
		err := l.err
		l.mu.Unlock()
		if err == nil || errors.Is(err, net.ErrClosed) {
			err = net.ErrClosed
		}
		return nil, fmt.Errorf("cluster accept: %w", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close stops listening, ends the handshakes in progress, and waits for
// their goroutines. Links already accepted stay open.
func (l *Listener) Close() error {
	err := l.shutdown()
	l.wg.Wait()
	return err
}

// shutdown is Close without the wait, for the accept loop itself.
func (l *Listener) shutdown() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		l.cancel()
		err = l.ln.Close()
	})
	if err != nil && errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// tlsCert returns the machine's credential as crypto/tls presents it.
func (id *Identity) tlsCert() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{id.cert.Raw}, PrivateKey: id.key, Leaf: id.cert}
}

// verifyPeer checks the credential a peer presented: a chain to the
// cluster root, the cluster's name, the expiry, the revocation list and,
// if want is not "", the machine's name.
func (id *Identity) verifyPeer(certs []*x509.Certificate, want string) (Peer, error) {
	if len(certs) == 0 {
		return Peer{}, fmt.Errorf("%w: the peer presented no credential", ErrNoCertificate)
	}
	if len(certs) > 1 {
		return Peer{}, fmt.Errorf("%w: the peer presented %d certificates, want its credential alone", ErrBadCertificate, len(certs))
	}
	p, err := verifyChain(certs[0], id.root, id.cluster, time.Now())
	if err != nil {
		return Peer{}, err
	}
	if err := id.Revocations.Check(certs[0]); err != nil {
		return Peer{}, err
	}
	if want != "" && p.Machine != want {
		return Peer{}, fmt.Errorf("%w: the peer is %q, want %q", ErrWrongMachine, p.Machine, want)
	}
	return p, nil
}

// handshake runs TLS 1.3 and the preamble exchange on c, as the client
// (the dialler) or the server, within ctx. It takes c over: on error c is
// closed.
func handshake(ctx context.Context, c net.Conn, id *Identity, o *Options, client bool) (*Link, error) {
	side := "accept"
	if client {
		side = "dial"
	}
	remote := c.RemoteAddr().String()
	var peer Peer
	var verr error
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		MaxVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.tlsCert()},
		// Resumption would take a peer on the word of an earlier
		// handshake; every link checks the credential afresh.
		SessionTicketsDisabled: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			want := ""
			if client {
				want = o.Machine
			}
			peer, verr = id.verifyPeer(cs.PeerCertificates, want)
			return verr
		},
	}
	var tc *tls.Conn
	if client {
		// crypto/tls would check the server's name against a host name; a
		// machine's credential names a machine, which VerifyConnection
		// checks instead, with the chain.
		cfg.InsecureSkipVerify = true
		tc = tls.Client(c, cfg)
	} else {
		// Requested rather than required, so that a peer without one
		// reaches VerifyConnection and is refused with that reason.
		cfg.ClientAuth = tls.RequestClientCert
		tc = tls.Server(c, cfg)
	}
	fail := func(err error) (*Link, error) {
		c.Close()
		attrs := []any{"side", side, "remote", remote, "reason", Reason(err), "err", err.Error()}
		if id.machine != "" {
			attrs = append(attrs, "machine", id.machine)
		}
		o.Logger.Warn("cluster link refused", attrs...)
		return nil, err
	}
	err := tc.HandshakeContext(ctx)
	if err == nil {
		err = exchangePreamble(ctx, tc)
	}
	if err != nil {
		switch {
		case verr != nil:
			err = verr
		case ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded):
			err = fmt.Errorf("%w after %v: %v", ErrHandshakeTimeout, o.HandshakeTimeout, err)
		case isRemoteAlert(err):
			err = fmt.Errorf("%w: %v", ErrRefusedByPeer, err)
		default:
			err = fmt.Errorf("%w: %v", ErrHandshakeFailed, err)
		}
		return fail(err)
	}
	l := &Link{conn: tc, peer: peer, id: id, log: o.Logger, maxFrame: o.MaxFrameSize, done: make(chan struct{})}
	go l.watch()
	return l, nil
}

// isRemoteAlert reports whether err is a TLS alert the peer sent, which
// crypto/tls reports as a net.OpError of operation "remote error".
func isRemoteAlert(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// exchangePreamble sends the preamble and reads the peer's, within ctx.
func exchangePreamble(ctx context.Context, tc *tls.Conn) error {
	if dl, ok := ctx.Deadline(); ok {
		tc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { tc.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		stop()
		tc.SetDeadline(time.Time{})
	}()
	if _, err := tc.Write(preamble[:]); err != nil {
		return err
	}
	var got [len(preamble)]byte
	if _, err := io.ReadFull(tc, got[:]); err != nil {
		return err
	}
	if got != preamble {
		return fmt.Errorf("the peer's preamble is %q, want %q", got[:], preamble[:])
	}
	return nil
}

// Link is a control link between two monitors: TLS 1.3 over TCP,
// carrying wire frames (docs/wire.md) one after another, each bounded by
// the link's maximum frame size. It is an interconnect.Link, without
// capabilities, so the connection engine can serve an IDL interface over
// it.
//
// The link ends when its peer's credential is revoked (Revocations.Update)
// or expires while it is open: both sides' Receive then report ErrClosed,
// and this side's error matches ErrRevoked or ErrExpired.
type Link struct {
	conn     *tls.Conn
	peer     Peer
	id       *Identity
	log      *slog.Logger
	maxFrame int

	wmu sync.Mutex

	// The receive buffer: rbuf[:rlen] holds bytes read, of which the
	// first consumed belong to the frame handed out by the last Receive.
	rbuf     []byte
	rlen     int
	consumed int

	done     chan struct{}
	doneOnce sync.Once
	endMu    sync.Mutex
	end      error // why this side ended the link, if it did on its own
}

// Peer returns the machine at the other end, as its credential gives it.
func (l *Link) Peer() Peer { return l.peer }

// RemoteAddr returns the peer's network address.
func (l *Link) RemoteAddr() net.Addr { return l.conn.RemoteAddr() }

// Kind returns "cluster".
func (l *Link) Kind() string { return "cluster" }

// watch ends the link when the peer's credential is revoked or expires.
func (l *Link) watch() {
	exp := time.NewTimer(time.Until(l.peer.NotAfter))
	defer exp.Stop()
	for {
		changed := l.id.Revocations.Changed()
		if err := l.id.Revocations.Check(l.peer.Certificate); err != nil {
			l.endWith(err)
			return
		}
		select {
		case <-changed:
		case <-exp.C:
			l.endWith(fmt.Errorf("%w: %q's credential expired at %s", ErrExpired, l.peer.Machine,
				l.peer.NotAfter.UTC().Format(time.RFC3339)))
			return
		case <-l.done:
			return
		}
	}
}

// endWith closes the link because of err, which it logs.
func (l *Link) endWith(err error) {
	l.endMu.Lock()
	if l.end == nil {
		l.end = err
	}
	l.endMu.Unlock()
	l.log.Warn("cluster link ended", "remote", l.conn.RemoteAddr().String(), "peer", l.peer.Machine,
		"reason", Reason(err), "err", err.Error())
	l.Close()
}

// SendFrame sends frame, a whole wire frame, waiting until ctx ends. A
// link cannot carry capabilities (interconnect.ErrCapsUnsupported). A
// send that ctx interrupts ends the link, since part of the frame may
// have gone: TLS cannot take back what it sent.
func (l *Link) SendFrame(ctx context.Context, frame []byte, caps []wire.Cap) error {
	if err := l.checkSend(frame, caps); err != nil {
		return err
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.write(ctx, frame)
}

// TrySendFrame sends frame unless another send is in progress, in which
// case it reports false, having sent nothing. TCP does not say whether
// the peer has room before a write, so a send that finds the link free
// may still wait for the peer, as SendFrame does without a deadline.
func (l *Link) TrySendFrame(frame []byte, caps []wire.Cap) (bool, error) {
	if err := l.checkSend(frame, caps); err != nil {
		return false, err
	}
	if !l.wmu.TryLock() {
		return false, nil
	}
	defer l.wmu.Unlock()
	return true, l.write(context.Background(), frame)
}

func (l *Link) checkSend(frame []byte, caps []wire.Cap) error {
	if len(caps) > 0 {
		return interconnect.ErrCapsUnsupported
	}
	if len(frame) > l.maxFrame {
		return fmt.Errorf("send %d bytes: %w (limit %d)", len(frame), ErrFrameTooLarge, l.maxFrame)
	}
	if _, err := wire.ParseHeader(frame); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	return nil
}

func (l *Link) write(ctx context.Context, frame []byte) error {
	var disarm func()
	if ctx.Done() != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		disarm = interrupt(ctx, l.conn.SetWriteDeadline)
	}
	_, err := l.conn.Write(frame)
	if disarm != nil {
		disarm()
	}
	if err == nil {
		// The whole frame went, even if ctx ended just after: the
		// deadline is cleared, and the link goes on.
		return nil
	}
	// crypto/tls keeps a write's error, whatever it was, for every later
	// write, and part of the frame may have gone: the link is over.
	l.Close()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return l.ended(err)
}

// interrupt makes the end of ctx cut short the connection's reads or
// writes (set is SetReadDeadline or SetWriteDeadline), and returns the
// function that disarms it once the read or write is over. Disarming
// waits for a cut that already began and clears the deadline it set:
// otherwise a ctx that ends as the call returns could leave a deadline
// in the past for the next call, which would fail although its own ctx
// never ended.
func interrupt(ctx context.Context, set func(time.Time) error) (disarm func()) {
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		set(time.Unix(1, 0))
	})
	return func() {
		if !stop() {
			<-fired
			set(time.Time{})
		}
	}
}

// Receive waits for the next frame until ctx ends, and sets *in to it;
// the frame is valid until the next Receive. A frame longer than the
// link's maximum, or malformed, ends the link with ErrProtocol. The end
// of ctx ends nothing: a frame half read is kept for the next Receive.
func (l *Link) Receive(ctx context.Context, in *interconnect.Incoming) error {
	if l.consumed > 0 {
		l.rlen = copy(l.rbuf, l.rbuf[l.consumed:l.rlen])
		l.consumed = 0
	}
	if ctx.Done() != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		// crypto/tls does not keep a read's timeout: a frame half read
		// stays in the buffers for the next Receive.
		defer interrupt(ctx, l.conn.SetReadDeadline)()
	}
	for {
		if l.rlen >= wire.HeaderSize {
			size := int(binary.LittleEndian.Uint32(l.rbuf))
			if size < wire.HeaderSize || size > l.maxFrame {
				*in = interconnect.Incoming{}
				l.Close()
				return interconnect.Violation(fmt.Errorf("frame of %d bytes (limit %d)", size, l.maxFrame))
			}
			if l.rlen >= size {
				l.consumed = size
				if err := in.SetFrame(l.rbuf[:size], nil); err != nil {
					l.Close()
					return interconnect.Violation(fmt.Errorf("bad frame: %w", err))
				}
				if in.Header.NCaps != 0 {
					n := in.Header.NCaps
					*in = interconnect.Incoming{}
					l.Close()
					return interconnect.Violation(fmt.Errorf("the header announces %d capabilities, which a cluster link cannot carry", n))
				}
				return nil
			}
			if len(l.rbuf) < size {
				l.grow(size)
			}
		}
		if l.rlen == len(l.rbuf) {
			l.grow(l.rlen + 1)
		}
		n, err := l.conn.Read(l.rbuf[l.rlen:])
		l.rlen += n
		if err != nil && n == 0 {
			*in = interconnect.Incoming{}
			if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil {
				return ctx.Err()
			}
			return l.ended(err)
		}
	}
}

// grow makes the receive buffer at least n bytes, keeping what it holds.
func (l *Link) grow(n int) {
	size := max(2*len(l.rbuf), 4096, n)
	size = min(size, max(l.maxFrame, n))
	b := make([]byte, size)
	copy(b, l.rbuf[:l.rlen])
	l.rbuf = b
}

// ended classifies an error of the connection: the link's own end (a
// revocation, an expiry) first, then the peer's close and this side's.
func (l *Link) ended(err error) error {
	if err == nil {
		return nil
	}
	l.endMu.Lock()
	end := l.end
	l.endMu.Unlock()
	switch {
	case end != nil:
		return interconnect.Ended(interconnect.ErrClosed, fmt.Errorf("chanos: cluster link to %s ended: %w", l.peer.Machine, end))
	case errors.Is(err, io.EOF), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET):
		return interconnect.Ended(interconnect.ErrClosed, fmt.Errorf("chanos: connection closed: %s closed the cluster link (%v)", l.peer.Machine, err))
	case errors.Is(err, net.ErrClosed):
		return interconnect.Ended(interconnect.ErrClosed, errors.New("chanos: connection closed: closed by this side"))
	}
	return interconnect.Ended(interconnect.ErrClosed, fmt.Errorf("chanos: cluster link to %s: %w", l.peer.Machine, err))
}

// Close ends the link; the peer's Receive reports ErrClosed once it has
// read what was sent before. It is safe to call more than once.
func (l *Link) Close() error {
	var err error
	l.doneOnce.Do(func() {
		close(l.done)
		err = l.conn.Close()
	})
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}
