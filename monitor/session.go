package monitor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chanos/chanos/interconnect/seqpacket"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// outQueue is how many frames may wait for a session's writer. Beyond
// it, whoever sends to the session blocks: its own reader (so a domain
// that does not read its replies stops being served) or a bind (until the
// bind's deadline).
const outQueue = 64

// errProtocol is matched by the reasons a session is dropped for breaking
// the protocol.
var errProtocol = errors.New("protocol violation")

func protocolErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, args...))
}

// errClientLeft ends the nameservice connections of a domain whose
// session ended: the lease on what they set is gone.
var errClientLeft = errors.New("the domain's session ended")

// errSessionEnded: the session a frame was meant for has ended.
var errSessionEnded = errors.New("session ended")

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

// packet is a frame queued for a session's writer, with the descriptors it
// carries; the writer closes them once sent.
type packet struct {
	frame []byte
	caps  []wire.Cap
}

// pendingCall is a call in progress in its own goroutine: a bind here, a
// wait_for on a nameservice connection.
type pendingCall struct {
	cancel    context.CancelFunc
	cancelled bool // the caller sent a cancel: send no reply
}

// session is one domain's connection to the monitor.
type session struct {
	m         *Monitor
	pc        *seqpacket.Conn // its send limit is the session's largest packet
	maxPacket int             // the largest frame the socket can carry
	pid       int32
	uid       uint32
	log       *slog.Logger
	born      time.Time

	ctx     context.Context // ends with the session
	cancel  context.CancelFunc
	endOnce sync.Once
	ended   chan struct{}
	reason  error // why the session ended; set before ended is closed

	out        chan packet
	qmu        sync.RWMutex
	qclosed    bool
	writerDone chan struct{}

	// Set by hello, under m.mu; read by others under m.mu or after hello.
	id      uint64
	program string
	exports map[string]*export // under m.mu

	pmu     sync.Mutex
	pending map[uint32]*pendingCall
	binds   sync.WaitGroup
}

func newSession(m *Monitor, pc *seqpacket.Conn, cred *syscall.Ucred, maxPacket int) *session {
	ctx, cancel := context.WithCancel(context.Background())
	return &session{
		m:          m,
		pc:         pc,
		maxPacket:  maxPacket,
		pid:        cred.Pid,
		uid:        cred.Uid,
		log:        m.log.With("pid", cred.Pid),
		born:       time.Now(),
		ctx:        ctx,
		cancel:     cancel,
		ended:      make(chan struct{}),
		out:        make(chan packet, outQueue),
		writerDone: make(chan struct{}),
		exports:    map[string]*export{},
		pending:    map[uint32]*pendingCall{},
	}
}

// run serves the session until it ends, then releases what it held.
func (s *session) run() {
	defer s.m.wg.Done()
	go s.writer()
	s.end(s.readLoop())
	<-s.writerDone
	s.binds.Wait()
	s.cleanup()
}

// end ends the session for reason: its context is cancelled, the writer
// stops and the socket is closed, which ends the reader. It is safe to
// call from any goroutine, more than once.
func (s *session) end(reason error) {
	s.endOnce.Do(func() {
		s.reason = reason
		s.cancel()
		close(s.ended)
		s.pc.Close()
	})
}

// writer sends the queued frames in order, then, once the session has
// ended, closes the descriptors of those left.
func (s *session) writer() {
	defer close(s.writerDone)
	for {
		select {
		case p := <-s.out:
			err := s.pc.Send(p.frame, p.caps)
			closeCaps(p.caps)
			if err != nil {
				s.end(fmt.Errorf("send to the domain: %w", err))
			}
		case <-s.ended:
			// Wait out the senders that are about to queue, then refuse
			// the rest; what is queued is dropped.
			s.qmu.Lock()
			s.qclosed = true
			s.qmu.Unlock()
			for {
				select {
				case p := <-s.out:
					closeCaps(p.caps)
				default:
					return
				}
			}
		}
	}
}

