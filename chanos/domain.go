package chanos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/chanos/chanos/chanos/internal/engine"
	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/interconnect/local"
	"github.com/chanos/chanos/interconnect/seqpacket"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/rundir"
	"github.com/chanos/chanos/wire"
)

// Errors of the domain layer, matchable with errors.Is.
var (
	// ErrNoMonitor: no monitor is listening in the directory. Join does
	// not start one: a monitor outlives the programs that use it, so it
	// is started on purpose, with `chanos monitor`.
	ErrNoMonitor = errors.New("chanos: no monitor running")
	// ErrMonitorLost: the session with the monitor ended (the monitor
	// stopped or restarted). Bound connections keep working; exporting
	// and connecting need a new Join.
	ErrMonitorLost = errors.New("chanos: lost the monitor")
	// ErrNameTaken: Export was given a name that is registered already.
	ErrNameTaken = errors.New("chanos: name already registered")
	// ErrNotFound: Connect's name is not registered (and the context ended
	// before it was).
	ErrNotFound = errors.New("chanos: name not found")
	// ErrInterfaceMismatch: the name is exported with another interface.
	ErrInterfaceMismatch = errors.New("chanos: interface mismatch")
	// ErrInvalidName: the monitor rejected the name (see the nameservice's
	// rules: 1 to 256 printable ASCII bytes without spaces).
	ErrInvalidName = errors.New("chanos: invalid name")
	// ErrMonitorTimeout: a call to the monitor whose context had no
	// deadline got no answer within the domain's call timeout (see
	// WithCallTimeout): the monitor is stopped or wedged.
	ErrMonitorTimeout = errors.New("chanos: no answer from the monitor")
	// ErrMonitorFull: Join was refused because the monitor has as many
	// sessions as its cap (`chanos monitor --max-domains`). The error
	// also matches the monitor's *RemoteError, whose detail says "monitor
	// full: N of N sessions".
	ErrMonitorFull = errors.New("chanos: monitor full")
)

// DefaultCallTimeout bounds a call to the monitor whose context has no
// deadline, unless WithCallTimeout says otherwise. libchanos gives up
// after as long.
const DefaultCallTimeout = 10 * time.Second

// Option configures Join.
type Option func(*options)

type options struct {
	dir         string
	program     string
	log         *slog.Logger
	spin        time.Duration
	spinSet     bool // WithSpinWindow was given: the environment is not read
	callTimeout time.Duration
}

// WithDir joins the monitor in dir instead of the default ($CHANOS_DIR,
// else $XDG_RUNTIME_DIR/chanos, else chanos-UID in the temporary
// directory).
func WithDir(dir string) Option { return func(o *options) { o.dir = dir } }

// WithProgram sets the name the domain gives the monitor (shown by
// `chanos ps`); the default is the executable's base name.
func WithProgram(name string) Option { return func(o *options) { o.program = name } }

// WithCallTimeout bounds each call to the monitor whose context has no
// deadline of its own (Join's hello, Export, Ps, a Listener's withdraw),
// DefaultCallTimeout without it: a stopped or wedged monitor then gives an
// error matching ErrMonitorTimeout instead of a hang. A d of 0 or less
// leaves such calls unbounded. Connect's bind waits for its name until its
// context ends, and is not bounded.
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.callTimeout = d } }

// WithLogger sets the logger for the domain's diagnostics.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithSpinWindow sets how long the domain's ump connections spin for a
// message, or for room to send one, before they park the goroutine (see
// ump.Options.SpinWindow): 0 keeps ump.DefaultSpinWindow (20 µs), a
// negative value parks at once. A longer window pays off when replies
// take longer than the default to come, as large payloads' do, on a
// machine where waking a parked peer costs more than the window (measured:
// docs/results/). The price is CPU time spun by every connection that
// waits.
//
// Without the option, the environment variable CHANOS_SPIN_WINDOW (a Go
// duration such as "160us"; "-1" parks at once) sets the window, so that
// a deployment can tune it without a rebuild; Join fails on a value that
// does not parse.
func WithSpinWindow(d time.Duration) Option {
	return func(o *options) { o.spin, o.spinSet = d, true }
}

