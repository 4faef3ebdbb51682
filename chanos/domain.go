package chanos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chanos/chanos/chanos/internal/engine"
	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/interconnect/local"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interconnect/seqpacket"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/ratelog"
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
	// stopped or restarted). Bound connections keep working. A domain
	// rejoins the next monitor by itself (unless WithoutRejoin), exporting
	// its names again: meanwhile, calls to the monitor (Export, ConnectRef,
	// ...) fail with this error, and work again once it has rejoined
	// (OnMonitor tells when); Connect, which waits for its name, waits for
	// the rejoin too. Under WithoutRejoin, they need a new Join.
	ErrMonitorLost = errors.New("chanos: lost the monitor")
	// ErrNameTaken: Export was given a name that is registered already.
	ErrNameTaken = errors.New("chanos: name already registered")
	// ErrNotFound: Connect's name is not registered (and was not before
	// the context's deadline, or within the domain's call timeout for a
	// context without one).
	ErrNotFound = errors.New("chanos: name not found")
	// ErrInterfaceMismatch: the name is exported with another interface,
	// or with another version of it: the fingerprints of the export and
	// the client differ (docs/idl.md, "Fingerprints"). The error names
	// the interface and both fingerprints.
	ErrInterfaceMismatch = errors.New("chanos: interface mismatch")
	// ErrInvalidName: the monitor rejected the name (see the nameservice's
	// rules: 1 to 256 printable ASCII bytes without spaces).
	ErrInvalidName = errors.New("chanos: invalid name")
	// ErrDenied: the monitor refused a bind: the export is private and
	// was bound by name, the caller's uid or program is not on the
	// export's allow-list, or the iref's token is wrong (docs/security.md).
	ErrDenied = errors.New("chanos: denied")
	// ErrMonitorTimeout: a call to the monitor whose context had no
	// deadline got no answer within the domain's call timeout (see
	// WithCallTimeout; for Connect's bind, which waits that long for its
	// name, a second more): the monitor is stopped or wedged.
	ErrMonitorTimeout = errors.New("chanos: no answer from the monitor")
	// ErrMonitorFull: Join was refused because the monitor has as many
	// sessions as its cap (`chanos monitor --max-domains`). The error
	// also matches the monitor's *RemoteError, whose detail says "monitor
	// full: N of N sessions".
	ErrMonitorFull = errors.New("chanos: monitor full")
	// ErrUntrustedMonitor: Join, or a rejoin, found the monitor's
	// directory open to other users (it must be this user's, mode 0700),
	// or the process on its socket running as another user
	// (docs/security.md, "Other users").
	ErrUntrustedMonitor = errors.New("chanos: untrusted monitor")
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
	calls       []CallInterceptor
	noRejoin    bool
	onMonitor   func(MonitorEvent)
}

// WithDir joins the monitor in dir instead of the default ($CHANOS_DIR,
// else $XDG_RUNTIME_DIR/chanos, else chanos-UID in the temporary
// directory).
func WithDir(dir string) Option { return func(o *options) { o.dir = dir } }

// WithProgram sets the name the domain gives the monitor (shown by
// `chanos ps`); the default is the executable's base name.
func WithProgram(name string) Option { return func(o *options) { o.program = name } }

// WithCallTimeout bounds each call to the monitor whose context has no
// deadline of its own (Join's hello, Export, Ps, a Listener's withdraw,
// Connect's bind), DefaultCallTimeout without it: a stopped or wedged
// monitor then gives an error matching ErrMonitorTimeout instead of a
// hang. Connect's bind, which waits for its name, waits d for it: the
// monitor answers that the name did not appear (ErrNotFound) at d, and a
// monitor that has not answered a second later gives ErrMonitorTimeout. A
// d of 0 or less leaves such calls unbounded (Connect then waits for its
// name as long as it takes).
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.callTimeout = d } }

// WithCallInterceptor runs every rpc call made on the domain's
// connections through is, the first outermost (its context goes to the
// second, its after sees what the second's after returned): the
// connections Connect and ConnectRef make, those a Listener accepts, on
// which a server calls its clients back, and those over the network. The
// domain's own calls to its monitor do not run through them. A domain
// without interceptors pays nothing for them.
func WithCallInterceptor(is ...CallInterceptor) Option {
	return func(o *options) { o.calls = append(o.calls, is...) }
}

