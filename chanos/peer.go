package chanos

import (
	"context"
	"os"

	"github.com/chanos/chanos/chanos/internal/engine"
	"github.com/chanos/chanos/internal/protocol/monitor"
)

// Peer is the domain at the other end of a connection that a listener
// accepted, as the monitor knows it.
type Peer struct {
	// Domain is the peer's domain id.
	Domain uint64
	// Program is the name the peer gave at Join (WithProgram, or its
	// executable's); the peer names itself, so it tells honest programs
	// apart, not a hostile one of the same user.
	Program string
	// PID and UID are the peer's process and user ids, from its socket
	// (SO_PEERCRED), which the monitor checked.
	PID int32
	UID uint32
	// Machine is the monitor's machine id: the peer's machine.
	Machine uint64
}

// PeerFrom returns the peer whose call or message a Serve handler was
// given ctx for, if the connection came from a Listener. It costs no
// allocation.
func PeerFrom(ctx context.Context) (Peer, bool) {
	c, ok := engine.ConnFrom(ctx)
	if !ok {
		return Peer{}, false
	}
	return (*Conn)(c).Peer()
}

// Peer returns the domain at the other end of a connection that a
// Listener accepted; false for connections made by Connect or NewConn.
func (c *Conn) Peer() (Peer, bool) {
	p, ok := eng(c).Peer().(*Peer)
	if !ok {
		return Peer{}, false
	}
	return *p, true
}

// incomingPeer is the peer of a connection the monitor announced.
func (d *Domain) incomingPeer(in *monitor.Incoming) *Peer {
	return &Peer{Domain: in.Client, Program: in.ClientProgram, PID: in.ClientPID, UID: in.ClientUID, Machine: d.Machine()}
}

// selfPeer is the peer of a connection this domain bound to its own export.
func (d *Domain) selfPeer() *Peer {
	return &Peer{Domain: d.ID(), Program: truncate(d.program, monitor.MaxHelloProgramLen), PID: int32(os.Getpid()), UID: uint32(os.Getuid()), Machine: d.Machine()}
}

// ConnEvent is a connection to an export coming or going, as OnConn
// reports it.
type ConnEvent struct {
	// Connected is set when a client has connected; otherwise the
	// connection has ended.
	Connected bool
	// Peer is the client.
	Peer Peer
	// Conn is the connection: the one Accept returns (or has returned).
	Conn *Conn
	// Err is why the connection ended (not Connected): it matches
	// ErrClosed (either side closed it), ErrPeerDied or ErrProtocol.
	Err error
}

// OnConn has fn called when a client connects to the export, before
// Accept returns the connection, and when that connection ends: when the
// peer closes it or dies (found by whoever reads it, or by Serve's watch
// of the peer) or when it is closed on this side (Listener.Serve closes
// each connection when its handler returns). fn runs in the goroutine
// that finds the event, so it must return soon and must not wait for the
// connection.
func OnConn(fn func(ConnEvent)) ExportOption {
	return func(o *exportOptions) { o.onConn = fn }
}

// connected records c's peer and reports c's coming, and arranges for its
// going to be reported.
func (l *Listener) connected(c *Conn, p *Peer) {
	eng(c).SetPeer(p)
	if l.onConn == nil {
		return
	}
	fn := l.onConn
	eng(c).OnEnd(func(err error) { fn(ConnEvent{Peer: *p, Conn: c, Err: err}) })
	fn(ConnEvent{Connected: true, Peer: *p, Conn: c})
}
