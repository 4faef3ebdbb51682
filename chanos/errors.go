package chanos

import "github.com/chanos/chanos/interconnect"

// Errors that end a connection; Conn.Err returns one of them (wrapped with
// detail), and errors.Is matches them. They are the interconnect's own
// values, the same whatever the interconnect.
var (
	// ErrClosed: the connection was closed, by this side or the peer.
	ErrClosed = interconnect.ErrClosed
	// ErrPeerDied: the peer's process ended without closing: it was
	// killed, exited, or crashed (a handler's panic under Listener.Serve
	// closes nothing on its way).
	ErrPeerDied = interconnect.ErrPeerDied
	// ErrProtocol is matched by the errors of frames that are malformed
	// or not acceptable where they arrive: a reply to no outstanding call,
	// an rpc call sent to the side that does not serve, garbage in shared
	// memory, and the like. A connection that meets one ends.
	ErrProtocol = interconnect.ErrProtocol
	// ErrNetworkLost: the network to the peer's machine stayed down past
	// the connection's grace period.
	ErrNetworkLost = interconnect.ErrNetworkLost
	// ErrCapsUnsupported: the message carries capabilities, which this
	// interconnect cannot pass.
	ErrCapsUnsupported = interconnect.ErrCapsUnsupported
)