// WithLogger sets the logger for the domain's diagnostics.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithSpinWindow sets how long the domain's ump connections spin for a
// message, or for room to send one, before they park the goroutine (see
// ump.Options.SpinWindow): 0 keeps ump.DefaultSpinWindow (40 µs), a
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
	id      atomic.Uint64 // changes when the domain rejoins
	machine atomic.Uint64
	dir     string
	program string
	log     *slog.Logger
	rlog    *ratelog.Log      // what peers can make happen often: a line a second per kind
	spin    time.Duration     // ump.Options.SpinWindow of the domain's connections
	timeout time.Duration     // bounds the calls to the monitor without a deadline
	calls   []CallInterceptor // WithCallInterceptor's, for every connection but the monitor's

	noRejoin  bool
	onMonitor func(MonitorEvent)
	quit      chan struct{} // closed by Close: a rejoin stops waiting
	// rejoined is closed once a rejoin has exported the domain's names on
	// a new session, and then replaced (under mu): a Connect that met the
	// monitor's loss waits on it, as it would wait for its name.
	rejoined chan struct{}

	mu       sync.Mutex
	conn     *Conn                // the session with the monitor, or the last one
	closing  bool                 // Close was called
	exports  map[uint64]*Listener // by export id
	early    map[uint64][]*monitor.Incoming
	net      *netServer            // connections from other machines, once the monitor announces one
	netConn  map[uint64]*cnet.Link // connections with other machines, by the monitor's connection id
	netSwept int                   // netConn's size after its last sweep (trackNet)
	err      error                 // why the domain ended
	done     chan struct{}
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
	d := &Domain{
		dir:       dir,
		program:   o.program,
		log:       o.log,
		rlog:      ratelog.New(o.log, time.Second),
		spin:      o.spin,
		timeout:   o.callTimeout,
		calls:     o.calls,
		noRejoin:  o.noRejoin,
		onMonitor: o.onMonitor,
		quit:      make(chan struct{}),
		rejoined:  make(chan struct{}),
		exports:   map[uint64]*Listener{},
		early:     map[uint64][]*monitor.Incoming{},
		netConn:   map[uint64]*cnet.Link{},
		done:      make(chan struct{}),
	}
	conn, end, err := d.open(ctx)
	if err != nil {
		return nil, err
	}
	d.conn = conn
	go d.run(conn, end)
	return d, nil
}

// open starts a session with the monitor in d's directory: it dials,
// serves what the monitor sends in a goroutine whose end end receives,
// and says hello, which gives the domain its id.
func (d *Domain) open(ctx context.Context) (*Conn, chan error, error) {
	// Checked at every join, a rejoin's included: the monitor's directory
	// may have gone with the monitor, and been made again by someone else.
	if err := rundir.Check(d.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("chanos: join: %w: %w", ErrUntrustedMonitor, err)
	}
	sock := rundir.Socket(d.dir)
	pc, err := seqpacket.Dial(ctx, sock, monitor.MaxFrameSize)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, nil, fmt.Errorf("%w at %s: start one with `chanos monitor --dir %s` (or set %s)", ErrNoMonitor, sock, d.dir, rundir.EnvVar)
		}
		return nil, nil, fmt.Errorf("chanos: join: %w", err)
	}
	if err := monitorIsOurs(pc, sock); err != nil {
		pc.Close()
		return nil, nil, fmt.Errorf("chanos: join: %w", err)
	}
	// The monitor's session is the domain's own: the program's call
	// interceptors do not see it.
	conn := (*Conn)(engine.New(seqpacket.NewLink(pc), monitorInterface, d.log))
	end := make(chan error, 1)
	go func() { end <- conn.Serve(context.Background(), d.handle) }()
	var reply monitor.HelloReply
	if err := d.callOn(conn, ctx, &monitor.HelloCall{Version: monitor.ProtocolVersion, Program: truncate(d.program, monitor.MaxHelloProgramLen), Features: monitor.FeatureNet | monitor.FeatureNetAccept, SpawnToken: spawnToken()}, &reply); err != nil {
		conn.Close()
		<-end
		var re *RemoteError
		if errors.As(err, &re) && Code(re.Code) == CodeResourceExhausted {
			// The monitor answers hello with limit when it has no session
			// to give: "monitor full: N of N sessions".
			return nil, nil, fmt.Errorf("chanos: join: %w: %w", ErrMonitorFull, err)
		}
		return nil, nil, fmt.Errorf("chanos: join: %w", err)
	}
	d.id.Store(reply.DomainID)
	d.machine.Store(reply.MachineID)
	return conn, end, nil
}