// SpinWindowEnv is the environment variable that sets the spin window of
// domains that do not use WithSpinWindow.
const SpinWindowEnv = "CHANOS_SPIN_WINDOW"

// spinFromEnv returns the window SpinWindowEnv sets: 0 (ump's default)
// when it is unset or empty.
func spinFromEnv() (time.Duration, error) {
	v := os.Getenv(SpinWindowEnv)
	if v == "" {
		return 0, nil
	}
	if v == "-1" {
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("chanos: join: %s=%q: want a duration such as 160us, or -1", SpinWindowEnv, v)
	}
	return d, nil
}

// Domain is a process's membership of its machine's monitor: through it
// the process exports services and connects to them by name.
//
// The session with the monitor is a connection like any other: the
// monitor protocol (interfaces/monitor.if) over the control socket, run
// by the connection engine, which matches the monitor's replies to the
// domain's calls. A goroutine serves what the monitor sends on its own:
// the connections bound to the domain's exports.
type Domain struct {
	conn    *Conn
	id      uint64
	machine uint64
	dir     string
	log     *slog.Logger
	spin    time.Duration // ump.Options.SpinWindow of the domain's connections
	timeout time.Duration // bounds the calls to the monitor without a deadline

	mu      sync.Mutex
	exports map[uint64]*Listener // by export id
	early   map[uint64][]*monitor.Incoming
	err     error // why the session ended
	done    chan struct{}
}

// monitorInterface is the monitor protocol, as the engine sees it.
var monitorInterface = Interface{Name: monitor.InterfaceName, MaxFrameSize: monitor.MaxFrameSize}

// Join connects this process to its machine's monitor and returns the
// domain. If no monitor runs, it fails with an error matching ErrNoMonitor
// that says how to start one; if the monitor has as many sessions as its
// cap, with one matching ErrMonitorFull ("monitor full: N of N
// sessions").
func Join(ctx context.Context, opts ...Option) (*Domain, error) {
	o := options{program: filepath.Base(os.Args[0]), log: slog.Default(), callTimeout: DefaultCallTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if !o.spinSet {
		spin, err := spinFromEnv()
		if err != nil {
			return nil, err
		}
		o.spin = spin
	}
	dir, err := rundir.Resolve(o.dir)
	if err != nil {
		return nil, fmt.Errorf("chanos: join: %w", err)
	}
	sock := rundir.Socket(dir)
	if err := rundir.Check(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("chanos: join: %w", err)
	}
	pc, err := seqpacket.Dial(ctx, sock, monitor.MaxFrameSize)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%w at %s: start one with `chanos monitor --dir %s` (or set %s)", ErrNoMonitor, sock, dir, rundir.EnvVar)
		}
		return nil, fmt.Errorf("chanos: join: %w", err)
	}
	d := &Domain{
		conn:    newConn(seqpacket.NewLink(pc), monitorInterface, o.log),
		dir:     dir,
		log:     o.log,
		spin:    o.spin,
		timeout: o.callTimeout,
		exports: map[uint64]*Listener{},
		early:   map[uint64][]*monitor.Incoming{},
		done:    make(chan struct{}),
	}
	go d.serve()
	var reply monitor.HelloReply
	if err := d.call(ctx, &monitor.HelloCall{Version: monitor.ProtocolVersion, Program: truncate(o.program, monitor.MaxHelloProgramLen)}, &reply); err != nil {
		d.Close()
		var re *RemoteError
		if errors.As(err, &re) && monitor.Status(re.Code) == monitor.StatusLimit {
			// The monitor answers hello with limit when it has no session
			// to give: "monitor full: N of N sessions".
			return nil, fmt.Errorf("chanos: join: %w: %w", ErrMonitorFull, err)
		}
		return nil, fmt.Errorf("chanos: join: %w", err)
	}
	d.id, d.machine = reply.DomainID, reply.MachineID
	return d, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// ID returns the domain's id, unique among the monitor's domains.
func (d *Domain) ID() uint64 { return d.id }

// Machine returns the monitor's machine id.
func (d *Domain) Machine() uint64 { return d.machine }

