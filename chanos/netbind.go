package chanos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/chanos/chanos/interconnect"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// Connections between machines (docs/net.md, "Binding between machines").
// The client dials the server domain directly, with the address, server
// name and credentials the two machines' monitors agreed on; the server
// domain accepts on the TCP listener its monitor opened for it, and
// admits each client once, by the certificate its monitor announced.

// Bounds of what the monitor's announcements of connections from other
// machines can make a domain hold: grants not yet used are dropped after
// netGrantTTL, and beyond netMaxGrants the oldest goes.
const (
	netGrantTTL   = 30 * time.Second
	netMaxGrants  = 1024
	netSelectWait = 2 * time.Second // how long a handshake waits for its grant to be announced
)

// netServer accepts the domain's connections from other machines.
type netServer struct {
	d *Domain

	mu        sync.Mutex
	listeners []*cnet.Listener
	grants    map[string]*netGrant // by server name
	order     []string             // grant names, oldest first
	arrived   chan struct{}        // closed, and replaced, when a grant is added
	closed    bool
	wg        sync.WaitGroup
	cancel    context.CancelFunc
	ctx       context.Context
}

// netGrant is one expected connection: the credential to present, the
// client's certificate to admit once, and where the connection goes.
type netGrant struct {
	id      *cnet.Identity
	peer    [32]byte
	l       *Listener
	who     *Peer
	conn    uint64 // the monitor's connection id
	used    bool
	expires time.Time
}

// dialNet opens the client's side of a connection to an export on another
// machine, from the bind's reply.
func (d *Domain) dialNet(ctx context.Context, label string, reply *monitor.BindReply, iface Interface) (*Conn, error) {
	id, err := cnet.ParseIdentity(reply.NetCert, reply.NetKey)
	if err != nil {
		return nil, fmt.Errorf("chanos: connect %s: the monitor's credential: %w", label, err)
	}
	opts := &cnet.Options{
		MaxFrameSize: max(int(reply.MaxFrame), iface.MaxFrameSize),
		TLS:          &cnet.TLS{Identity: id, Peer: reply.NetPeer, ServerName: reply.NetName},
		Logger:       d.log,
	}
	link, err := cnet.Dial(ctx, reply.NetAddr, opts)
	if err != nil {
		return nil, fmt.Errorf("chanos: connect %s: dial %s: %w", label, reply.NetAddr, err)
	}
	d.trackNet(reply.ConnID, link)
	return newConn(link, iface, d.log), nil
}

// acceptNet records the connection the monitor announced to l from
// another machine, and starts the listener it handed over, if any.
func (l *Listener) acceptNet(in *monitor.Incoming) {
	d := l.d
	id, err := cnet.ParseIdentity(in.NetCert, in.NetKey)
	if err != nil {
		wire.CloseCaps(in.Fds)
		d.log.Warn("chanos: a connection from another machine with a bad credential; refused", "name", l.name, "err", err)
		return
	}
	s := d.netServer()
	if s == nil {
		wire.CloseCaps(in.Fds)
		return
	}
	for _, c := range in.Fds {
		if err := s.listen(c, int(in.MaxFrame)); err != nil {
			d.log.Warn("chanos: could not accept connections from other machines", "err", err)
		}
	}
	who := &Peer{Domain: in.Client, Program: in.ClientProgram, PID: in.ClientPID, UID: in.ClientUID, Machine: in.ClientMachine}
	s.grant(in.NetName, &netGrant{id: id, peer: in.NetPeer, l: l, who: who, conn: in.ConnID, expires: time.Now().Add(netGrantTTL)})
}

// netServer returns the domain's netServer, made on first use; nil once
// the domain is closed.
func (d *Domain) netServer() *netServer {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.net == nil && !d.closing {
		ctx, cancel := context.WithCancel(context.Background())
		d.net = &netServer{d: d, grants: map[string]*netGrant{}, arrived: make(chan struct{}), ctx: ctx, cancel: cancel}
	}
	return d.net
}

