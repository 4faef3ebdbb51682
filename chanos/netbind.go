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
	d      *Domain
	grants *cnet.Grants

	mu        sync.Mutex
	listeners []*cnet.Listener
	closed    bool
	wg        sync.WaitGroup
	ctx       context.Context
	cancel    context.CancelFunc
}

// netGrant is where a granted connection goes once accepted.
type netGrant struct {
	l    *Listener
	who  *Peer
	conn uint64 // the monitor's connection id
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
		TLS:          &cnet.TLS{Identity: id, Peer: reply.NetPeer, ServerName: reply.NetName, AuthOnly: reply.NetAuthOnly},
		Logger:       d.log,
	}
	link, err := cnet.Dial(ctx, reply.NetAddr, opts)
	if err != nil {
		return nil, fmt.Errorf("chanos: connect %s: dial %s: %w", label, reply.NetAddr, err)
	}
	d.trackNet(reply.ConnID, link)
	return d.newConn(&netCapsLink{Link: link, d: d}, iface), nil
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
	s.grants.Add(in.NetName, id, in.NetPeer, in.NetAuthOnly, &netGrant{l: l, who: who, conn: in.ConnID})
}

// netServer returns the domain's netServer, made on first use; nil once
// the domain is closed.
func (d *Domain) netServer() *netServer {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.net == nil && !d.closing {
		ctx, cancel := context.WithCancel(context.Background())
		d.net = &netServer{d: d, grants: cnet.NewGrants(netGrantTTL, netMaxGrants, netSelectWait), ctx: ctx, cancel: cancel}
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
		TLS:          s.grants.TLS(),
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

// accept hands each connection L accepts to the listener of its export.
func (s *netServer) accept(L *cnet.Listener) {
	defer s.wg.Done()
	for {
		link, err := L.Accept(s.ctx)
		if err != nil {
			return
		}
		v, ok := s.grants.Take(link.ServerName())
		if !ok { // dropped as too old between admission and here
			link.Close()
			continue
		}
		g := v.(*netGrant)
		s.grants.ForgetWhenGone(link)
		s.d.trackNet(g.conn, link)
		if g.l.relay != nil {
			g.l.relay(&netCapsLink{Link: link, d: s.d})
			continue
		}
		c := s.d.newConn(&netCapsLink{Link: link, d: s.d}, g.l.iface)
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
	s.grants.Close()
	for _, L := range ls {
		if err := L.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.d.log.Debug("chanos: closing a net listener", "err", err)
		}
	}
	s.wg.Wait()
}

// trackNet records link as the connection the monitor knows as id, so
// that the monitor's peer_gone can end it. Links that have ended are
// forgotten as new ones come: the table is swept when it has doubled
// since the last sweep, so a connection costs O(1) on average.
func (d *Domain) trackNet(id uint64, link *cnet.Link) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.netConn) >= 2*d.netSwept {
		for k, l := range d.netConn {
			if l.Err() != nil {
				delete(d.netConn, k)
			}
		}
		d.netSwept = max(len(d.netConn), 8)
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
		link.End(interconnect.Ended(interconnect.ErrNetworkLost, errors.New("chanos: network lost: the peer's machine left the cluster, or its credential was revoked or expired")))
		return
	}
	link.End(interconnect.Ended(interconnect.ErrPeerDied, errors.New("chanos: peer died: its monitor says its domain has ended")))
}