// monitorIsOurs checks that the process listening on the monitor's socket
// runs as this process's user, as the kernel recorded it (SO_PEERCRED):
// the monitor holds every token and hands out every ring, and one of
// another user, whatever the directory's permissions let happen, gets
// neither this domain's exports nor its connections.
func monitorIsOurs(pc *seqpacket.Conn, sock string) error {
	cred, err := pc.PeerCred()
	if err != nil {
		return fmt.Errorf("the monitor's credentials at %s: %w", sock, err)
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("%w: %s: the monitor runs as uid %d, not %d", ErrUntrustedMonitor, sock, cred.Uid, os.Getuid())
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// ID returns the domain's id, unique among the monitor's domains. A
// domain that rejoins a new monitor gets a new id.
func (d *Domain) ID() uint64 { return d.id.Load() }

// Machine returns the monitor's machine id.
func (d *Domain) Machine() uint64 { return d.machine.Load() }

// Dir returns the monitor directory the domain joined.
func (d *Domain) Dir() string { return d.dir }

// Err returns why the domain ended (matching ErrClosed, or ErrMonitorLost
// under WithoutRejoin), or nil while it lasts: a domain that rejoins
// lasts across the monitor's restarts (see OnMonitor).
func (d *Domain) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// Done is closed when the domain ends: at Close, or, under WithoutRejoin,
// as soon as the session with the monitor ends (the monitor exited or was
// killed). A domain that rejoins reports the monitor's loss and its
// return through OnMonitor instead.
func (d *Domain) Done() <-chan struct{} { return d.done }

// Close leaves the monitor: the domain's names are removed and its
// listeners stop accepting. Connections already bound stay open until
// closed.
func (d *Domain) Close() error {
	d.endSession(ErrClosed)
	d.mu.Lock()
	first := !d.closing
	d.closing = true
	conn := d.conn
	d.mu.Unlock()
	if first {
		close(d.quit)
	}
	err := conn.Close()
	<-d.done
	d.mu.Lock()
	ns := d.net
	d.mu.Unlock()
	if ns != nil {
		ns.close()
	}
	d.rlog.Close()
	return err
}

// session returns the current session with the monitor (or the last,
// while the domain rejoins).
func (d *Domain) session() *Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conn
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
	return d.callOn(d.session(), ctx, call, reply)
}

// callUnbounded is call without the bound: for a bind that waits for its
// name as long as its caller's context lasts (see bind). bounded says
// that ctx's deadline is the domain's call timeout.
func (d *Domain) callUnbounded(ctx context.Context, call, reply wire.Message, bounded bool) error {
	return d.callOnUnbounded(d.session(), ctx, call, reply, bounded)
}

// callOn is call on the session conn.
func (d *Domain) callOn(conn *Conn, ctx context.Context, call, reply wire.Message) error {
	bounded := false
	if _, ok := ctx.Deadline(); !ok && d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
		bounded = true
	}
	return d.callOnUnbounded(conn, ctx, call, reply, bounded)
}

func (d *Domain) callOnUnbounded(conn *Conn, ctx context.Context, call, reply wire.Message, bounded bool) error {
	err := d.callError(conn.Call(ctx, call, reply))
	if bounded && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w to %s within %v: is it stopped? (%w)", ErrMonitorTimeout, call.MsgName(), d.timeout, err)
	}
	return err
}

