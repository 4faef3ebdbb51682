package monitor

import (
	"context"
	"errors"
	"fmt"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/nameservice"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// errCancelled: the caller cancelled the call, or its session ended; no
// reply is sent.
var errCancelled = errors.New("call cancelled")

// startBind runs a bind call, which the engine serves in a goroutine of
// its own, so that a bind that waits for its name does not hold up the
// session's other calls; ctx ends at the call's deadline, at the caller's
// cancel, or with the session. Beyond MaxPendingBinds in progress, a bind
// is refused at once.
func (s *session) startBind(ctx context.Context, c *proto.BindCall) (wire.Message, error) {
	m := s.m
	if n := s.binds.Add(1); int(n) > m.cfg.MaxPendingBinds {
		s.binds.Add(-1)
		return nil, exhausted("bind %s: this domain has %d binds in progress, its quota (--max-pending-binds)", bindLabel(c), m.cfg.MaxPendingBinds)
	}
	defer s.binds.Add(-1)
	if n := m.waits.Add(1); int(n) > m.cfg.MaxTotalPendingBinds {
		m.waits.Add(-1)
		return nil, exhausted("bind %s: the monitor has %d binds and nameservice waits in progress, its quota (--max-total-pending-binds)", bindLabel(c), m.cfg.MaxTotalPendingBinds)
	}
	defer m.waits.Add(-1)
	r, err := s.bind(ctx, c)
	if err != nil {
		if errors.Is(err, errCancelled) {
			s.log.Debug("bind cancelled", "bind", bindLabel(c))
		} else {
			s.log.Debug("bind failed", "bind", bindLabel(c), "err", err)
		}
		return nil, err
	}
	if ctx.Err() != nil { // cancelled as it completed: nobody takes the descriptors
		closeCaps(r.Fds)
		s.log.Debug("bind cancelled", "bind", bindLabel(c))
		return nil, errCancelled
	}
	return r, nil
}

// bindLabel names a bind in errors and logs: its name, or the export its
// iref names. Never the token.
func bindLabel(c *proto.BindCall) string {
	if c.Name != "" || c.Target.IsZero() {
		return fmt.Sprintf("%q", c.Name)
	}
	return fmt.Sprintf("by iref (export %d of machine %016x)", c.Target.Export, c.Target.Machine)
}

// bind resolves c.Name, or takes c.Target for a bind by ref, checks the
// export's token and policy, and connects the caller to it. ctx ends at
// the call's deadline, at its cancel, or with the session.
func (s *session) bind(ctx context.Context, c *proto.BindCall) (*proto.BindReply, error) {
	m := s.m
	byName := c.Name != ""
	label := bindLabel(c) // what names the bind in errors and logs: never a token
	var (
		ref wire.Iref
		err error
	)
	if byName {
		if !c.Target.IsZero() {
			return nil, fail(proto.StatusInvalid, "bind %s: both a name and an iref; a bind takes one", label)
		}
		if err := names.ValidName(c.Name); err != nil {
			return nil, fail(proto.StatusInvalid, "bind: %v", err)
		}
	} else {
		if c.Target.IsZero() {
			return nil, fail(proto.StatusInvalid, "bind: neither a name nor an iref")
		}
	}
	if err := validIface(c.Iface); err != nil {
		return nil, fail(proto.StatusInvalid, "bind %s: %v", label, err)
	}
	if byName && c.Name == nameservice.ServiceName {
		// Each machine serves its own nameservice, in a cluster too.
		ref = m.ns.ref
	} else if byName {
		ref, err = m.store.Get(ctx, c.Name)
		if errors.Is(err, names.ErrNotFound) && c.Wait {
			ref, err = m.store.WaitFor(ctx, c.Name)
		}
		switch {
		case err == nil:
		case errors.Is(err, names.ErrNotFound):
			return nil, fail(proto.StatusNotFound, "bind %s: no such name", label)
		case errors.Is(err, context.DeadlineExceeded):
			return nil, fail(proto.StatusNotFound, "bind %s: the name did not appear before the call's deadline", label)
		case errors.Is(err, context.Canceled):
			return nil, errCancelled
		case errors.Is(err, names.ErrClosed):
			return nil, fail(proto.StatusInternal, "bind %s: the monitor is shutting down", label)
		default:
			return nil, fail(proto.StatusInternal, "bind %s: nameservice: %v", label, err)
		}
	} else {
		// An iref's export exists from the moment the iref does: there
		// is nothing to wait for.
		ref = c.Target
	}
	if ref.Machine != m.machineID {
		return s.bindRemote(ctx, c, ref, byName, label)
	}

	m.mu.Lock()
	e := m.exports[ref.Export]
	m.mu.Unlock()
	if e == nil {
		e = m.spawnExport(ref.Export)
	}
	switch {
	case e == nil:
		return nil, fail(proto.StatusNotFound, "bind %s: its export %d has been withdrawn", label, ref.Export)
	case !sameToken(e.ref, ref) && byName:
		return nil, fail(proto.StatusDenied, "bind %s: the iref registered under the name has a wrong token for export %d (set through the nameservice by a domain that does not hold the export's iref)", label, ref.Export)
	case !sameToken(e.ref, ref):
		return nil, fail(proto.StatusDenied, "bind %s: a wrong token for export %d (irefs read from the nameservice carry none)", label, ref.Export)
	case !m.awaitAdoption(ctx, e):
		if ctx.Err() != nil {
			return nil, errCancelled
		}
		return nil, fail(proto.StatusNotFound, "bind %s: its export %d was handed over and withdrawn unadopted", label, ref.Export)
	}
	if err := e.admit(s, byName, label); err != nil {
		return nil, err
	}
	if e.iface != c.Iface {
		return nil, fail(proto.StatusMismatch, "bind %s: it exports interface %q, not %q", label, e.iface, c.Iface)
	}
	// 0 declares no fingerprint: hand-written interfaces and older
	// programs bind by name and frame size alone.
	if e.fingerprint != 0 && c.Fingerprint != 0 && e.fingerprint != c.Fingerprint {
		return nil, fail(proto.StatusMismatch, "bind %s: interface %s: the export's fingerprint is %016x, the client's %016x (built from another version of %s)", label, c.Iface, e.fingerprint, c.Fingerprint, c.Iface)
	}
	if ctx.Err() != nil {
		return nil, errCancelled
	}

	// The connection is recorded under the name bound, or for a bind by
	// ref the name the export has.
	rec := &connRec{id: m.nextConn.Add(1), name: c.Name, client: s.id, export: e.id}
	if !byName {
		rec.name = e.name
	}
	// The reply names the export but carries no token: a bind by name
	// does not hand the caller the capability to bind again by ref.
	reply := &proto.BindReply{Ref: e.ref.WithoutToken(), ConnID: rec.id, MaxFrame: e.maxFrame}
	switch {
	case e.server() == nil && e == m.spawnExport(e.id):
		rec.server, rec.via, reply.Via = SelfDomainID, proto.InterconnectUMP, proto.InterconnectUMP
		fds, err := m.bindSpawnd(s, rec)
		if err != nil {
			return nil, err
		}
		reply.Fds = fds
	case e.server() == nil:
		rec.server, rec.via, reply.Via = SelfDomainID, proto.InterconnectUMP, proto.InterconnectUMP
		fds, err := m.bindNameservice(s, rec)
		if err != nil {
			return nil, err
		}
		reply.Fds = fds
	case e.server() == s:
		// The domain exports it itself: it connects in its own process.
		rec.server, rec.via, reply.Via = s.id, proto.InterconnectLocal, proto.InterconnectLocal
		if !m.addConn(s, rec, s) {
			return nil, errCancelled
		}
	default:
		rec.server, rec.via, reply.Via = e.server().id, proto.InterconnectUMP, proto.InterconnectUMP
		fds, err := m.bindUMP(ctx, s, e, rec)
		if err != nil {
			return nil, err
		}
		reply.Fds = fds
	}
	s.log.Info("bind", "name", rec.name, "by_ref", !byName, "iface", c.Iface, "conn", rec.id, "server", rec.server, "via", rec.via.String())
	return reply, nil
}

// addConn records rec, a connection client made, unless client, server
// (or the monitor) has gone meanwhile: a record must not outlive the
// cleanup that would remove it.
func (m *Monitor) addConn(client *session, rec *connRec, server *session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.domains[client.id] != client || (server != nil && m.domains[server.id] != server) {
		return false
	}
	m.recordLocked(client, rec)
	return true
}

// recordLocked adds rec, a connection of client, to the records ps shows.
// A client keeps at most MaxConnRecords: its oldest is forgotten (the
// monitor does not see connections end, so records would otherwise pile
// up for as long as the domain binds). For a connection from another
// machine, client is nil (addInbound bounds those).
func (m *Monitor) recordLocked(client *session, rec *connRec) {
	m.conns[rec.id] = rec
	if client == nil {
		m.servedLocked(rec)
		return
	}
	if rec.server != rec.client && rec.machine == 0 {
		m.servedLocked(rec)
	}
	client.records = append(client.records, rec.id)
	if n := len(client.records) - m.cfg.MaxConnRecords; n > 0 {
		for _, id := range client.records[:n] {
			if old := m.conns[id]; old != nil && old.client == client.id && !old.inbound {
				m.dropRecordLocked(old)
			}
		}
		client.records = append(client.records[:0], client.records[n:]...)
	}
}

// servedLocked lists rec among the connections its server domain serves.
func (m *Monitor) servedLocked(rec *connRec) {
	by := m.served[rec.server]
	if by == nil {
		by = map[uint64]*connRec{}
		m.served[rec.server] = by
	}
	by[rec.id] = rec
}

// dropRecordLocked forgets rec.
func (m *Monitor) dropRecordLocked(rec *connRec) {
	if m.conns[rec.id] == rec {
		delete(m.conns, rec.id)
	}
	if rec.machine != 0 && !rec.inbound {
		return // its server is a domain of another machine
	}
	if by := m.served[rec.server]; by != nil && by[rec.id] == rec {
		delete(by, rec.id)
		if len(by) == 0 {
			delete(m.served, rec.server)
		}
	}
}

// ringPair creates a ring pair for frames of up to maxFrame bytes and a
// liveness socket pair, and returns the descriptors for each side: the
// creator's (the server's) and the attacher's (the client's).
func ringPair(maxFrame uint32) (creator, attacher []wire.Cap, err error) {
	files, err := ump.NewFiles(&ump.Options{MaxMessageSize: int(maxFrame)})
	if err != nil {
		return nil, nil, fmt.Errorf("create the ring pair: %w", err)
	}
	defer files.Close()
	a, b, err := ump.LivenessPair()
	if err != nil {
		return nil, nil, fmt.Errorf("create the liveness socket: %w", err)
	}
	if creator, err = ump.Caps(files, ump.Creator, a); err != nil {
		b.Close()
		return nil, nil, fmt.Errorf("duplicate the ring descriptors: %w", err)
	}
	if attacher, err = ump.Caps(files, ump.Attacher, b); err != nil {
		closeCaps(creator)
		return nil, nil, fmt.Errorf("duplicate the ring descriptors: %w", err)
	}
	return creator, attacher, nil
}

// bindUMP connects s to e, exported by another domain: it sends that
// domain an incoming message with the creator's descriptors and returns
// the attacher's for the reply.
func (m *Monitor) bindUMP(ctx context.Context, s *session, e *export, rec *connRec) ([]wire.Cap, error) {
	server := e.server()
	creator, attacher, err := ringPair(e.maxFrame)
	if err != nil {
		return nil, fail(proto.StatusInternal, "bind %q: %v", rec.name, err)
	}
	in := &proto.Incoming{
		Ref:      e.ref,
		ConnID:   rec.id,
		Client:   s.id,
		Via:      proto.InterconnectUMP,
		MaxFrame: e.maxFrame,
		Fds:      creator,
		// Who calls, for the server's handlers (chanos.PeerFrom).
		ClientPID:     s.pid,
		ClientUID:     s.uid,
		ClientProgram: s.program,
	}
	// The record goes in first: once the server has the descriptors, ps
	// should show the connection.
	if !m.addConn(s, rec, server) {
		closeCaps(creator)
		closeCaps(attacher)
		return nil, fail(proto.StatusNotFound, "bind %q: the exporting domain %d has gone", rec.name, server.id)
	}
	// The engine closes the creator's descriptors once they are sent, or
	// could not be: they are give_away_caps.
	if err := server.conn.Send(ctx, in); err != nil {
		closeCaps(attacher)
		m.mu.Lock()
		m.dropRecordLocked(rec)
		m.mu.Unlock()
		if errors.Is(err, chanos.ErrClosed) || errors.Is(err, chanos.ErrPeerDied) || errors.Is(err, chanos.ErrProtocol) {
			return nil, fail(proto.StatusNotFound, "bind %q: the exporting domain %d has gone", rec.name, server.id)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fail(proto.StatusLimit, "bind %q: the exporting domain %d did not take the connection before the call's deadline", rec.name, server.id)
		}
		return nil, errCancelled
	}
	return attacher, nil
}

// bindNameservice connects s to the monitor's own nameservice: the
// monitor opens the creator's side and serves it. The connection takes
// one of the domain's nameservice connections and one of the monitor's,
// from before its ring is made until it ends.
func (m *Monitor) bindNameservice(s *session, rec *connRec) ([]wire.Cap, error) {
	m.mu.Lock()
	switch {
	case s.nsConns >= m.cfg.MaxNSConns:
		m.mu.Unlock()
		return nil, exhausted("bind %q: this domain has %d nameservice connections, its quota (--max-ns-conns)", rec.name, m.cfg.MaxNSConns)
	case m.nsConnCount >= m.cfg.MaxTotalNSConns:
		m.mu.Unlock()
		return nil, exhausted("bind %q: the monitor has %d nameservice connections, its quota (--max-total-ns-conns)", rec.name, m.cfg.MaxTotalNSConns)
	}
	s.nsConns++
	m.nsConnCount++
	m.mu.Unlock()
	attacher, err := m.openNameservice(s, rec)
	if err != nil {
		m.mu.Lock()
		s.nsConns--
		m.nsConnCount--
		m.mu.Unlock()
	}
	return attacher, err
}

// openOwnRing makes the ring pair of a connection to a service the monitor
// serves itself (the nameservice, the spawn service), for frames of up to
// maxFrame bytes: it opens the monitor's side and returns the attacher's
// descriptors, for the bind reply.
func (m *Monitor) openOwnRing(rec *connRec, maxFrame int) (*ump.Conn, []wire.Cap, error) {
	opts := &ump.Options{MaxMessageSize: maxFrame, RingSlots: nsRingSlots, BulkSize: nsRingBulk, Logger: m.log}
	files, err := ump.NewFiles(opts)
	if err != nil {
		return nil, nil, fail(proto.StatusInternal, "bind %q: create the ring pair: %v", rec.name, err)
	}
	a, b, err := ump.SocketPair()
	if err != nil {
		files.Close()
		return nil, nil, fail(proto.StatusInternal, "bind %q: create the liveness socket: %v", rec.name, err)
	}
	attacher, err := ump.Caps(files, ump.Attacher, b)
	if err != nil {
		files.Close()
		a.Close()
		return nil, nil, fail(proto.StatusInternal, "bind %q: duplicate the ring descriptors: %v", rec.name, err)
	}
	u, err := ump.Open(ump.Creator, files, a, opts) // takes files and a
	if err != nil {
		closeCaps(attacher)
		return nil, nil, fail(proto.StatusInternal, "bind %q: open the ring pair: %v", rec.name, err)
	}
	return u, attacher, nil
}

// openNameservice makes the ring pair of a nameservice connection, small
// (nsRingSlots, nsRingBulk: the monitor maps it, and a client may touch
// every page), and starts serving it.
func (m *Monitor) openNameservice(s *session, rec *connRec) ([]wire.Cap, error) {
	u, attacher, err := m.openOwnRing(rec, nameservice.MaxFrameSize)
	if err != nil {
		return nil, err
	}
	c := newNSConn(m, u, rec.id, s, s.log)
	m.mu.Lock()
	if m.closed || m.domains[s.id] != s {
		m.mu.Unlock()
		u.Close()
		closeCaps(attacher)
		return nil, errCancelled
	}
	m.recordLocked(s, rec)
	m.nsConns[rec.id] = c
	// s's session goroutine is counted in m.wg until this bind returns, so
	// the count is above zero here, as Add requires.
	m.wg.Add(1)
	m.mu.Unlock()
	go c.serve()
	return attacher, nil
}