// enqueue queues p for the writer. It blocks while the queue is full,
// until ctx or the session ends; p's descriptors are closed if it fails.
func (s *session) enqueue(ctx context.Context, p packet) error {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	if s.qclosed {
		closeCaps(p.caps)
		return errSessionEnded
	}
	select {
	case s.out <- p:
		return nil
	case <-s.ended:
		closeCaps(p.caps)
		return errSessionEnded
	case <-ctx.Done():
		closeCaps(p.caps)
		return ctx.Err()
	}
}

// reply queues the reply to call callID of rpc msg: the encoded reply, or
// an error reply if err is not nil. A reply that cannot be encoded is
// replaced by an internal error reply.
func (s *session) reply(ctx context.Context, msg uint16, callID uint32, r wire.Message, err error) error {
	frame, caps, err := encodeReply(msg, callID, r, err)
	if err != nil {
		s.log.Error("encode a reply", "err", err)
	}
	return s.enqueue(ctx, packet{frame: frame, caps: caps})
}

// encodeReply encodes the reply or error reply to call callID of rpc msg.
// The error it returns is the encoding failure, already replaced in the
// frame by an internal error reply.
func encodeReply(msg uint16, callID uint32, r wire.Message, rerr error) ([]byte, []wire.Cap, error) {
	var buf wire.Buffer
	var encErr error
	if rerr == nil {
		if encErr = r.Encode(&buf); encErr == nil {
			wire.SetCallID(buf.B, callID)
			return buf.B, buf.Caps, nil
		}
		rerr = fail(proto.StatusInternal, "encode the reply: %v", encErr)
		closeCaps(buf.Caps)
		buf = wire.Buffer{}
	}
	var re *rpcError
	if !errors.As(rerr, &re) {
		re = fail(proto.StatusInternal, "%v", rerr)
	}
	st := wire.Status{Code: wire.Errval(re.code), Detail: cleanDetail(re.detail)}
	if err := wire.AppendErrorReply(&buf, msg, st); err != nil {
		// cleanDetail makes this unreachable; keep the frame valid anyway.
		buf = wire.Buffer{}
		wire.AppendErrorReply(&buf, msg, wire.Status{Code: wire.Errval(proto.StatusInternal)})
	}
	wire.SetCallID(buf.B, callID)
	return buf.B, nil, encErr
}

// cleanDetail makes s fit an error reply's detail: no NUL, at most
// wire.MaxStatusDetail bytes.
func cleanDetail(s string) string {
	s = strings.ReplaceAll(s, "\x00", `\x00`)
	if len(s) > wire.MaxStatusDetail {
		s = s[:wire.MaxStatusDetail-3] + "..."
	}
	return s
}

// readLoop reads and handles the session's frames until the domain hangs
// up or breaks the protocol; it returns why.
func (s *session) readLoop() error {
	// The first frame must be hello, and must come soon.
	s.pc.UnixConn().SetReadDeadline(time.Now().Add(s.m.cfg.HelloTimeout))
	frame, caps, err := s.pc.Receive()
	if err != nil {
		return receiveErr(err, true)
	}
	err = s.hello(frame, caps)
	closeCaps(caps)
	if err != nil {
		return err
	}
	s.pc.UnixConn().SetReadDeadline(time.Time{})
	for {
		frame, caps, err := s.pc.Receive()
		if err != nil {
			return receiveErr(err, false)
		}
		err = s.handle(frame, caps)
		closeCaps(caps)
		if err != nil {
			return err
		}
	}
}

