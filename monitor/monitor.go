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

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/seqpacket"
	"github.com/chanos/chanos/interfaces/nameservice"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/ratelog"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/spawn"
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

// Defaults of Config's limits and quotas. docs/quotas.md says what each
// defends, and how they bound the monitor's memory (Config.MemoryBound).
const (
	DefaultMaxDomains           = 1024
	DefaultMaxNSConns           = 16
	DefaultMaxTotalNSConns      = 128
	DefaultMaxNames             = 1024
	DefaultMaxTotalNames        = 16384
	DefaultMaxExports           = 256
	DefaultMaxTotalExports      = 4096
	DefaultMaxPendingBinds      = 64
	DefaultMaxTotalPendingBinds = 1024
	DefaultMaxTotalWatches      = 256
	DefaultMaxConnRecords       = 32
	DefaultMaxReplyQueue        = 64 << 10
	DefaultMaxReplyMemory       = 4 << 20
	DefaultMaxTotalReplyMemory  = 32 << 20
	DefaultMaxFrame             = 16 << 20
	DefaultHelloTimeout         = 10 * time.Second
	DefaultIdleTimeout          = 30 * time.Second
	DefaultPingTimeout          = 10 * time.Second
)

// Config configures a monitor. The zero value gives the defaults: a zero
// (or negative) field takes its Default constant.
type Config struct {
	// Dir is the monitor's directory, as a --dir flag would give it;
	// empty means the rule of Dir.
	Dir string
	// Spawn configures the spawn service the monitor hosts (spawn.go,
	// docs/spawn.md); the zero value gives its defaults.
	Spawn spawn.Config
	// MaxDomains caps the concurrent sessions, counting those that have
	// not said hello yet. A connection beyond it has its hello answered
	// with "monitor full: N of N sessions" (status limit), unless an
	// unresponsive session can be evicted to make room.
	MaxDomains int
	// MaxNSConns caps the nameservice connections of one domain, and
	// MaxTotalNSConns those of all domains together; a bind of the
	// nameservice beyond either is refused with limit.
	MaxNSConns      int
	MaxTotalNSConns int
	// MaxNames caps the names one domain holds through its nameservice
	// connections (set and not removed), and MaxTotalNames those of all
	// domains together; a set beyond either fails with NSQuota. Exported
	// names count as exports, not here.
	MaxNames      int
	MaxTotalNames int
	// MaxExports caps the exports of one domain, and MaxTotalExports
	// those of all domains together; an export beyond either is refused
	// with limit.
	MaxExports      int
	MaxTotalExports int
	// MaxPendingBinds caps the binds one domain may have in progress
	// (waiting for a name, say). MaxTotalPendingBinds caps the waits in
	// progress in the whole monitor: binds, and the nameservice's wait_for
	// calls, which wait the same way. A bind beyond either is refused
	// with limit; a wait_for with NSLimit.
	MaxPendingBinds      int
	MaxTotalPendingBinds int
	// MaxTotalWatches caps the nameservice watches of all connections
	// together (each connection may have 64); a watch beyond it ends its
	// connection, as a message has no reply to carry the refusal.
	MaxTotalWatches int
	// MaxConnRecords caps the connection records kept for ps per binding
	// domain: beyond it, the domain's oldest record is forgotten (the
	// connection itself is not touched: the monitor is not on its path).
	MaxConnRecords int
	// MaxReplyQueue is the send buffer of a session's socket, in bytes:
	// what the kernel may hold of the monitor's small frames to one domain
	// (replies, incoming connections, pings) that it has not read yet.
	// Beyond it, the senders to that domain wait.
	MaxReplyQueue int
	// MaxReplyMemory caps, in bytes, the memory one domain's large replies
	// (ps) may hold, from the reservation made before the reply is built
	// until the domain has read it from its socket; MaxTotalReplyMemory
	// caps that of all domains together. A request whose reservation
	// fails is refused with limit, "resource exhausted: ...". A ps
	// document is cut (truncated) to fit MaxReplyMemory.
	MaxReplyMemory      int
	MaxTotalReplyMemory int
	// MaxFrame is the largest max_frame an export may declare; it sizes
	// the ring pairs of its connections.
	MaxFrame uint32
	// HelloTimeout is how long a new connection may take to send hello.
	HelloTimeout time.Duration
	// IdleTimeout is how long a session may stay silent before the monitor
	// pings it, and PingTimeout how long the domain then has to read the
	// ping (any frame the monitor sent) before its session counts as
	// unresponsive. An unresponsive session is dropped when the monitor
	// needs what it holds: a session for a new domain, or reply memory.
	IdleTimeout time.Duration
	PingTimeout time.Duration
	// HandOverTTL is how long an export handed over waits for its
	// adopter before it is withdrawn; default HandOverTTL.
	HandOverTTL time.Duration
	// Store holds the names. Nil means a new names.Memory, which the
	// monitor closes when it stops; a Store given here is not closed.
	Store names.Store
	// MachineID, when not 0, is this machine's id, which its irefs carry.
	// A machine of a cluster takes a stable one, derived from its
	// identity; 0 means a random id per start, as a lone machine has.
	MachineID uint64
	// SharedStore says that Store is shared with the monitors of other
	// machines (a cluster). The monitor then does not register the name
	// "nameservice" in it: every machine serves its own nameservice, and a
	// bind of "nameservice" always reaches this machine's.
	SharedStore bool
	// Cluster names the machine's cluster in the machines call's answer;
	// "" for a lone machine.
	Cluster string
	// NetHost is an address of this machine that the cluster's other
	// machines reach (the host of the control link's address): the
	// monitor opens there the TCP listeners on which its domains accept
	// connections from other machines. Empty: binds from other machines
	// are refused (docs/net.md, "Binding between machines").
	NetHost string
	// NetAuthOnly lets connections between this machine's domains and
	// another's go unencrypted, authenticated only (net's TLS.AuthOnly),
	// when that machine lets them too: for trusted networks. Off, they
	// are encrypted.
	NetAuthOnly bool
	// Machines, when set, lists the machines of the cluster for the
	// machines call (nil: this machine alone). It must not block.
	Machines func() []chanos.MachineInfo
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
	spawnd    *spawnHost

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

	// Counts of the quotas kept under mu (docs/quotas.md); the sessions
	// keep their own shares.
	nsConnCount int                            // nameservice connections, those being bound included
	names       int                            // names set through the nameservice
	watches     int                            // nameservice watches
	replyMem    int                            // reply memory reserved
	served      map[uint64]map[uint64]*connRec // connection records by server, then id
	// machineConns routes binds to other machines: the machine protocol
	// over the control link this monitor dialled to each (remote.go).
	machineConns map[uint64]*chanos.Conn
	// own is the listener on which the monitor accepts connections from
	// other machines to the services it serves itself (spawn.go).
	own   *ownNet
	waits atomic.Int64 // binds and wait_for calls in progress

	maxPacket int           // the largest frame a session's socket can carry
	rlog      *ratelog.Log  // rejections, evictions, refusals: a line a second per kind
	rejectors chan struct{} // connections being refused that wait for their hello
	stop      chan struct{} // closed when shutdown begins: the janitor ends

	wg        sync.WaitGroup // sessions, nameservice connections, janitor, refusals, pings
	closeOnce sync.Once
	done      chan struct{} // closed when shutdown has finished
	serving   atomic.Bool

	testMaxPacket int // if set, caps the sessions' packet size (tests)
	// if set, called as an ended session's cleanup begins (tests)
	testBeforeCleanup func(*session)
}