// Dir returns the monitor directory the domain joined.
func (d *Domain) Dir() string { return d.dir }

// Err returns why the session with the monitor ended (matching
// ErrMonitorLost or ErrClosed), or nil while it lasts.
func (d *Domain) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// Done is closed when the session with the monitor ends.
func (d *Domain) Done() <-chan struct{} { return d.done }

// Close leaves the monitor: the domain's names are removed and its
// listeners stop accepting. Connections already bound stay open until
// closed.
func (d *Domain) Close() error {
	d.endSession(ErrClosed)
	err := d.conn.Close()
	<-d.done
	return err
}

// endSession records why the session ended and stops what waits on it.
func (d *Domain) endSession(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return
	}
	d.err = err
	for _, l := range d.exports {
		l.stop(err)
	}
	for _, list := range d.early {
		for _, in := range list {
			wire.CloseCaps(in.Fds)
		}
	}
	d.early = nil
}

// call makes an rpc to the monitor, bounded by the domain's call timeout
// when ctx has no deadline; the monitor's status codes come back as this
// package's errors.
func (d *Domain) call(ctx context.Context, call, reply wire.Message) error {
	bounded := false
	if _, ok := ctx.Deadline(); !ok && d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
		bounded = true
	}
	return d.callUnbounded(ctx, call, reply, bounded)
}

// callUnbounded is call without the bound: for a bind that waits for its
// name as long as its caller's context lasts. bounded says that ctx's
// deadline is the domain's call timeout.
func (d *Domain) callUnbounded(ctx context.Context, call, reply wire.Message, bounded bool) error {
	err := d.conn.Call(ctx, call, reply)
	var re *RemoteError
	switch {
	case err == nil:
		return nil
	case bounded && errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w to %s within %v: is it stopped? (%w)", ErrMonitorTimeout, call.MsgName(), d.timeout, err)
	case errors.As(err, &re):
		return monitorError(re)
	case interconnect.IsEnd(err):
		if serr := d.Err(); serr != nil {
			return serr
		}
		return fmt.Errorf("%w: %w", ErrMonitorLost, err)
	}
	return err
}

// serve handles what the monitor sends on its own until the session ends.
func (d *Domain) serve() {
	defer close(d.done)
	err := d.conn.Serve(context.Background(), d.handle)
	if err == nil {
		err = ErrMonitorLost // the monitor closed the socket, or exited
	} else {
		if errors.Is(err, ErrProtocol) {
			d.log.Error("chanos: bad frame from the monitor; leaving", "err", err)
		}
		err = fmt.Errorf("%w: %w", ErrMonitorLost, err)
	}
	d.endSession(err)
	d.conn.Close()
}

// handle takes a message from the monitor: a connection bound to one of
// the domain's exports, or a ping. The monitor makes no calls to domains.
//
// A ping needs no answer: the monitor sees from its socket that the
// domain read it. This goroutine reads whatever the program's own
// goroutines do (sleep, block, spin), so a domain that joined stays
// responsive for as long as its process runs.
func (d *Domain) handle(_ context.Context, in *Incoming) (wire.Message, error) {
	if in.Kind == wire.KindMessage && in.Header.Msg == monitor.MsgPing {
		var p monitor.Ping
		if err := in.Decode(&p); err != nil {
			wire.CloseCaps(in.Caps)
			return nil, interconnect.Violation(err)
		}
		return nil, nil
	}
	if in.Kind != wire.KindMessage || in.Header.Msg != monitor.MsgIncoming {
		wire.CloseCaps(in.Caps)
		return nil, interconnect.Violation(fmt.Errorf("unexpected %s %d from the monitor", in.Kind, in.Header.Msg))
	}
	m := new(monitor.Incoming)
	if err := in.Decode(m); err != nil {
		wire.CloseCaps(in.Caps)
		return nil, interconnect.Violation(err)
	}
	d.incoming(m)
	return nil, nil
}

