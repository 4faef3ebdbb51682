package monitor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect"
	cnet "github.com/chanos/chanos/interconnect/net"
	machproto "github.com/chanos/chanos/internal/protocol/machine"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// Binding between machines (docs/net.md, "Binding between machines"): a
// domain's bind of an export on another machine goes to that machine's
// monitor over the control link this monitor dialled to it (the machine
// protocol, interfaces/machine.if). The exporter's monitor checks the bind
// as it checks a local one, makes the server's credential for this one
// connection and tells the exporting domain to expect the client; this
// monitor makes the client's credential. The two domains then connect
// directly over the net interconnect: the data path never runs through a
// monitor.

// machineInterface is the machine protocol, as the engine sees it.
var machineInterface = chanos.Interface{Name: machproto.InterfaceName, MaxFrameSize: machproto.MaxFrameSize, Fingerprint: machproto.Fingerprint}

// MachineInterface is the machine protocol, for the connection over a
// control link that AddMachine and ServeMachine take.
func MachineInterface() chanos.Interface { return machineInterface }

// AddMachine routes the binds of exports on machine id over conn, the
// control link this monitor dialled to it, until conn ends or
// RemoveMachine. A later AddMachine for the same machine replaces it.
func (m *Monitor) AddMachine(id uint64, conn *chanos.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.machineConns[id] = conn
}

// RemoveMachine stops routing over conn (if it still routes machine id).
func (m *Monitor) RemoveMachine(id uint64, conn *chanos.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.machineConns[id] == conn {
		delete(m.machineConns, id)
	}
}

// ServeMachine serves the machine protocol to machine from over conn, the
// control link that machine dialled to this one (whose handshake proved
// it is from), until conn or ctx ends. Each machine may have at most
// MaxPendingBinds binds in progress here.
func (m *Monitor) ServeMachine(ctx context.Context, from uint64, conn *chanos.Conn) error {
	handle := func(ctx context.Context, in *chanos.Incoming) (wire.Message, error) {
		if in.Kind == wire.KindMessage && in.Header.Msg == machproto.MsgConnGone {
			var g machproto.ConnGone
			if err := in.Decode(&g); err != nil {
				return nil, conn.Violation(err)
			}
			m.connGone(from, g.ConnID)
			return nil, nil
		}
		if in.Kind == wire.KindCall && in.Header.Msg == machproto.MsgPs {
			var c machproto.PsCall
			if err := in.Decode(&c); err != nil {
				return nil, conn.Violation(err)
			}
			b, err := m.psDocument(machproto.MaxPsJSONLen)
			if err != nil {
				return nil, remote(c.MsgName(), fail(proto.StatusInternal, "%v", err))
			}
			return &machproto.PsReply{JSON: b}, nil
		}
		if in.Kind != wire.KindCall || in.Header.Msg != machproto.MsgBind {
			wire.CloseCaps(in.Caps)
			return nil, conn.Violation(fmt.Errorf("machine %016x sent %s %d, not a bind or ps call or conn_gone", from, in.Kind, in.Header.Msg))
		}
		var c machproto.BindCall
		if err := in.Decode(&c); err != nil {
			return nil, conn.Violation(err)
		}
		r, err := m.bindFromMachine(ctx, from, &c)
		if err != nil {
			if errors.Is(err, errCancelled) {
				return nil, err
			}
			m.log.Debug("bind from another machine failed", "machine", machineText(from), "err", err)
			return nil, remote(c.MsgName(), err)
		}
		return r, nil
	}
	return conn.Serve(ctx, handle, chanos.ConcurrentFor(m.cfg.MaxPendingBinds, machproto.MsgBind))
}

func machineText(id uint64) string { return fmt.Sprintf("%016x", id) }