// export is one exported service.
type export struct {
	m        *Monitor
	id       uint64
	name     string
	iface    string
	maxFrame uint32
	// fingerprint is the interface's (docs/idl.md), or 0 for none.
	fingerprint uint64
	ref         wire.Iref
	domain      *session // nil for the monitor's own nameservice; changes when adopted (under mu)
	policy      policy
	transit     *transit // while handed over and not adopted yet (under mu)
}

// server returns the domain that serves e: the exporting domain, or nil
// for the monitor's own services.
func (e *export) server() *session {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	return e.domain
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
	// machine is the other machine of a connection between machines (0
	// on this one), and inbound says its client is there (the server is
	// here); client or server is then a domain of that machine.
	machine uint64
	inbound bool
	// peerConn is the other machine's record of the same connection,
	// which conn_gone names.
	peerConn uint64
	// authOnly: a net connection authenticated but not encrypted.
	authOnly bool
	export   uint64
}

// local returns the domain of this machine at rec's end: for a
// connection between machines, the server if the client is the other
// machine's, else the client.
func (rec *connRec) local() uint64 {
	if rec.inbound {
		return rec.server
	}
	return rec.client
}

// New prepares the monitor's directory (see PrepareDir), listens on its
// socket and registers the nameservice. It fails if another monitor
// already listens there. Serve then accepts domains.
func New(cfg Config) (*Monitor, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
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
	machineID := cfg.MachineID
	if machineID == 0 {
		if machineID, err = randomID(); err != nil {
			return nil, fmt.Errorf("monitor: machine id: %w", err)
		}
	}
	m := &Monitor{
		cfg:          cfg,
		dir:          dir,
		sockPath:     SocketPath(dir),
		log:          log,
		store:        cfg.Store,
		machineID:    machineID,
		uid:          uint32(os.Getuid()),
		pid:          os.Getpid(),
		started:      time.Now(),
		sessions:     map[*session]struct{}{},
		domains:      map[uint64]*session{},
		exports:      map[uint64]*export{},
		conns:        map[uint64]*connRec{},
		nsConns:      map[uint64]*nsConn{},
		served:       map[uint64]map[uint64]*connRec{},
		machineConns: map[uint64]*chanos.Conn{},
		maxPacket:    probeMaxPacket(proto.MaxFrameSize),
		rlog:         ratelog.New(log, time.Second),
		rejectors:    make(chan struct{}, maxRejectors),
		stop:         make(chan struct{}),
		done:         make(chan struct{}),
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < uint64(cfg.FDBound()) {
		log.Warn("the descriptor limit is below what the quotas allow the monitor to hold; raise it (ulimit -n) or lower the quotas",
			"limit", rl.Cur, "quotas_allow", cfg.FDBound())
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
		ns.fingerprint = nameservice.Fingerprint
		m.exports[ns.id] = ns
		m.ns = ns
		if !cfg.SharedStore {
			err = m.store.Set(context.Background(), nameservice.ServiceName, ns.ref, names.Owner(SelfDomainID))
		}
	}
	if err == nil {
		err = m.startSpawnd()
	}
	if err != nil {
		ln.Close()
		return fail(fmt.Errorf("monitor: register the nameservice: %w", err))
	}
	m.wg.Add(1)
	go m.janitor() // until shutdown: Serve or Close
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

// MachineID returns the monitor's machine id: Config.MachineID, or
// random per start.
func (m *Monitor) MachineID() uint64 { return m.machineID }

// Domains returns how many domains are joined to the monitor: the load a
// machine of a cluster reports.
func (m *Monitor) Domains() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.domains)
}