// callError turns the error of a call to the monitor into this package's:
// the monitor's status codes, and the session's end.
func (d *Domain) callError(err error) error {
	var re *RemoteError
	switch {
	case err == nil:
		return nil
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

// sessionEnd turns the end of serving a session, Serve's error, into why
// the session ended.
func (d *Domain) sessionEnd(err error) error {
	if err == nil {
		return ErrMonitorLost // the monitor closed the socket, or exited
	}
	if errors.Is(err, ErrProtocol) {
		d.log.Error("chanos: bad frame from the monitor; leaving", "err", err)
	}
	return fmt.Errorf("%w: %w", ErrMonitorLost, err)
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
	if in.Kind == wire.KindMessage && in.Header.Msg == monitor.MsgPeerGone {
		var g monitor.PeerGone
		if err := in.Decode(&g); err != nil {
			wire.CloseCaps(in.Caps)
			return nil, interconnect.Violation(err)
		}
		d.peerGone(g.ConnID, g.NetworkLost)
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

// monitorStatus maps the monitor protocol's status codes, which are its
// own (docs/monitor-protocol.md), onto this package's errors and the
// canonical codes.
var monitorStatus = map[monitor.Status]struct {
	kind error
	code Code
}{
	monitor.StatusInvalid:   {ErrInvalidName, CodeInvalidArgument},
	monitor.StatusExists:    {ErrNameTaken, CodeAlreadyExists},
	monitor.StatusNotFound:  {ErrNotFound, CodeNotFound},
	monitor.StatusMismatch:  {ErrInterfaceMismatch, CodeFailedPrecondition},
	monitor.StatusLimit:     {nil, CodeResourceExhausted},
	monitor.StatusDenied:    {ErrDenied, CodePermissionDenied},
	monitor.StatusNoSession: {nil, CodeFailedPrecondition},
	monitor.StatusInternal:  {nil, CodeInternal},
	monitor.StatusNoRoute:   {ErrNoRoute, CodeUnavailable},
}

// monitorError maps the monitor's status codes onto this package's errors.
// The *RemoteError in the result carries the canonical code, so that
// CodeOf and errors.Is(err, CodeNotFound) read a monitor's failure as they
// read any rpc's.
func monitorError(re *RemoteError) error {
	m, ok := monitorStatus[monitor.Status(re.Code)]
	if !ok {
		m.code = CodeUnknown
	}
	re = &RemoteError{Msg: re.Msg, Code: wire.Errval(m.code), Detail: re.Detail}
	if m.kind == nil {
		return re
	}
	return &monitorRefusal{kind: m.kind, re: re}
}

// monitorRefusal is the monitor's refusal of a call: it matches its kind
// (ErrNotFound, ...) and is its RemoteError (for CodeOf), and reads as the
// kind and the monitor's detail, which names what was refused, once each:
// "chanos: name not found: bind "x": the name did not appear ...".
type monitorRefusal struct {
	kind error
	re   *RemoteError
}

func (e *monitorRefusal) Error() string   { return e.kind.Error() + ": " + e.re.Detail }
func (e *monitorRefusal) Unwrap() []error { return []error{e.kind, e.re} }

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
	d *Domain
	// relay, for an endpoint exported for another machine (netcaps.go),
	// takes the link of the one connection that binds it, instead of
	// Accept.
	relay  func(interconnect.Link)
	name   string
	opts   []ExportOption // to export it again when the domain rejoins
	onConn func(ConnEvent)
	ref    wire.Iref // under mu: a rejoin changes it
	iface  Interface
	conns  chan *Conn
	mu     sync.Mutex
	err    error
	stopC  chan struct{}
}

// withdrawTimeout bounds Listener.Close's wait for the monitor.
const withdrawTimeout = 5 * time.Second

// acceptQueue is how many bound connections wait for Accept before new
// ones are refused (closed, which the client sees as ErrClosed).
const acceptQueue = 128

// ExportOption sets the policy of an export: who may bind it
// (docs/security.md). Without any, the export is public: any domain of
// the monitor may bind it by name.
type ExportOption func(*exportOptions)

type exportOptions struct {
	private  bool
	uids     []uint32
	programs []string
	onConn   func(ConnEvent)
}

// Private makes the export private: a bind by its name is denied
// (ErrDenied), and only a bind by its iref (ConnectRef with
// Listener.Ref, token and all) succeeds. The name is still registered,
// and still a lease, but knowing it grants nothing: the iref is the
// capability, which the exporter hands to whom it chooses, in a message
// of any interface with an iref field.
func Private() ExportOption { return func(o *exportOptions) { o.private = true } }

// AllowUIDs lets only domains of the given uids (the kernel's
// SO_PEERCRED of their sessions) bind the export, by name or by iref.
// Repeated, the lists add up. A monitor admits only its own user's
// domains today, so the list matters where a monitor admits others.
func AllowUIDs(uids ...uint32) ExportOption {
	return func(o *exportOptions) { o.uids = append(o.uids, uids...) }
}

// AllowPrograms lets only domains whose program (WithProgram, the name
// they give the monitor at Join) is one of programs bind the export, by
// name or by iref. Repeated, the lists add up. A program names itself, so
// this keeps honest programs apart, not a hostile one of the same user:
// for that, export privately and hand out the iref.
func AllowPrograms(programs ...string) ExportOption {
	return func(o *exportOptions) { o.programs = append(o.programs, programs...) }
}

// checkName checks a name given to Export or Connect by the
// nameservice's rule (printable ASCII without spaces, at most max bytes;
// docs/nameservice.md), so that a mistake is ErrInvalidName before any
// call to the monitor, rather than the wire's refusal of a byte it
// cannot carry.
func checkName(name string, max int) error {
	if len(name) > max {
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalidName, max)
	}
	if i := strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r > '~' }); i >= 0 {
		return fmt.Errorf("%w: byte 0x%02x at %d; names are printable ASCII without spaces", ErrInvalidName, name[i], i)
	}
	return nil
}