// bindRemote binds s to an export that lives on machine ref.Machine: it
// asks that machine's monitor, over the control link, to connect it, and
// hands the domain what it needs to dial the server domain.
func (s *session) bindRemote(ctx context.Context, c *proto.BindCall, ref wire.Iref, byName bool, label string) (*proto.BindReply, error) {
	m := s.m
	m.mu.Lock()
	conn := m.machineConns[ref.Machine]
	m.mu.Unlock()
	switch {
	case conn == nil && m.cfg.Cluster == "":
		return nil, fail(proto.StatusNoRoute, "bind %s: its export lives on machine %016x, and this monitor is in no cluster", label, ref.Machine)
	case conn == nil:
		return nil, fail(proto.StatusNoRoute, "bind %s: no route to machine %016x, where its export lives: this machine has no control link to it (has it left the cluster, or is it unreachable?)", label, ref.Machine)
	case s.features&proto.FeatureNet == 0:
		return nil, fail(proto.StatusNoRoute, "bind %s: its export lives on machine %016x, and this domain's library cannot connect over the net interconnect", label, ref.Machine)
	}
	id, cert, key, err := newCredential()
	if err != nil {
		return nil, fail(proto.StatusInternal, "bind %s: %v", label, err)
	}
	var r machproto.BindReply
	cid := m.nextConn.Add(1)
	err = conn.Call(ctx, &machproto.BindCall{
		Target: ref, ByName: byName, Name: c.Name, Iface: c.Iface, Fingerprint: c.Fingerprint,
		Client: s.id, ClientPID: s.pid, ClientUID: s.uid, ClientProgram: s.program, ClientCert: id.Fingerprint,
		ClientConn: cid, AuthOnlyOk: m.cfg.NetAuthOnly,
	}, &r)
	if err != nil {
		var re *chanos.RemoteError
		switch {
		case ctx.Err() != nil && errors.Is(err, context.Canceled):
			return nil, errCancelled
		case errors.As(err, &re) && re.Code != 0 && proto.Status(re.Code) <= proto.StatusNoRoute:
			// The exporter's monitor refused it: its status and words.
			return nil, fail(proto.Status(re.Code), "%s (on machine %016x)", re.Detail, ref.Machine)
		case errors.Is(err, context.DeadlineExceeded):
			return nil, fail(proto.StatusLimit, "bind %s: machine %016x did not answer before the call's deadline", label, ref.Machine)
		}
		return nil, fail(proto.StatusNoRoute, "bind %s: the control link to machine %016x: %v", label, ref.Machine, err)
	}
	rec := &connRec{id: cid, name: r.ExportName, client: s.id, server: r.Server, machine: ref.Machine, peerConn: r.ConnID, authOnly: r.AuthOnly, via: proto.InterconnectNet, export: ref.Export}
	if !m.addConn(s, rec, nil) {
		m.tellMachinesGone([]*connRec{rec})
		return nil, errCancelled
	}
	s.log.Info("bind", "name", rec.name, "by_ref", !byName, "iface", c.Iface, "conn", rec.id,
		"machine", machineText(ref.Machine), "server", rec.server, "via", rec.via.String(), "addr", r.Addr)
	return &proto.BindReply{
		Via: proto.InterconnectNet, Ref: ref.WithoutToken(), ConnID: rec.id, MaxFrame: r.MaxFrame,
		NetAddr: r.Addr, NetName: r.ServerName, NetPeer: proto.CertFingerprint(r.ServerCert), NetCert: cert, NetKey: key,
		NetAuthOnly: r.AuthOnly,
	}, nil
}