// monitorError maps the monitor's status codes onto this package's errors.
func monitorError(re *RemoteError) error {
	var kind error
	switch monitor.Status(re.Code) {
	case monitor.StatusExists:
		kind = ErrNameTaken
	case monitor.StatusNotFound:
		kind = ErrNotFound
	case monitor.StatusMismatch:
		kind = ErrInterfaceMismatch
	case monitor.StatusInvalid:
		kind = ErrInvalidName
	default:
		return re
	}
	return fmt.Errorf("%w: %w", kind, re)
}

// earlyLimit bounds the connections held for an export whose reply has
// not been seen yet.
const earlyLimit = 64

// incoming hands a new server-side connection to its listener.
func (d *Domain) incoming(in *monitor.Incoming) {
	d.mu.Lock()
	l := d.exports[in.Ref.Export]
	if l == nil {
		// The monitor may announce a connection before its reply to the
		// export that made it has been read: hold it for Export.
		if d.early != nil && len(d.early[in.Ref.Export]) < earlyLimit {
			d.early[in.Ref.Export] = append(d.early[in.Ref.Export], in)
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		wire.CloseCaps(in.Fds)
		return
	}
	d.mu.Unlock()
	l.accept(in)
}

// openUMP opens one side of a ring pair from the monitor's descriptors.
func (d *Domain) openUMP(side ump.Side, caps []wire.Cap, maxFrame int) (*ump.Conn, error) {
	return ump.OpenCaps(side, caps, &ump.Options{MaxMessageSize: maxFrame, SpinWindow: d.spin})
}

// Listener is an export: it accepts the connections clients bind to it.
type Listener struct {
	d     *Domain
	name  string
	ref   wire.Iref
	iface Interface
	conns chan *Conn
	mu    sync.Mutex
	err   error
	stopC chan struct{}
}

// withdrawTimeout bounds Listener.Close's wait for the monitor.
const withdrawTimeout = 5 * time.Second

// acceptQueue is how many bound connections wait for Accept before new
// ones are refused (closed, which the client sees as ErrClosed).
const acceptQueue = 128

// Export registers name for a service of interface iface and returns the
// listener of its connections. The name is a lease: it is removed when
// the listener closes or the domain ends, even by kill -9.
func Export(ctx context.Context, d *Domain, name string, iface Interface) (*Listener, error) {
	var reply monitor.ExportReply
	if len(name) > monitor.MaxExportNameLen {
		return nil, fmt.Errorf("chanos: export %q: %w: longer than %d bytes", name, ErrInvalidName, monitor.MaxExportNameLen)
	}
	err := d.call(ctx, &monitor.ExportCall{Name: name, Iface: iface.Name, MaxFrame: uint32(iface.MaxFrameSize)}, &reply)
	if err != nil {
		return nil, fmt.Errorf("chanos: export %q: %w", name, err)
	}
	l := &Listener{d: d, name: name, ref: reply.Ref, iface: iface, conns: make(chan *Conn, acceptQueue), stopC: make(chan struct{})}
	d.mu.Lock()
	if d.err != nil {
		err := d.err
		d.mu.Unlock()
		return nil, err
	}
	d.exports[reply.Ref.Export] = l
	early := d.early[reply.Ref.Export]
	delete(d.early, reply.Ref.Export)
	d.mu.Unlock()
	for _, in := range early {
		l.accept(in)
	}
	return l, nil
}

// Name returns the exported name.
func (l *Listener) Name() string { return l.name }

// Ref returns the export's iref.
func (l *Listener) Ref() wire.Iref { return l.ref }

func (l *Listener) accept(in *monitor.Incoming) {
	if in.Ref != l.ref {
		wire.CloseCaps(in.Fds)
		l.d.log.Warn("chanos: connection for an export with another token; refused", "name", l.name)
		return
	}
	u, err := l.d.openUMP(ump.Creator, in.Fds, l.iface.MaxFrameSize)
	if err != nil {
		l.d.log.Warn("chanos: could not open an incoming connection", "name", l.name, "err", err)
		return
	}
	l.enqueue(newConn(ump.NewLink(u), l.iface, l.d.log))
}

func (l *Listener) enqueue(c *Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		c.Close()
		return
	}
	select {
	case l.conns <- c:
	default:
		l.d.log.Warn("chanos: accept queue full; connection refused", "name", l.name, "queue", acceptQueue)
		c.Close()
	}
}