// exportCall builds the monitor's export call of name with opts.
func exportCall(name string, iface Interface, opts []ExportOption) (*monitor.ExportCall, error) {
	var o exportOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkName(name, monitor.MaxExportNameLen); err != nil {
		return nil, err
	}
	if len(o.uids) > monitor.MaxExportUidsLen {
		return nil, fmt.Errorf("%d allowed uids; at most %d", len(o.uids), monitor.MaxExportUidsLen)
	}
	for _, p := range o.programs {
		if p == "" || len(p) > monitor.MaxHelloProgramLen || strings.ContainsAny(p, "\n\x00") {
			return nil, fmt.Errorf("allowed program %q: want 1 to %d bytes without newlines or NULs", p, monitor.MaxHelloProgramLen)
		}
	}
	programs := strings.Join(o.programs, "\n")
	if len(programs) > monitor.MaxExportProgramsLen {
		return nil, fmt.Errorf("the allowed programs take %d bytes; at most %d", len(programs), monitor.MaxExportProgramsLen)
	}
	return &monitor.ExportCall{
		Name: name, Iface: iface.Name, MaxFrame: uint32(iface.MaxFrameSize), Fingerprint: iface.Fingerprint,
		Private: o.private, Uids: o.uids, Programs: []byte(programs),
	}, nil
}

// Export registers name for a service of interface iface and returns the
// listener of its connections. The name is a lease: it is removed when
// the listener closes or the domain ends, even by kill -9. opts set who
// may bind it (Private, AllowUIDs, AllowPrograms); without them any
// domain of the monitor may, by name.
func Export(ctx context.Context, d *Domain, name string, iface Interface, opts ...ExportOption) (*Listener, error) {
	var reply monitor.ExportReply
	call, err := exportCall(name, iface, opts)
	if err != nil {
		return nil, fmt.Errorf("chanos: export %q: %w", name, err)
	}
	err = d.call(ctx, call, &reply)
	if err != nil {
		return nil, fmt.Errorf("chanos: export %q: %w", name, err)
	}
	l := &Listener{d: d, name: name, opts: opts, ref: reply.Ref, iface: iface, conns: make(chan *Conn, acceptQueue), stopC: make(chan struct{})}
	var o exportOptions
	for _, opt := range opts {
		opt(&o)
	}
	l.onConn = o.onConn
	d.mu.Lock()
	if d.err != nil {
		err := d.err
		d.mu.Unlock()
		return nil, err
	}
	d.adoptUnlock(l, reply.Ref.Export)
	return l, nil
}