// bindFromMachine connects a domain of machine from to an export of this
// one: it checks the bind as a local one is checked, tells the exporting
// domain to expect the client, and says where to dial.
func (m *Monitor) bindFromMachine(ctx context.Context, from uint64, c *machproto.BindCall) (*machproto.BindReply, error) {
	label := fmt.Sprintf("%q", c.Name)
	if !c.ByName {
		label = fmt.Sprintf("by iref (export %d)", c.Target.Export)
	}
	label += " from machine " + machineText(from)
	if n := m.waits.Add(1); int(n) > m.cfg.MaxTotalPendingBinds {
		m.waits.Add(-1)
		return nil, exhausted("bind %s: the monitor has %d binds and nameservice waits in progress, its quota (--max-total-pending-binds)", label, m.cfg.MaxTotalPendingBinds)
	}
	defer m.waits.Add(-1)
	if err := validIface(c.Iface); err != nil {
		return nil, fail(proto.StatusInvalid, "bind %s: %v", label, err)
	}
	if c.Target.Machine != m.machineID {
		return nil, fail(proto.StatusNoRoute, "bind %s: the export is of machine %016x, not this one", label, c.Target.Machine)
	}
	if m.cfg.NetHost == "" {
		return nil, fail(proto.StatusNoRoute, "bind %s: this machine takes no connections from other machines (its monitor has no address for them)", label)
	}
	m.mu.Lock()
	e := m.exports[c.Target.Export]
	m.mu.Unlock()
	if e == nil {
		e = m.spawnExport(c.Target.Export)
	}
	switch {
	case e == nil:
		return nil, fail(proto.StatusNotFound, "bind %s: its export %d has been withdrawn", label, c.Target.Export)
	case !sameToken(e.ref, c.Target):
		return nil, fail(proto.StatusDenied, "bind %s: a wrong token for export %d", label, c.Target.Export)
	case c.ByName && e.policy.private:
		return nil, fail(proto.StatusDenied, "bind %s: the export is private: only a bind by its iref may connect to it, and the name gives no token", label)
	case len(e.policy.uids) > 0 || len(e.policy.programs) > 0:
		return nil, fail(proto.StatusDenied, "bind %s: the export admits only the uids and programs it lists, which are this machine's: binds from other machines are refused", label)
	case e.iface != c.Iface:
		return nil, fail(proto.StatusMismatch, "bind %s: it exports interface %q, not %q", label, e.iface, c.Iface)
	case e.fingerprint != 0 && c.Fingerprint != 0 && e.fingerprint != c.Fingerprint:
		return nil, fail(proto.StatusMismatch, "bind %s: interface %s: the export's fingerprint is %016x, the client's %016x (built from another version of %s)", label, c.Iface, e.fingerprint, c.Fingerprint, c.Iface)
	case !m.awaitAdoption(ctx, e):
		return nil, fail(proto.StatusNotFound, "bind %s: its export %d was handed over and withdrawn unadopted", label, c.Target.Export)
	case e.server() == nil && m.spawnExport(e.id) == e:
		return m.bindSpawndFromMachine(from, c, e, label)
	case e.server() == nil:
		return nil, fail(proto.StatusNoRoute, "bind %s: each machine serves its own nameservice, to its own domains", label)
	case e.server().features&proto.FeatureNetAccept == 0:
		return nil, fail(proto.StatusNoRoute, "bind %s: the exporting domain's library cannot take connections over the net interconnect", label)
	}
	server := e.server()
	id, cert, key, err := newCredential()
	if err != nil {
		return nil, fail(proto.StatusInternal, "bind %s: %v", label, err)
	}
	name := serverName()
	addr, listener, err := m.netListener(server)
	if err != nil {
		return nil, fail(proto.StatusInternal, "bind %s: %v", label, err)
	}
	authOnly := c.AuthOnlyOk && m.cfg.NetAuthOnly
	rec := &connRec{id: m.nextConn.Add(1), name: e.name, client: c.Client, server: server.id, machine: from, inbound: true, peerConn: c.ClientConn, authOnly: authOnly, via: proto.InterconnectNet, export: e.id}
	in := &proto.Incoming{
		Ref: e.ref, ConnID: rec.id, Client: c.Client, Via: proto.InterconnectNet, MaxFrame: e.maxFrame,
		ClientPID: c.ClientPID, ClientUID: c.ClientUID, ClientProgram: c.ClientProgram, ClientMachine: from,
		NetName: name, NetPeer: proto.CertFingerprint(c.ClientCert), NetCert: cert, NetKey: key, NetAuthOnly: authOnly,
	}
	if listener != nil {
		in.Fds = []wire.Cap{listener}
	}
	if !m.addInbound(rec, server) {
		m.dropNetListener(server, listener)
		return nil, fail(proto.StatusNotFound, "bind %s: the exporting domain %d has gone", label, server.id)
	}
	if err := server.conn.Send(ctx, in); err != nil {
		m.dropNetListener(server, listener)
		m.mu.Lock()
		m.dropRecordLocked(rec)
		m.mu.Unlock()
		switch {
		case errors.Is(err, chanos.ErrClosed) || errors.Is(err, chanos.ErrPeerDied) || errors.Is(err, chanos.ErrProtocol):
			return nil, fail(proto.StatusNotFound, "bind %s: the exporting domain %d has gone", label, server.id)
		case errors.Is(err, context.DeadlineExceeded):
			return nil, fail(proto.StatusLimit, "bind %s: the exporting domain %d did not take the connection before the call's deadline", label, server.id)
		}
		return nil, errCancelled
	}
	server.log.Info("bind from another machine", "name", e.name, "by_ref", !c.ByName, "iface", c.Iface, "conn", rec.id,
		"machine", machineText(from), "client", c.Client, "via", rec.via.String(), "addr", addr)
	return &machproto.BindReply{
		ConnID: rec.id, Server: server.id, ExportName: e.name, MaxFrame: e.maxFrame,
		Addr: addr, ServerName: name, ServerCert: machproto.CertFingerprint(id.Fingerprint), AuthOnly: authOnly,
	}, nil
}

