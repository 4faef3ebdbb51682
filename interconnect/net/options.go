package net

import (
	"context"
	"log/slog"
	stdnet "net"
	"time"

	"github.com/chanos/chanos/wire"
)

// minFrame is the least maximum frame size a side may announce: a frame
// header.
const minFrame = wire.HeaderSize

// Options configure a link, on the dialing and on the accepting side.
// The zero value of each field takes its default.
type Options struct {
	// MaxFrameSize is the largest chanos frame this side accepts, and
	// announces in its hello; a side sends nothing larger than the
	// smaller of its own and its peer's. Default 1 MiB + 64 KiB.
	MaxFrameSize int
	// WindowFrames and WindowBytes bound the frames this side holds
	// received but not yet taken by Receive; the peer's sender keeps at
	// most that many unacknowledged. Defaults 1024 frames and 4 MiB;
	// WindowBytes is raised to MaxFrameSize if smaller.
	WindowFrames int
	WindowBytes  int
	// Grace is how long a broken connection may take to resume before
	// the link ends with ErrNetworkLost. Default 10 s.
	Grace time.Duration
	// KeepAlive is how often an idle side sends an acknowledgement, so
	// that its peer knows the TCP connection still carries; DeadAfter is
	// how long a side waits without reading anything before it takes the
	// connection for broken and resumes. Defaults 1 s and 4 s.
	KeepAlive time.Duration
	DeadAfter time.Duration
	// MinRecordRate, in bytes per second, is the slowest a record may
	// arrive: a TCP connection on which no record has completed within
	// DeadAfter plus the time the record under way (its length, as its
	// header says, and a TLS record's worth more) takes at this rate is
	// taken for broken and resumed, even while bytes come. A length is
	// read before the record's tag can be checked, so a corrupted one
	// would otherwise have the reader wait for that many bytes while the
	// peer's keepalives trickle in: hours for 1 MiB at one acknowledgement
	// a second. A network slower than this cannot carry the largest
	// frames. Default 64 KiB/s; negative turns the rule off.
	MinRecordRate int
	// AckDelay is how long a receiver may wait before acknowledging what
	// it has taken, in the hope of piggybacking the acknowledgement on a
	// frame of its own; and how soon after a Receive the link reads on in
	// the background if no Receive follows. Default 1 ms.
	AckDelay time.Duration
	// RedialMin and RedialMax bound the dialing side's backoff between
	// attempts to resume. Defaults 10 ms and 500 ms.
	RedialMin time.Duration
	RedialMax time.Duration
	// HandshakeTimeout bounds each hello exchange. Default 5 s.
	HandshakeTimeout time.Duration
	// Linger bounds how long Close waits for the peer to acknowledge
	// everything sent before it. Default Grace.
	Linger time.Duration
	// Dial opens a TCP connection to addr; default a net.Dialer's. Tests
	// dial from inside a machine's network namespace with it.
	Dial func(ctx context.Context, addr string) (stdnet.Conn, error)
	// AcceptBacklog bounds the new connections a Listener holds before
	// Accept takes them; more are refused. Default 64.
	AcceptBacklog int
	// MaxHandshakes bounds the TCP connections a Listener holds in their
	// handshake (TLS and hello) at once; more are closed as they come.
	// Default 64.
	MaxHandshakes int
	// TLS, if not nil, makes every TCP connection of the link a TLS 1.3
	// connection with pinned certificates (authenticated and encrypted,
	// or with TLS.AuthOnly authenticated and in the clear). Nil is plain
	// TCP: neither authenticated nor encrypted, for tests and loopback
	// only.
	TLS *TLS
	// Logger, if not nil, is told of breaks, resumes and ends.
	Logger *slog.Logger
}

func (o *Options) resolve() Options {
	var r Options
	if o != nil {
		r = *o
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if r.MaxFrameSize <= 0 {
		r.MaxFrameSize = 1<<20 + 64<<10
	}
	if r.MaxFrameSize < minFrame {
		r.MaxFrameSize = minFrame
	}
	if r.WindowFrames <= 0 {
		r.WindowFrames = 1024
	}
	if r.WindowBytes <= 0 {
		r.WindowBytes = 4 << 20
	}
	if r.WindowBytes < r.MaxFrameSize {
		r.WindowBytes = r.MaxFrameSize
	}
	def(&r.Grace, 10*time.Second)
	def(&r.KeepAlive, time.Second)
	def(&r.DeadAfter, 4*r.KeepAlive)
	def(&r.AckDelay, time.Millisecond)
	def(&r.RedialMin, 10*time.Millisecond)
	def(&r.RedialMax, 500*time.Millisecond)
	def(&r.HandshakeTimeout, 5*time.Second)
	def(&r.Linger, r.Grace)
	if r.MinRecordRate == 0 {
		r.MinRecordRate = 64 << 10
	}
	if r.Dial == nil {
		r.Dial = func(ctx context.Context, addr string) (stdnet.Conn, error) {
			var d stdnet.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	if r.AcceptBacklog <= 0 {
		r.AcceptBacklog = 64
	}
	if r.MaxHandshakes <= 0 {
		r.MaxHandshakes = 64
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	return r
}
