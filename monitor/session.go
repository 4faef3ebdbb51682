package monitor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/chanos/genrt"
	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/interconnect/seqpacket"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/ratelog"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// errProtocol is matched by the reasons a session is dropped for breaking
// the protocol: chanos.ErrProtocol, as the connection engine reports it.
var errProtocol = chanos.ErrProtocol

func protocolErr(format string, args ...any) error {
	return interconnect.Violation(fmt.Errorf(format, args...))
}

// errClientLeft ends the nameservice connections of a domain whose
// session ended: the lease on what they set is gone.
var errClientLeft = errors.New("the domain's session ended")

// rpcError is an rpc's failure, sent as an error reply whose code is a
// proto.Status.
type rpcError struct {
	code   proto.Status
	detail string
}

func (e *rpcError) Error() string { return e.code.String() + ": " + e.detail }

func fail(code proto.Status, format string, args ...any) *rpcError {
	return &rpcError{code: code, detail: fmt.Sprintf(format, args...)}
}

// remote turns an rpc's failure into the error reply the engine sends: an
// rpcError keeps its status, any other error is the monitor's own
// (StatusInternal).
func remote(rpc string, err error) error {
	var re *rpcError
	if !errors.As(err, &re) {
		re = fail(proto.StatusInternal, "%v", err)
	}
	return &chanos.RemoteError{Msg: rpc, Code: wire.Errval(re.code), Detail: cleanDetail(re.detail)}
}

// monitorInterface is the monitor protocol, as the engine sees it.
var monitorInterface = chanos.Interface{Name: proto.InterfaceName, MaxFrameSize: proto.MaxFrameSize}

// session is one domain's connection to the monitor: the monitor protocol
// over the domain's socket, served by the connection engine, which
// matches cancels to the binds in progress, sends the replies and ends
// the connection with the reason its socket gave.
type session struct {
	m         *Monitor
	conn      *chanos.Conn
	maxPacket int // the largest frame the socket can carry
	pid       int32
	uid       uint32
	log       *slog.Logger
	born      time.Time

	ctx     context.Context // ends with the session
	cancel  context.CancelFunc
	endOnce sync.Once
	reason  error // why the session ended; set once, by end

	uc *net.UnixConn // the socket, for its send queue (outq) and buffer

	// Set by hello, under m.mu; read by others under m.mu or after hello.
	id       uint64
	program  string
	features uint32             // hello's: proto.FeatureNet
	exports  map[string]*export // under m.mu
	netAddr  string             // where it accepts connections from other machines (remote.go), under m.mu
	inbound  []uint64           // ids of its connection records from other machines, oldest first, under m.mu

	// The domain's shares of the quotas, under m.mu.
	nsConns        int                 // nameservice connections, those being bound included
	nsNames        map[string]struct{} // names set through its nameservice connections
	nsNamesPending int                 // sets in progress, each holding a name of the quotas
	records        []uint64            // ids of its connection records as a client, oldest first
	replyMem       int                 // reply memory reserved
	replyUnread    int                 // of which: a large reply sent and not read yet
	replySent      time.Time           // when it was sent

	binds atomic.Int32 // binds in progress

	// Liveness (janitor.go): lastActive is when the domain last proved
	// it reads (a call, an answered ping), in Unix nanoseconds;
	// unresponsiveSince is when it left a ping unread for the ping
	// timeout (0 while it answers). pingSince and pingSeq are the
	// janitor's alone.
	lastActive        atomic.Int64
	unresponsiveSince atomic.Int64
	pinging           atomic.Bool
	pingSince         time.Time
	pingSeq           uint64
}

func newSession(m *Monitor, pc *seqpacket.Conn, cred *syscall.Ucred, maxPacket int) *session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &session{
		m:         m,
		conn:      chanos.NewConn(seqpacket.NewLink(pc), monitorInterface),
		maxPacket: maxPacket,
		pid:       cred.Pid,
		uid:       cred.Uid,
		log:       m.log.With("pid", cred.Pid),
		born:      time.Now(),
		ctx:       ctx,
		cancel:    cancel,
		uc:        pc.UnixConn(),
		exports:   map[string]*export{},
		nsNames:   map[string]struct{}{},
	}
	s.lastActive.Store(s.born.UnixNano())
	return s
}

// run serves the session until it ends, then releases what it held.
func (s *session) run() {
	defer s.m.wg.Done()
	err := s.hello()
	if err == nil {
		err = s.serve()
	}
	s.end(err)
	s.cleanup()
}

// end ends the session for reason: its context is cancelled and its
// connection closed, which ends the serving and the binds in progress.
// It is safe to call from any goroutine, more than once: the first reason
// stays.
func (s *session) end(reason error) {
	s.endOnce.Do(func() {
		s.reason = reason
		s.cancel()
		s.conn.Close()
	})
}