// errNameLost ends the session of a domain whose name the store lost.
var errNameLost = errors.New("a name of this domain was lost")

// NameLost tells the monitor that the store lost name, held by owner,
// without the owner removing it: the machine's lease on a cluster's store
// expired (it was cut off longer than the lease's TTL), and another
// machine may hold the name by now. The monitor ends the owner's session,
// so that the domain goes through its monitor-loss path: it rejoins and
// exports its names again, and an export whose name another machine took
// meanwhile stops with ErrNameTaken (docs/cluster.md, "Fencing"). It
// does not block: the store calls it from its own goroutines.
func (m *Monitor) NameLost(owner names.Owner, name string) {
	if owner == names.Owner(SelfDomainID) {
		m.ownNameLost(name)
		return
	}
	m.mu.Lock()
	s := m.domains[uint64(owner)]
	m.mu.Unlock()
	if s == nil {
		m.log.Warn("a name was lost by the store; its domain has gone", "name", name, "domain", uint64(owner))
		return
	}
	m.log.Warn("a name was lost by the store; ending its domain's session so that it exports again",
		"name", name, "domain", uint64(owner), "program", s.program)
	go s.end(fmt.Errorf("%w: %q (the machine's lease expired)", errNameLost, name))
}

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
		"machine", fmt.Sprintf("%016x", m.machineID), "max_domains", m.cfg.MaxDomains,
		"memory_bound", m.cfg.MemoryBound())
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
		close(m.stop)
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
		m.stopSpawnd()
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

// newExport makes an export with a fresh id and token; it does not
// register it.
func (m *Monitor) newExport(name, iface string, maxFrame uint32, s *session) (*export, error) {
	e := &export{
		m:        m,
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