// netListener returns the address of the TCP listener s accepts
// connections from other machines on. The first time, the monitor opens
// it on NetHost and returns its descriptor too, for the incoming message
// that hands it to s: the socket is s's from then on, and lives as long
// as s keeps it.
func (m *Monitor) netListener(s *session) (string, *os.File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.netAddr != "" {
		return s.netAddr, nil, nil
	}
	ln, addr, err := m.listenNetHost()
	if err != nil {
		return "", nil, fmt.Errorf("for domain %d: %w", s.id, err)
	}
	f, err := ln.File()
	ln.Close()
	if err != nil {
		return "", nil, fmt.Errorf("the TCP listener for domain %d: %w", s.id, err)
	}
	s.netAddr = addr
	return s.netAddr, f, nil
}

// listenNetHost opens a TCP listener on a free port of NetHost, the
// address other machines reach this one at, and returns it with the
// address to give them.
func (m *Monitor) listenNetHost() (*net.TCPListener, string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(m.cfg.NetHost, "0"))
	if err != nil {
		return nil, "", fmt.Errorf("open a TCP listener on %s: %w", m.cfg.NetHost, err)
	}
	ln := l.(*net.TCPListener)
	return ln, net.JoinHostPort(m.cfg.NetHost, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)), nil
}

// newCredential makes the credential of one side of one connection between
// machines: a fresh identity, and its certificate and key (DER) to hand
// to the domain that presents it.
func newCredential() (id *cnet.Identity, cert, key []byte, err error) {
	if id, err = cnet.NewIdentity(); err != nil {
		return nil, nil, nil, err
	}
	if cert, key, err = id.Marshal(); err != nil {
		return nil, nil, nil, err
	}
	return id, cert, key, nil
}

// dropNetListener forgets the listener netListener opened for s when the
// message that would have handed it over was not sent.
func (m *Monitor) dropNetListener(s *session, f *os.File) {
	if f == nil {
		return
	}
	f.Close()
	m.mu.Lock()
	s.netAddr = ""
	m.mu.Unlock()
}

// addInbound records rec, a connection to server from another machine,
// unless server has gone. A server keeps at most MaxConnRecords such
// records; the oldest is forgotten.
func (m *Monitor) addInbound(rec *connRec, server *session) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed || m.domains[server.id] != server {
		return false
	}
	m.recordLocked(nil, rec)
	server.inbound = append(server.inbound, rec.id)
	if n := len(server.inbound) - m.cfg.MaxConnRecords; n > 0 {
		for _, id := range server.inbound[:n] {
			if old := m.conns[id]; old != nil && old.inbound {
				m.dropRecordLocked(old)
			}
		}
		server.inbound = append(server.inbound[:0], server.inbound[n:]...)
	}
	return true
}