// pendingBinds returns how many binds are in progress.
func (s *session) pendingBinds() int { return int(s.binds.Load()) }

// cleanDetail makes s fit an error reply's detail: no NUL, at most
// wire.MaxStatusDetail bytes.
func cleanDetail(s string) string {
	s = strings.ReplaceAll(s, "\x00", `\x00`)
	if len(s) > wire.MaxStatusDetail {
		s = s[:wire.MaxStatusDetail-3] + "..."
	}
	return s
}

// hello reads the session's first frame, which must be the hello call and
// must come within the hello timeout, and answers it.
func (s *session) hello() error {
	ctx, cancel := context.WithTimeout(s.ctx, s.m.cfg.HelloTimeout)
	defer cancel()
	err := s.conn.ReceiveFunc(ctx, func(in *chanos.Incoming) error {
		if in.Kind != wire.KindCall || in.Header.Msg != proto.MsgHello {
			wire.CloseCaps(in.Caps)
			return protocolErr("the first frame must be the hello call, not %s %d", in.Kind, in.Header.Msg)
		}
		var c proto.HelloCall
		if err := in.Decode(&c); err != nil {
			wire.CloseCaps(in.Caps)
			return protocolErr("bad hello: %v", err)
		}
		if c.Version != proto.ProtocolVersion {
			// Say why before hanging up: the domain may be newer than us.
			s.conn.Reply(s.ctx, in, nil, remote(c.MsgName(), fail(proto.StatusInvalid,
				"protocol version %d is not supported; this monitor speaks version %d", c.Version, proto.ProtocolVersion)))
			return protocolErr("hello with unsupported protocol version %d", c.Version)
		}
		m := s.m
		m.mu.Lock()
		s.id = m.nextDomain.Add(1)
		s.program = c.Program
		s.features = c.Features
		// Before the session is in the table, where the janitor finds it.
		s.log = s.log.With("domain", s.id, "program", c.Program)
		m.domains[s.id] = s
		m.mu.Unlock()
		s.log.Info("domain joined", "uid", s.uid)
		if c.SpawnToken != "" && m.spawnd != nil {
			// The spawn service's proof of which program this is.
			if m.spawnd.svc.Claim(c.SpawnToken, s.id) {
				s.log.Info("a spawned program joined")
			}
		}
		s.lastActive.Store(time.Now().UnixNano())
		return s.conn.Reply(s.ctx, in, &proto.HelloReply{
			MonitorVersion: proto.ProtocolVersion,
			DomainID:       s.id,
			MachineID:      m.machineID,
		}, nil)
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && s.ctx.Err() == nil:
		return protocolErr("no hello within the hello timeout")
	}
	return sessionEnd(err)
}

// serve serves the session's calls after hello until the domain hangs up
// or breaks the protocol, and returns why. Binds, which may wait for
// their name, run concurrently (a caller's cancel ends them); the other
// calls are answered in order.
func (s *session) serve() error {
	err := s.conn.Serve(s.ctx, s.handle, chanos.ConcurrentFor(s.m.cfg.MaxPendingBinds+1, proto.MsgBind))
	if err == nil {
		return io.EOF // the domain closed its socket
	}
	return sessionEnd(err)
}

// sessionEnd turns the engine's reason for ending into the session's: the
// domain's orderly close or death is io.EOF.
func sessionEnd(err error) error {
	if errors.Is(err, chanos.ErrClosed) && !errors.Is(err, errProtocol) {
		return io.EOF
	}
	return err
}

// handle answers one call after hello. An error matching errProtocol ends
// the session; another is the call's error reply.
func (s *session) handle(ctx context.Context, in *chanos.Incoming) (wire.Message, error) {
	if in.Kind != wire.KindCall {
		wire.CloseCaps(in.Caps)
		return nil, s.conn.Violation(fmt.Errorf("a domain sends rpc calls and cancels, not a %s (message %d)", in.Kind, in.Header.Msg))
	}
	s.lastActive.Store(time.Now().UnixNano())
	msg, err := proto.Decode(in.Frame, in.Caps)
	if err != nil {
		wire.CloseCaps(in.Caps)
		return nil, s.conn.Violation(err)
	}
	var r wire.Message
	switch c := msg.(type) {
	case *proto.HelloCall:
		return nil, s.conn.Violation(errors.New("hello sent twice"))
	case *proto.ExportCall:
		r, err = s.export(c)
	case *proto.WithdrawCall:
		r, err = s.withdraw(c)
	case *proto.BindCall:
		r, err = s.startBind(ctx, c)
	case *proto.PsCall:
		r, err = s.ps(ctx, in, c.Machine)
	case *proto.MachinesCall:
		r, err = s.m.machines()
	case *proto.HandOverCall:
		r, err = s.handOver(ctx, c)
	case *proto.AdoptCall:
		r, err = s.adopt(ctx, c)
	default:
		return nil, s.conn.Violation(fmt.Errorf("unexpected %s %s", msg.MsgName(), msg.MsgKind()))
	}
	if r == genrt.Replied { // sent by the call itself (ps)
		return r, err
	}
	if err != nil {
		var re *rpcError
		if errors.As(err, &re) {
			if re.code == proto.StatusLimit {
				s.m.rlog.Log(slog.LevelWarn, "refused-"+msg.MsgName(), "request refused", "call", msg.MsgName(),
					"pid", s.pid, "domain", s.id, "program", s.program, "reason", re.detail)
			} else {
				s.log.Debug("call failed", "call", msg.MsgName(), "err", err)
			}
		} else if !errors.Is(err, errCancelled) {
			s.log.Error("call failed", "call", msg.MsgName(), "err", err)
		}
		if errors.Is(err, errCancelled) {
			return nil, err // the caller has gone: nobody reads a reply
		}
		return nil, remote(msg.MsgName(), err)
	}
	return r, nil
}

// validIface checks an interface name: 1 to 128 bytes of printable ASCII
// without spaces, as names.
func validIface(iface string) error {
	if iface == "" {
		return errors.New("empty interface name")
	}
	for i := 0; i < len(iface); i++ {
		if c := iface[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("interface name %q has byte 0x%02x at %d", iface, c, i)
		}
	}
	return nil
}

func (s *session) export(c *proto.ExportCall) (wire.Message, error) {
	m := s.m
	anonymous := c.Name == ""
	if anonymous && !c.Private {
		return nil, fail(proto.StatusInvalid, "export: an export without a name must be private (bound by its iref only)")
	}
	if err := names.ValidName(c.Name); err != nil && !anonymous {
		return nil, fail(proto.StatusInvalid, "export: %v", err)
	}
	if err := validIface(c.Iface); err != nil {
		return nil, fail(proto.StatusInvalid, "export %q: %v", c.Name, err)
	}
	if monitorClass(c.Name) {
		return nil, fail(proto.StatusDenied, "export %q: names of the class %s are the monitors' own", c.Name, spawnClass)
	}
	if c.MaxFrame < wire.HeaderSize || c.MaxFrame > m.cfg.MaxFrame {
		return nil, fail(proto.StatusInvalid, "export %q: max_frame %d out of range [%d, %d]", c.Name, c.MaxFrame, wire.HeaderSize, m.cfg.MaxFrame)
	}
	pol, err := newPolicy(c)
	if err != nil {
		return nil, fail(proto.StatusInvalid, "export %q: %v", c.Name, err)
	}
	e, err := m.newExport(c.Name, c.Iface, c.MaxFrame, s)
	if err != nil {
		return nil, fmt.Errorf("export %q: %w", c.Name, err)
	}
	e.policy = pol
	e.fingerprint = c.Fingerprint
	key := exportKey(e)
	m.mu.Lock()
	if _, ok := s.exports[key]; ok {
		m.mu.Unlock()
		return nil, fail(proto.StatusExists, "export %q: this domain already exports it", c.Name)
	}
	if len(s.exports) >= m.cfg.MaxExports {
		m.mu.Unlock()
		return nil, exhausted("export %q: this domain has %d exports, its quota (--max-exports)", c.Name, m.cfg.MaxExports)
	}
	if n := len(m.exports) - 1; n >= m.cfg.MaxTotalExports { // the nameservice's is not counted
		m.mu.Unlock()
		return nil, exhausted("export %q: the monitor has %d exports, its quota (--max-total-exports)", c.Name, n)
	}
	// In the table before the name is, so that a bind that finds the name
	// finds the export.
	m.exports[e.id] = e
	s.exports[key] = e
	m.mu.Unlock()
	if anonymous {
		s.log.Info("export", "name", key, "iface", c.Iface, "export", e.id, "max_frame", c.MaxFrame, "policy", pol.String())
		return &proto.ExportReply{Ref: e.ref}, nil
	}
	if err := m.store.Set(s.ctx, c.Name, e.ref, names.Owner(s.id)); err != nil {
		m.mu.Lock()
		delete(m.exports, e.id)
		delete(s.exports, c.Name)
		m.mu.Unlock()
		switch {
		case errors.Is(err, names.ErrExists):
			return nil, fail(proto.StatusExists, "export %q: the name is taken", c.Name)
		case errors.Is(err, names.ErrInvalidName):
			return nil, fail(proto.StatusInvalid, "export: %v", err)
		}
		return nil, fail(proto.StatusInternal, "export %q: nameservice: %v", c.Name, err)
	}
	s.log.Info("export", "name", c.Name, "iface", c.Iface, "export", e.id, "max_frame", c.MaxFrame, "policy", pol.String())
	return &proto.ExportReply{Ref: e.ref}, nil
}

func (s *session) withdraw(c *proto.WithdrawCall) (wire.Message, error) {
	m := s.m
	m.mu.Lock()
	e := s.exports[c.Name]
	if e == nil {
		m.mu.Unlock()
		return nil, fail(proto.StatusNotFound, "withdraw %q: this domain does not export it", c.Name)
	}
	delete(s.exports, c.Name)
	delete(m.exports, e.id)
	m.mu.Unlock()
	if e.name == "" {
		s.log.Info("withdraw", "name", c.Name, "export", e.id)
		return &proto.WithdrawReply{}, nil
	}
	// The name may have been removed, or set again, through the
	// nameservice meanwhile: remove it only if it still names this export.
	if ref, err := m.store.Get(s.ctx, c.Name); err == nil && ref.WithoutToken() == e.ref.WithoutToken() && sameToken(ref, e.ref) {
		if err := m.store.Remove(s.ctx, c.Name, names.Owner(s.id)); err != nil && !errors.Is(err, names.ErrNotFound) {
			s.log.Warn("withdraw: remove the name", "name", c.Name, "err", err)
		} else if err == nil {
			m.forgetName(s, c.Name) // set through the nameservice to the export's iref
		}
	}
	s.log.Info("withdraw", "name", c.Name, "export", e.id)
	return &proto.WithdrawReply{}, nil
}

// cleanup releases what an ended session held: its exports, its names,
// the records of its connections, its nameservice connections and its
// shares of the quotas.
func (s *session) cleanup() {
	m := s.m
	if m.testBeforeCleanup != nil {
		m.testBeforeCleanup(s)
	}
	m.mu.Lock()
	delete(m.sessions, s)
	var withdrawn []string
	var remote []*connRec // its connections with other machines' domains
	if s.id != 0 {
		if m.domains[s.id] == s {
			delete(m.domains, s.id)
		}
		for name, e := range s.exports {
			delete(m.exports, e.id)
			withdrawn = append(withdrawn, name)
		}
		clear(s.exports)
		for _, id := range s.records {
			if rec := m.conns[id]; rec != nil && rec.client == s.id && !rec.inbound {
				m.dropRecordLocked(rec)
				if rec.machine != 0 {
					remote = append(remote, rec)
				}
			}
		}
		s.records, s.inbound = nil, nil
		for _, rec := range m.served[s.id] {
			m.dropRecordLocked(rec)
			if rec.machine != 0 {
				remote = append(remote, rec)
			}
		}
		m.names -= len(s.nsNames)
		clear(s.nsNames)
	}
	m.replyMem -= s.replyMem
	s.replyMem, s.replyUnread = 0, 0
	var nsConns []*nsConn
	for _, c := range m.nsConns {
		if c.client == s.id {
			nsConns = append(nsConns, c)
		}
	}
	m.mu.Unlock()

	if s.id == 0 {
		// Never said hello: nothing to release.
		switch {
		case errors.Is(s.reason, io.EOF) || errors.Is(s.reason, errShutdown):
			s.log.Debug("connection closed before hello", "reason", s.reason)
		case errors.Is(s.reason, errEvicted):
			s.log.Debug("connection dropped before hello", "err", s.reason)
		default:
			m.rlog.Log(slog.LevelWarn, ratelog.KindOf("before-hello", s.reason), "connection dropped before hello", "pid", s.pid, "err", s.reason)
		}
		return
	}
	for _, c := range nsConns {
		c.end(errClientLeft)
	}
	m.tellMachinesGone(remote)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := m.store.Release(ctx, names.Owner(s.id))
	cancel()
	if err != nil && !errors.Is(err, names.ErrClosed) {
		s.log.Error("release the domain's names", "err", err)
	}
	slices.Sort(withdrawn)
	attrs := []any{"exports_withdrawn", withdrawn}
	switch {
	case errors.Is(s.reason, io.EOF):
		s.log.Info("domain left", attrs...)
	case errors.Is(s.reason, errShutdown):
		s.log.Info("domain disconnected: monitor shutting down", attrs...)
	case errors.Is(s.reason, errEvicted):
		s.log.Debug("domain dropped", append(attrs, "err", s.reason)...) // evict logged it, at a limited rate
	default:
		s.log.Warn("domain dropped", append(attrs, "err", s.reason)...)
	}
}