// receiveErr turns a failed Receive into the reason the session ends.
func receiveErr(err error, beforeHello bool) error {
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF
	case errors.Is(err, seqpacket.ErrTooLarge), errors.Is(err, seqpacket.ErrTooManyCaps):
		return fmt.Errorf("%w: %v", errProtocol, err)
	case beforeHello && errors.Is(err, syscall.ETIMEDOUT), beforeHello && isTimeout(err):
		return protocolErr("no hello within the hello timeout")
	}
	return fmt.Errorf("receive: %w", err)
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// header checks what every frame from a domain must satisfy before its
// body is decoded: a valid header, as many descriptors as it announces,
// and a kind a domain may send (a call or a cancel).
func header(frame []byte, caps []wire.Cap) (wire.Header, wire.Kind, error) {
	h, err := wire.ParseHeader(frame)
	if err != nil {
		return h, 0, fmt.Errorf("%w: bad frame: %v", errProtocol, err)
	}
	if int(h.NCaps) != len(caps) {
		return h, 0, protocolErr("the header announces %d descriptors but %d arrived", h.NCaps, len(caps))
	}
	k, err := h.Kind()
	if err != nil {
		return h, 0, fmt.Errorf("%w: bad frame: %v", errProtocol, err)
	}
	if k != wire.KindCall && k != wire.KindCancel {
		return h, k, protocolErr("a domain sends rpc calls and cancels, not a %s (message %d)", k, h.Msg)
	}
	return h, k, nil
}

// hello handles the first frame of a session.
func (s *session) hello(frame []byte, caps []wire.Cap) error {
	h, k, err := header(frame, caps)
	if err != nil {
		return err
	}
	if k != wire.KindCall || h.Msg != proto.MsgHello {
		return protocolErr("the first frame must be the hello call, not %s %d", k, h.Msg)
	}
	var c proto.HelloCall
	if err := c.Decode(frame, caps); err != nil {
		return fmt.Errorf("%w: bad hello: %v", errProtocol, err)
	}
	if c.Version != proto.ProtocolVersion {
		// Say why before hanging up: the domain may be newer than us.
		b, _, _ := encodeReply(proto.MsgHello, h.CallID, nil,
			fail(proto.StatusInvalid, "protocol version %d is not supported; this monitor speaks version %d", c.Version, proto.ProtocolVersion))
		s.pc.Send(b, nil)
		return protocolErr("hello with unsupported protocol version %d", c.Version)
	}
	m := s.m
	m.mu.Lock()
	s.id = m.nextDomain.Add(1)
	s.program = c.Program
	m.domains[s.id] = s
	m.mu.Unlock()
	s.log = s.log.With("domain", s.id, "program", c.Program)
	s.log.Info("domain joined", "uid", s.uid)
	return s.reply(s.ctx, proto.MsgHello, h.CallID, &proto.HelloReply{
		MonitorVersion: proto.ProtocolVersion,
		DomainID:       s.id,
		MachineID:      m.machineID,
	}, nil)
}

// handle handles one frame after hello. An error ends the session.
func (s *session) handle(frame []byte, caps []wire.Cap) error {
	h, k, err := header(frame, caps)
	if err != nil {
		return err
	}
	if k == wire.KindCancel {
		if _, err := wire.ParseCancel(frame); err != nil {
			return fmt.Errorf("%w: bad cancel: %v", errProtocol, err)
		}
		s.cancelCall(h.CallID)
		return nil
	}
	msg, err := proto.Decode(frame, caps)
	if err != nil {
		return fmt.Errorf("%w: %v", errProtocol, err)
	}
	var r wire.Message
	switch c := msg.(type) {
	case *proto.HelloCall:
		return protocolErr("hello sent twice")
	case *proto.ExportCall:
		r, err = s.export(c)
	case *proto.WithdrawCall:
		r, err = s.withdraw(c)
	case *proto.BindCall:
		return s.startBind(h, c)
	case *proto.PsCall:
		r, err = s.ps()
	default:
		return protocolErr("unexpected %s %s", msg.MsgName(), msg.MsgKind())
	}
	if err != nil {
		var re *rpcError
		if errors.As(err, &re) {
			s.log.Debug("call failed", "call", msg.MsgName(), "err", err)
		} else {
			s.log.Error("call failed", "call", msg.MsgName(), "err", err)
		}
	}
	return s.reply(s.ctx, h.Msg, h.CallID, r, err)
}