// listen starts accepting on the TCP listening socket c, which it takes.
func (s *netServer) listen(c wire.Cap, maxFrame int) error {
	fd, err := wire.DupFD(c)
	c.Close()
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), "net listener")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return err
	}
	if _, ok := ln.(*net.TCPListener); !ok {
		ln.Close()
		return fmt.Errorf("the monitor's listener is a %T, not TCP", ln)
	}
	L := cnet.Listen(ln, &cnet.Options{
		MaxFrameSize: maxFrame,
		TLS:          &cnet.TLS{Select: s.identity, Admit: s.admit},
		Logger:       s.d.log,
	})
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		L.Close()
		return ErrClosed
	}
	s.listeners = append(s.listeners, L)
	s.wg.Add(1)
	s.mu.Unlock()
	go s.accept(L)
	return nil
}

// grant records g under name, dropping expired grants and, beyond
// netMaxGrants, the oldest.
func (s *netServer) grant(name string, g *netGrant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for len(s.order) > 0 {
		old := s.grants[s.order[0]]
		if old != nil && now.Before(old.expires) && len(s.order) < netMaxGrants {
			break
		}
		delete(s.grants, s.order[0])
		s.order = s.order[1:]
	}
	s.grants[name] = g
	s.order = append(s.order, name)
	close(s.arrived)
	s.arrived = make(chan struct{})
}

// identity is the listeners' TLS.Select: the credential of the
// connection named name. The client may dial before the monitor's
// announcement has been read: it waits a moment for it.
func (s *netServer) identity(name string) *cnet.Identity {
	deadline := time.NewTimer(netSelectWait)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		g, arrived := s.grants[name], s.arrived
		s.mu.Unlock()
		if g != nil {
			return g.id
		}
		select {
		case <-arrived:
		case <-deadline.C:
			return nil
		case <-s.ctx.Done():
			return nil
		}
	}
}

// admit is the listeners' TLS.Admit: a client certificate is admitted
// once, for the connection it was announced for.
func (s *netServer) admit(name string, fp [32]byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.grants[name]
	if g == nil || g.used || g.peer != fp {
		return false
	}
	g.used = true
	return true
}

// accept hands each connection L accepts to the listener of its export.
func (s *netServer) accept(L *cnet.Listener) {
	defer s.wg.Done()
	for {
		link, err := L.Accept(s.ctx)
		if err != nil {
			return
		}
		s.mu.Lock()
		g := s.grants[link.ServerName()]
		delete(s.grants, link.ServerName())
		s.mu.Unlock()
		if g == nil { // dropped as too old between admission and here
			link.Close()
			continue
		}
		s.d.trackNet(g.conn, link)
		c := newConn(link, g.l.iface, s.d.log)
		g.l.connected(c, g.who)
		g.l.enqueue(c)
	}
}

// close stops accepting connections from other machines; connections
// already accepted go on, but can no longer resume.
func (s *netServer) close() {
	s.mu.Lock()
	s.closed = true
	ls := s.listeners
	s.listeners = nil
	s.mu.Unlock()
	s.cancel()
	for _, L := range ls {
		if err := L.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.d.log.Debug("chanos: closing a net listener", "err", err)
		}
	}
	s.wg.Wait()
}

// trackNet records link as the connection the monitor knows as id, so
// that the monitor's peer_gone can end it. Links that have ended are
// forgotten as new ones come.
func (d *Domain) trackNet(id uint64, link *cnet.Link) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, l := range d.netConn {
		if l.Err() != nil {
			delete(d.netConn, k)
		}
	}
	d.netConn[id] = link
}

// peerGone ends the connection the monitor knows as id, whose peer's
// domain has ended or whose peer's machine has left the cluster.
func (d *Domain) peerGone(id uint64, networkLost bool) {
	d.mu.Lock()
	link := d.netConn[id]
	delete(d.netConn, id)
	d.mu.Unlock()
	if link == nil {
		return
	}
	if networkLost {
		link.End(interconnect.Ended(interconnect.ErrNetworkLost, errors.New("chanos: network lost: the peer's machine left the cluster")))
		return
	}
	link.End(interconnect.Ended(interconnect.ErrPeerDied, errors.New("chanos: peer died: its monitor says its domain has ended")))
}
