package monitor

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chanos/chanos/interconnect/seqpacket"
	"github.com/chanos/chanos/interfaces/nameservice"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// SelfDomainID is the domain id of the monitor itself: the owner of the
// name "nameservice" and the server of nameservice connections. Domains
// get ids from SelfDomainID+1 on.
const SelfDomainID = 1

// MaxCallFrame bounds the frames a domain sends the monitor: its calls
// and cancels. The largest call of the protocol (export) is at most 2533
// bytes, with its allow-lists full; the rest is room to grow. The monitor receives into a buffer this large
// per session, rather than one of the interface's MaxFrameSize, which only
// its own replies (ps) can reach.
const MaxCallFrame = 4096

// Defaults of Config's limits.
const (
	DefaultMaxDomains      = 1024
	DefaultMaxExports      = 256
	DefaultMaxPendingBinds = 64
	DefaultMaxFrame        = 16 << 20
	DefaultHelloTimeout    = 10 * time.Second
)

// Config configures a monitor. The zero value gives the defaults.
type Config struct {
	// Dir is the monitor's directory, as a --dir flag would give it;
	// empty means the rule of Dir.
	Dir string
	// MaxDomains caps the concurrent sessions, counting those that have
	// not said hello yet; connections beyond it are closed at once.
	// Zero means DefaultMaxDomains.
	MaxDomains int
	// MaxExports caps the exports of one domain. Zero means
	// DefaultMaxExports.
	MaxExports int
	// MaxPendingBinds caps the binds one domain may have in progress
	// (waiting for a name, say). Zero means DefaultMaxPendingBinds.
	MaxPendingBinds int
	// MaxFrame is the largest max_frame an export may declare; it sizes
	// the ring pairs of its connections. Zero means DefaultMaxFrame.
	MaxFrame uint32
	// HelloTimeout is how long a new connection may take to send hello.
	// Zero means DefaultHelloTimeout.
	HelloTimeout time.Duration
	// Store holds the names. Nil means a new names.Memory, which the
	// monitor closes when it stops; a Store given here is not closed.
	Store names.Store
	// Logger receives the monitor's structured logs. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Monitor is a running monitor. Create one with New, run it with Serve,
// stop it by ending Serve's context or with Close.
type Monitor struct {
	cfg       Config
	dir       string
	sockPath  string
	log       *slog.Logger
	ln        *seqpacket.Listener
	store     names.Store
	ownStore  *names.Memory
	machineID uint64
	uid       uint32
	pid       int
	started   time.Time
	ns        *export // the nameservice's export

	nextDomain atomic.Uint64
	nextExport atomic.Uint64
	nextConn   atomic.Uint64

	mu       sync.Mutex
	sessions map[*session]struct{} // every accepted session, before hello too
	domains  map[uint64]*session   // sessions that said hello, by domain id
	exports  map[uint64]*export    // by export id
	conns    map[uint64]*connRec   // by connection id
	nsConns  map[uint64]*nsConn    // nameservice connections, by connection id
	closed   bool

	wg        sync.WaitGroup // sessions and nameservice connections
	closeOnce sync.Once
	done      chan struct{} // closed when shutdown has finished
	serving   atomic.Bool

	testMaxPacket int // if set, caps the sessions' packet size (tests)
}

// export is one exported service.
type export struct {
	id       uint64
	name     string
	iface    string
	maxFrame uint32
	ref      wire.Iref
	domain   *session // nil for the monitor's own nameservice
	policy   policy
}

// connRec records a bound connection for ps. The monitor does not see a
// connection end (the data path bypasses it); a record lives until either
// domain's session ends.
type connRec struct {
	id     uint64
	name   string
	via    proto.Interconnect
	client uint64 // domain ids
	server uint64
	export uint64
}

// New prepares the monitor's directory (see PrepareDir), listens on its
// socket and registers the nameservice. It fails if another monitor
// already listens there. Serve then accepts domains.
func New(cfg Config) (*Monitor, error) {
	if cfg.MaxDomains <= 0 {
		cfg.MaxDomains = DefaultMaxDomains
	}
	if cfg.MaxExports <= 0 {
		cfg.MaxExports = DefaultMaxExports
	}
	if cfg.MaxPendingBinds <= 0 {
		cfg.MaxPendingBinds = DefaultMaxPendingBinds
	}
	if cfg.MaxFrame == 0 {
		cfg.MaxFrame = DefaultMaxFrame
	}
	if cfg.MaxFrame < nameservice.MaxFrameSize {
		return nil, fmt.Errorf("monitor: MaxFrame %d is below the nameservice's %d", cfg.MaxFrame, nameservice.MaxFrameSize)
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = DefaultHelloTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	dir, err := Dir(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	if err := PrepareDir(dir); err != nil {
		return nil, err // "monitor directory: ..."
	}
	machineID, err := randomID()
	if err != nil {
		return nil, fmt.Errorf("monitor: machine id: %w", err)
	}
	m := &Monitor{
		cfg:       cfg,
		dir:       dir,
		sockPath:  SocketPath(dir),
		log:       log,
		store:     cfg.Store,
		machineID: machineID,
		uid:       uint32(os.Getuid()),
		pid:       os.Getpid(),
		started:   time.Now(),
		sessions:  map[*session]struct{}{},
		domains:   map[uint64]*session{},
		exports:   map[uint64]*export{},
		conns:     map[uint64]*connRec{},
		nsConns:   map[uint64]*nsConn{},
		done:      make(chan struct{}),
	}
	m.nextDomain.Store(SelfDomainID)
	if m.store == nil {
		m.ownStore = names.NewMemory()
		m.store = m.ownStore
	}
	fail := func(err error) (*Monitor, error) {
		if m.ownStore != nil {
			m.ownStore.Close()
		}
		return nil, err
	}
	ln, err := seqpacket.Listen(m.sockPath, MaxCallFrame)
	if err != nil {
		if errors.Is(err, seqpacket.ErrInUse) {
			return fail(fmt.Errorf("monitor: another monitor is already running on %s: %w", m.sockPath, seqpacket.ErrInUse))
		}
		return fail(fmt.Errorf("monitor: listen on %s: %w", m.sockPath, err))
	}
	m.ln = ln
	// The nameservice is an export of the monitor's own, under a name the
	// monitor owns.
	ns, err := m.newExport(nameservice.ServiceName, nameservice.InterfaceName, nameservice.MaxFrameSize, nil)
	if err == nil {
		m.exports[ns.id] = ns
		m.ns = ns
		err = m.store.Set(context.Background(), nameservice.ServiceName, ns.ref, names.Owner(SelfDomainID))
	}
	if err != nil {
		ln.Close()
		return fail(fmt.Errorf("monitor: register the nameservice: %w", err))
	}
	return m, nil
}

// Run runs a monitor configured by cfg until ctx ends, then shuts it down
// and returns nil. It fails if the monitor cannot start (a bad directory,
// another monitor already running) or stops accepting on an error.
func Run(ctx context.Context, cfg Config) error {
	m, err := New(cfg)
	if err != nil {
		return err
	}
	return m.Serve(ctx)
}

// Dir returns the monitor's directory.
func (m *Monitor) Dir() string { return m.dir }

// Socket returns the path of the monitor's socket.
func (m *Monitor) Socket() string { return m.sockPath }

// MachineID returns the monitor's machine id, random per start.
func (m *Monitor) MachineID() uint64 { return m.machineID }

// Serve accepts domains until ctx ends or Close is called, then shuts the
// monitor down: it stops accepting, ends every session, removes the socket
// and waits for its goroutines. It returns nil after an orderly shutdown
// and an error if accepting failed. Serve may be called once.
func (m *Monitor) Serve(ctx context.Context) error {
	if !m.serving.CompareAndSwap(false, true) {
		return errors.New("monitor: Serve called twice")
	}
	stop := context.AfterFunc(ctx, func() { m.shutdown() })
	defer stop()
	m.log.Info("monitor started", "socket", m.sockPath, "pid", m.pid,
		"machine", fmt.Sprintf("%016x", m.machineID), "max_domains", m.cfg.MaxDomains)
	err := m.acceptLoop()
	m.shutdown()
	if err != nil {
		m.log.Error("monitor stopped", "err", err)
		return err
	}
	m.log.Info("monitor stopped")
	return nil
}

// Close shuts the monitor down as the end of Serve's context does, and
// waits until it has.
func (m *Monitor) Close() error {
	m.shutdown()
	return nil
}

// errShutdown ends sessions when the monitor stops.
var errShutdown = errors.New("the monitor is shutting down")

func (m *Monitor) shutdown() {
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		sessions := make([]*session, 0, len(m.sessions))
		for s := range m.sessions {
			sessions = append(sessions, s)
		}
		nsConns := make([]*nsConn, 0, len(m.nsConns))
		for _, c := range m.nsConns {
			nsConns = append(nsConns, c)
		}
		m.mu.Unlock()
		// Closing the listener removes the socket file.
		if err := m.ln.Close(); err != nil {
			m.log.Warn("close the socket", "err", err)
		}
		for _, s := range sessions {
			s.end(errShutdown)
		}
		for _, c := range nsConns {
			c.end(errShutdown)
		}
		m.wg.Wait()
		if m.ownStore != nil {
			m.ownStore.Close()
		}
		close(m.done)
	})
	<-m.done
}

func (m *Monitor) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

func (m *Monitor) acceptLoop() error {
	var backoff time.Duration
	for {
		pc, err := m.ln.Accept()
		if err != nil {
			if m.isClosed() {
				return nil
			}
			// Out of descriptors or memory: wait and retry, as net/http
			// does, rather than stop serving the domains there are.
			var se syscall.Errno
			if errors.As(err, &se) && (se == syscall.EMFILE || se == syscall.ENFILE || se == syscall.ENOBUFS || se == syscall.ENOMEM || se == syscall.ECONNABORTED) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				m.log.Warn("accept failed; retrying", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("monitor: accept: %w", err)
		}
		backoff = 0
		m.admit(pc)
	}
}

// checkPeer decides whether a peer with credentials cred may open a
// session with a monitor run by uid: only the same user may.
func checkPeer(cred *syscall.Ucred, uid uint32) error {
	if cred == nil {
		return errors.New("no peer credentials")
	}
	if cred.Uid != uid {
		return fmt.Errorf("peer uid %d (pid %d) is not the monitor's uid %d", cred.Uid, cred.Pid, uid)
	}
	return nil
}

// admit checks a new connection's peer and the session cap, and starts
// its session.
func (m *Monitor) admit(pc *seqpacket.Conn) {
	cred, err := pc.PeerCred()
	if err == nil {
		err = checkPeer(cred, m.uid)
	}
	if err != nil {
		m.log.Warn("connection refused", "reason", "credentials", "err", err)
		pc.Close()
		return
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		pc.Close()
		return
	}
	if len(m.sessions) >= m.cfg.MaxDomains {
		n := len(m.sessions)
		m.mu.Unlock()
		m.log.Warn("connection refused: too many domains", "pid", cred.Pid,
			"max_domains", m.cfg.MaxDomains, "sessions", n,
			"hint", "raise the cap with --max-domains")
		pc.Close()
		return
	}
	maxPacket := preparePacketSize(pc.UnixConn(), proto.MaxFrameSize)
	if m.testMaxPacket > 0 {
		maxPacket = min(maxPacket, m.testMaxPacket)
	}
	pc.SetSendLimit(maxPacket)
	s := newSession(m, pc, cred, maxPacket)
	m.sessions[s] = struct{}{}
	m.wg.Add(1)
	m.mu.Unlock()
	go s.run()
}

// newExport makes an export with a fresh id and token; it does not
// register it.
func (m *Monitor) newExport(name, iface string, maxFrame uint32, s *session) (*export, error) {
	e := &export{
		id:       m.nextExport.Add(1),
		name:     name,
		iface:    iface,
		maxFrame: maxFrame,
		domain:   s,
	}
	e.ref = wire.Iref{Machine: m.machineID, Export: e.id}
	if _, err := rand.Read(e.ref.Token[:]); err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	return e, nil
}

// randomID returns a random nonzero 64-bit id.
func randomID() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, err
		}
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id, nil
		}
	}
}