// cancelCall cancels the call in progress with id callID, if there is
// one; its reply is not sent.
func (s *session) cancelCall(callID uint32) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if p := s.pending[callID]; p != nil {
		p.cancelled = true
		p.cancel()
	}
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
	if err := names.ValidName(c.Name); err != nil {
		return nil, fail(proto.StatusInvalid, "export: %v", err)
	}
	if err := validIface(c.Iface); err != nil {
		return nil, fail(proto.StatusInvalid, "export %q: %v", c.Name, err)
	}
	if c.MaxFrame < wire.HeaderSize || c.MaxFrame > m.cfg.MaxFrame {
		return nil, fail(proto.StatusInvalid, "export %q: max_frame %d out of range [%d, %d]", c.Name, c.MaxFrame, wire.HeaderSize, m.cfg.MaxFrame)
	}
	e, err := m.newExport(c.Name, c.Iface, c.MaxFrame, s)
	if err != nil {
		return nil, fmt.Errorf("export %q: %w", c.Name, err)
	}
	m.mu.Lock()
	if _, ok := s.exports[c.Name]; ok {
		m.mu.Unlock()
		return nil, fail(proto.StatusExists, "export %q: this domain already exports it", c.Name)
	}
	if len(s.exports) >= m.cfg.MaxExports {
		m.mu.Unlock()
		return nil, fail(proto.StatusLimit, "export %q: this domain has %d exports, the limit", c.Name, m.cfg.MaxExports)
	}
	// In the table before the name is, so that a bind that finds the name
	// finds the export.
	m.exports[e.id] = e
	s.exports[c.Name] = e
	m.mu.Unlock()
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
	s.log.Info("export", "name", c.Name, "iface", c.Iface, "export", e.id, "max_frame", c.MaxFrame)
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
	// The name may have been removed, or set again, through the
	// nameservice meanwhile: remove it only if it still names this export.
	if ref, err := m.store.Get(s.ctx, c.Name); err == nil && ref == e.ref {
		if err := m.store.Remove(s.ctx, c.Name, names.Owner(s.id)); err != nil && !errors.Is(err, names.ErrNotFound) {
			s.log.Warn("withdraw: remove the name", "name", c.Name, "err", err)
		}
	}
	s.log.Info("withdraw", "name", c.Name, "export", e.id)
	return &proto.WithdrawReply{}, nil
}

// cleanup releases what an ended session held: its exports, its names,
// the records of its connections and its nameservice connections.
func (s *session) cleanup() {
	m := s.m
	m.mu.Lock()
	delete(m.sessions, s)
	var withdrawn []string
	if s.id != 0 {
		delete(m.domains, s.id)
		for name, e := range s.exports {
			delete(m.exports, e.id)
			withdrawn = append(withdrawn, name)
		}
		clear(s.exports)
		for id, c := range m.conns {
			if c.client == s.id || c.server == s.id {
				delete(m.conns, id)
			}
		}
	}
	var nsConns []*nsConn
	for _, c := range m.nsConns {
		if c.client == s.id {
			nsConns = append(nsConns, c)
		}
	}
	m.mu.Unlock()

	if s.id == 0 {
		// Never said hello: nothing to release.
		if errors.Is(s.reason, io.EOF) || errors.Is(s.reason, errShutdown) {
			s.log.Debug("connection closed before hello", "reason", s.reason)
		} else {
			s.log.Warn("connection dropped before hello", "err", s.reason)
		}
		return
	}
	for _, c := range nsConns {
		c.end(errClientLeft)
	}
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
	default:
		s.log.Warn("domain dropped", append(attrs, "err", s.reason)...)
	}
}