// adoptUnlock records l as the listener of export, releases d.mu (which
// the caller holds), and gives l the connections to export that arrived
// before it was recorded.
func (d *Domain) adoptUnlock(l *Listener, export uint64) {
	d.exports[export] = l
	early := d.early[export]
	delete(d.early, export)
	d.mu.Unlock()
	for _, in := range early {
		l.accept(in)
	}
}

// Name returns the exported name.
func (l *Listener) Name() string { return l.name }

// ExportedInterface returns the interface of the domain's export name,
// and false if the domain has no export of that name that others may
// bind by name (none, or one made Private). A reflection service answers
// with it (docs/reflection.md).
func (d *Domain) ExportedInterface(name string) (Interface, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, l := range d.exports {
		if l.name == name && l.byName() {
			return l.iface, true
		}
	}
	return Interface{}, false
}

// byName reports whether others may bind l by its name: it is not
// Private, nor an endpoint relayed to another machine.
func (l *Listener) byName() bool {
	var o exportOptions
	for _, opt := range l.opts {
		opt(&o)
	}
	return !o.private && l.relay == nil
}

// Ref returns the export's iref, token and all: the capability to bind
// the export (ConnectRef), private or not. Whoever holds it may bind, and
// may pass it on; hand it only to those who should. Withdrawing the
// export (Close) revokes it.
func (l *Listener) Ref() wire.Iref {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ref
}