// Accept waits for the next connection bound to the export.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	default:
	}
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.stopC:
		select {
		case c := <-l.conns:
			return c, nil
		default:
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *Listener) stop(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
		close(l.stopC)
	}
}

// Close withdraws the export (its name is removed) and closes the
// connections that were not accepted yet.
func (l *Listener) Close() error {
	l.d.mu.Lock()
	if l.d.exports[l.ref.Export] == l {
		delete(l.d.exports, l.ref.Export)
	}
	l.d.mu.Unlock()
	l.stop(ErrClosed)
	for {
		select {
		case c := <-l.conns:
			c.Close()
			continue
		default:
		}
		break
	}
	if l.d.Err() != nil {
		return nil // the monitor removed the name with the session
	}
	ctx, cancel := context.WithTimeout(context.Background(), withdrawTimeout)
	defer cancel()
	var reply monitor.WithdrawReply
	if err := l.d.call(ctx, &monitor.WithdrawCall{Name: l.name}, &reply); err != nil {
		return fmt.Errorf("chanos: withdraw %q: %w", l.name, err)
	}
	return nil
}

// Connect binds to the service exported under name, waiting for the name
// to appear until ctx ends, and returns the connection. The monitor
// checks that the export speaks iface.
func Connect(ctx context.Context, d *Domain, name string, iface Interface) (*Conn, error) {
	var reply monitor.BindReply
	if len(name) > monitor.MaxBindNameLen {
		return nil, fmt.Errorf("chanos: connect %q: %w: longer than %d bytes", name, ErrInvalidName, monitor.MaxBindNameLen)
	}
	if err := d.callUnbounded(ctx, &monitor.BindCall{Name: name, Iface: iface.Name, Wait: true}, &reply, false); err != nil {
		if ctx.Err() != nil && !errors.Is(err, ErrNotFound) {
			err = fmt.Errorf("%w (waited until the context ended): %w", ErrNotFound, err)
		}
		return nil, fmt.Errorf("chanos: connect %q: %w", name, err)
	}
	switch reply.Via {
	case monitor.InterconnectLocal:
		wire.CloseCaps(reply.Fds)
		d.mu.Lock()
		l := d.exports[reply.Ref.Export]
		d.mu.Unlock()
		if l == nil || l.ref != reply.Ref {
			return nil, fmt.Errorf("chanos: connect %q: %w: the local export is gone", name, ErrNotFound)
		}
		a, b := local.Pair()
		l.enqueue(newConn(b, l.iface, d.log))
		return newConn(a, iface, d.log), nil
	case monitor.InterconnectUMP:
		if int(reply.MaxFrame) > iface.MaxFrameSize && iface.MaxFrameSize > 0 {
			wire.CloseCaps(reply.Fds)
			return nil, fmt.Errorf("chanos: connect %q: %w: the export's frames are up to %d bytes, ours %d", name, ErrInterfaceMismatch, reply.MaxFrame, iface.MaxFrameSize)
		}
		u, err := d.openUMP(ump.Attacher, reply.Fds, int(reply.MaxFrame))
		if err != nil {
			return nil, fmt.Errorf("chanos: connect %q: %w", name, err)
		}
		return newConn(ump.NewLink(u), iface, d.log), nil
	}
	wire.CloseCaps(reply.Fds)
	return nil, fmt.Errorf("chanos: connect %q: unknown interconnect %v", name, reply.Via)
}

// Serve accepts connections until ctx ends or the listener closes, and
// runs handle for each in a goroutine of its own. It returns nil after a
// close or ctx's end, once every handler has returned; a handler's error is
// logged, as it concerns one connection only.
func (l *Listener) Serve(ctx context.Context, handle func(ctx context.Context, c *Conn) error) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			if err := handle(ctx, c); err != nil && !errors.Is(err, context.Canceled) {
				l.d.log.Debug("chanos: connection ended", "name", l.name, "err", err)
			}
		}()
	}
}

// newConn returns the connection over l, logging to log.
func newConn(l interconnect.Link, iface Interface, log *slog.Logger) *Conn {
	return (*Conn)(engine.New(l, iface, log))
}