// notifyTimeout bounds each message that tells of a connection's end: to
// the other machine's monitor (conn_gone), or to a domain (peer_gone).
const notifyTimeout = 5 * time.Second

// tellMachinesGone tells the other machines' monitors that this machine's
// domain of each of recs has ended, so that their domains learn that
// their peer died at once, not after the net link's grace period. It
// does not wait.
func (m *Monitor) tellMachinesGone(recs []*connRec) {
	for _, rec := range recs {
		m.mu.Lock()
		conn := m.machineConns[rec.machine]
		m.mu.Unlock()
		if conn == nil {
			continue // its domain finds out through the link's grace period
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
			defer cancel()
			if err := conn.Send(ctx, &machproto.ConnGone{ConnID: rec.peerConn}); err != nil {
				m.log.Debug("conn_gone not sent", "machine", machineText(rec.machine), "err", err)
			}
		}()
	}
}

// connGone handles machine from's news that its domain of connection id
// (this monitor's record) has ended: the local domain is told its peer
// died. A machine may end only the connections it is the other end of.
func (m *Monitor) connGone(from, id uint64) {
	m.mu.Lock()
	rec := m.conns[id]
	if rec == nil || rec.machine != from {
		m.mu.Unlock()
		return
	}
	m.dropRecordLocked(rec)
	s := m.domains[rec.local()]
	m.mu.Unlock()
	m.tellPeerGone(s, rec, false)
	m.endOwnConn(rec, false)
}

// endOwnConn ends rec's connection if it is one the monitor serves itself
// (the spawn service's, from a domain of another machine) and that domain
// has gone, or its machine has left.
func (m *Monitor) endOwnConn(rec *connRec, networkLost bool) {
	if !rec.inbound || rec.server != SelfDomainID || m.spawnd == nil {
		return
	}
	m.mu.Lock()
	c := m.spawnd.conns[rec.id]
	m.mu.Unlock()
	if c == nil || c.link == nil {
		return
	}
	if networkLost {
		c.link.End(interconnect.Ended(interconnect.ErrNetworkLost, errors.New("chanos: network lost: the peer's machine left the cluster, or its credential was revoked or expired")))
	} else {
		c.link.End(interconnect.Ended(interconnect.ErrPeerDied, errors.New("chanos: peer died: its monitor says its domain has ended")))
	}
}

// MachineGone ends the connections between this machine's domains and
// machine id, which has left the cluster: each local domain is told its
// connection's network is lost.
func (m *Monitor) MachineGone(id uint64) {
	type gone struct {
		s   *session
		rec *connRec
	}
	var list []gone
	m.mu.Lock()
	for _, rec := range m.conns {
		if rec.machine != id {
			continue
		}
		m.dropRecordLocked(rec)
		list = append(list, gone{m.domains[rec.local()], rec})
	}
	m.mu.Unlock()
	for _, g := range list {
		m.tellPeerGone(g.s, g.rec, true)
		m.endOwnConn(g.rec, true)
	}
}

// tellPeerGone sends s the peer_gone of rec, without waiting.
func (m *Monitor) tellPeerGone(s *session, rec *connRec, networkLost bool) {
	if s == nil || s.features&proto.FeatureNet == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(s.ctx, notifyTimeout)
		defer cancel()
		if err := s.conn.Send(ctx, &proto.PeerGone{ConnID: rec.id, NetworkLost: networkLost}); err != nil {
			s.log.Debug("peer_gone not sent", "conn", rec.id, "err", err)
		}
	}()
}

// serverName makes the TLS server name of a connection between machines:
// "c" and 32 hex digits of 16 random bytes.
func serverName() string {
	var token [16]byte
	rand.Read(token[:])
	return "c" + hex.EncodeToString(token[:])
}