func (l *Listener) accept(in *monitor.Incoming) {
	if in.Ref != l.Ref() {
		wire.CloseCaps(in.Fds)
		l.d.log.Warn("chanos: connection for an export with another token; refused", "name", l.name)
		return
	}
	if in.Via == monitor.InterconnectNet {
		l.acceptNet(in)
		return
	}
	u, err := l.d.openUMP(ump.Creator, in.Fds, l.iface.MaxFrameSize)
	if err != nil {
		l.d.log.Warn("chanos: could not open an incoming connection", "name", l.name, "err", err)
		return
	}
	if l.relay != nil {
		l.relay(ump.NewLink(u))
		return
	}
	c := l.d.newConn(ump.NewLink(u), l.iface)
	l.connected(c, l.d.incomingPeer(in))
	l.enqueue(c)
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
	ref := l.Ref()
	l.d.mu.Lock()
	if l.d.exports[ref.Export] == l {
		delete(l.d.exports, ref.Export)
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
	if l.d.Err() != nil || l.d.session().Err() != nil {
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
// checks that the export speaks iface, and that its policy lets this
// domain bind it by name (ErrDenied for a private export). A ctx without a
// deadline waits the domain's call timeout (WithCallTimeout,
// DefaultCallTimeout: 10 s) for the name, then fails with an error
// matching ErrNotFound; a monitor that does not answer by then, and a
// second more, gives ErrMonitorTimeout.
//
// A monitor that goes away (it is restarted, say) while Connect waits, or
// is away when Connect is called, is waited for in the same time: once
// the domain has rejoined a new one, Connect binds there. If none comes
// back in time, the error matches ErrMonitorLost and ErrNotFound. Under
// WithoutRejoin it fails at once with ErrMonitorLost.
func Connect(ctx context.Context, d *Domain, name string, iface Interface) (*Conn, error) {
	if err := checkName(name, monitor.MaxBindNameLen); err != nil {
		return nil, fmt.Errorf("chanos: connect %q: %w", name, err)
	}
	if name == "" {
		return nil, fmt.Errorf("chanos: connect %q: %w: empty", name, ErrInvalidName)
	}
	label := fmt.Sprintf("%q", name)
	call := &monitor.BindCall{Name: name, Iface: iface.Name, Wait: true, Fingerprint: iface.Fingerprint}
	// Without a deadline, the domain's call timeout bounds the wait for
	// the name; it bounds the wait for a new monitor as well.
	until := time.Time{}
	if _, ok := ctx.Deadline(); !ok && d.timeout > 0 {
		until = time.Now().Add(d.timeout)
	}
	for {
		next := d.nextSession()
		c, err := d.bind(ctx, label, call, iface)
		if err == nil || d.noRejoin || !errors.Is(err, ErrMonitorLost) {
			return c, err
		}
		if werr := d.awaitRejoin(ctx, next, until); werr != nil {
			return nil, fmt.Errorf("%w; %w (%w)", err, ErrNotFound, werr)
		}
	}
}

// nextSession returns what closes once the domain has rejoined a new
// monitor after the current (or last) session.
func (d *Domain) nextSession() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rejoined
}

// awaitRejoin waits until next closes, and returns why it stopped waiting
// first otherwise: ctx's end, until (when not zero) or the domain's.
func (d *Domain) awaitRejoin(ctx context.Context, next <-chan struct{}, until time.Time) error {
	var expired <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-next:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("no monitor came back before the context ended: %w", ctx.Err())
	case <-expired:
		return fmt.Errorf("no monitor came back within %v, the domain's call timeout, as the context has no deadline", d.timeout)
	case <-d.done:
		return ErrClosed
	}
}

// ConnectRef binds to the export that ref names, by its iref rather than
// by a name: ref's token must be the export's (ErrDenied otherwise), as
// Listener.Ref gives it to the exporter, who may have passed it on. This
// is how a private export is bound. An iref read from the nameservice
// carries no token and binds nothing. The monitor checks iface and the
// export's allow-lists as for Connect; there is no waiting: an iref's
// export exists until it is withdrawn (ErrNotFound then). A ctx without a
// deadline is bounded by the domain's call timeout.
func ConnectRef(ctx context.Context, d *Domain, ref wire.Iref, iface Interface) (*Conn, error) {
	label := fmt.Sprintf("export %d of machine %016x", ref.Export, ref.Machine)
	if ref.IsZero() {
		return nil, fmt.Errorf("chanos: connect by iref: %w: the null iref", ErrInvalidName)
	}
	return d.bind(ctx, label, &monitor.BindCall{Iface: iface.Name, Target: ref, Fingerprint: iface.Fingerprint}, iface)
}

// bind makes a bind call and opens the connection it gives; label names
// it in errors (never a token).
func (d *Domain) bind(ctx context.Context, label string, call *monitor.BindCall, iface Interface) (*Conn, error) {
	var reply monitor.BindReply
	if err := d.bindCall(ctx, call, &reply); err != nil {
		return nil, fmt.Errorf("chanos: connect %s: %w", label, err)
	}
	switch reply.Via {
	case monitor.InterconnectLocal:
		wire.CloseCaps(reply.Fds)
		// The reply's iref carries no token; its machine and export id
		// name the export, which is this domain's own.
		d.mu.Lock()
		l := d.exports[reply.Ref.Export]
		d.mu.Unlock()
		if l == nil || l.Ref().WithoutToken() != reply.Ref.WithoutToken() {
			return nil, fmt.Errorf("chanos: connect %s: %w: the local export is gone", label, ErrNotFound)
		}
		a, b := local.Pair()
		if l.relay != nil {
			l.relay(b)
			return d.newConn(a, iface), nil
		}
		srv := d.newConn(b, l.iface)
		l.connected(srv, d.selfPeer())
		l.enqueue(srv)
		return d.newConn(a, iface), nil
	case monitor.InterconnectUMP:
		if int(reply.MaxFrame) > iface.MaxFrameSize && iface.MaxFrameSize > 0 {
			wire.CloseCaps(reply.Fds)
			return nil, fmt.Errorf("chanos: connect %s: %w: the export's frames are up to %d bytes, ours %d", label, ErrInterfaceMismatch, reply.MaxFrame, iface.MaxFrameSize)
		}
		u, err := d.openUMP(ump.Attacher, reply.Fds, int(reply.MaxFrame))
		if err != nil {
			return nil, fmt.Errorf("chanos: connect %s: %w", label, err)
		}
		return d.newConn(ump.NewLink(u), iface), nil
	case monitor.InterconnectNet:
		wire.CloseCaps(reply.Fds)
		return d.dialNet(ctx, label, &reply, iface)
	}
	wire.CloseCaps(reply.Fds)
	return nil, fmt.Errorf("chanos: connect %s: unknown interconnect %v", label, reply.Via)
}

// bindGrace is how much longer than it asks the monitor to wait for a
// name a bind bounded by the call timeout waits for the monitor's answer,
// as libchanos does (BIND_GRACE_MS): the monitor answers "not found" at
// its deadline, and only a monitor that says nothing past the grace is
// taken for stopped.
const bindGrace = time.Second

// bindCall makes a bind call. A bind by name waits for the name: with a
// deadline of ctx's own until then, and an end of ctx is the name's
// absence (ErrNotFound): the monitor's answer and ctx's end come together.
// Without one, the domain's call timeout bounds it (unless
// WithCallTimeout(0)): the monitor is asked to wait that long for the
// name and answers ErrNotFound then; no answer within bindGrace more is
// ErrMonitorTimeout. A bind by iref does not wait for anything, and is
// bounded the same way.
func (d *Domain) bindCall(ctx context.Context, call *monitor.BindCall, reply *monitor.BindReply) error {
	if _, ok := ctx.Deadline(); ok || d.timeout <= 0 {
		err := d.callUnbounded(ctx, call, reply, false)
		if err != nil && call.Wait && ctx.Err() != nil && !errors.Is(err, ErrNotFound) {
			err = fmt.Errorf("%w (waited until the context ended): %w", ErrNotFound, err)
		}
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, d.timeout+bindGrace)
	defer cancel()
	err := d.callError(eng(d.session()).CallTimeout(wctx, d.timeout, call, reply))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound) && call.Wait:
		return fmt.Errorf("not exported within %v (the domain's call timeout, as the context has no deadline; see WithCallTimeout): %w", d.timeout, err)
	case ctx.Err() != nil && call.Wait: // canceled
		return fmt.Errorf("%w (waited until the context ended): %w", ErrNotFound, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w within %v while binding (waiting up to %v for the name, if by name): is it stopped? (%w)", ErrMonitorTimeout, d.timeout+bindGrace, d.timeout, err)
	}
	return err
}

// Serve accepts connections until ctx ends or the listener closes, and
// runs handle for each in a goroutine of its own. It returns nil after a
// close or ctx's end, once every handler has returned; a handler's error is
// logged, as it concerns one connection only: at level Debug, but a
// protocol violation (ErrProtocol: a client that sent what the interface
// does not allow, as one built from another version of it does) at Warn,
// with the client's pid and program, a line a second at most per kind.
//
// To stop gracefully, as gRPC's GracefulStop does, Close the listener and
// let ctx live: the name is withdrawn, no new connection comes, the calls
// in flight finish, and Serve returns once every connection's handler has
// returned, that is once each client has closed its connection. Ending
// ctx instead cancels the contexts of the calls in flight at once.
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
			err := handle(ctx, c)
			// Not deferred: a handler that panics takes the process down,
			// and its connections must not close in order on the way, or
			// their clients would take the crash for a close rather than
			// their peer's death (ErrPeerDied), as after a kill.
			c.Close()
			switch {
			case err == nil || errors.Is(err, context.Canceled):
			case errors.Is(err, ErrProtocol):
				// The client sent what the interface does not allow (one
				// built from another version of it that bound without a
				// fingerprint, or a broken one): it only sees its
				// connection close, so the server says why.
				peer, _ := c.Peer()
				l.d.rlog.Log(slog.LevelWarn, ratelog.KindOf("protocol "+l.name, err), "chanos: closed a connection whose client broke the protocol",
					"name", l.name, "pid", peer.PID, "program", peer.Program, "err", err)
			default:
				l.d.log.Debug("chanos: connection ended", "name", l.name, "err", err)
			}
		}()
	}
}

// newConn returns the domain's connection over l: logging to the
// domain's logger, its calls run through the domain's call interceptors.
func (d *Domain) newConn(l interconnect.Link, iface Interface) *Conn {
	c := engine.New(l, iface, d.log)
	if len(d.calls) > 0 {
		c.InterceptCalls(d.calls...)
	}
	return (*Conn)(c)
}

// spawnToken is the spawn service's token in this process's environment
// (spawn.TokenEnv, which this package does not import): the proof, once,
// of which program the monitor's spawn service started this domain as.
// One that breaks hello's bound is not sent.
func spawnToken() string {
	t := os.Getenv("CHANOS_SPAWN_TOKEN")
	if len(t) > monitor.MaxHelloSpawnTokenLen || strings.ContainsRune(t, 0) {
		return ""
	}
	return t
}
