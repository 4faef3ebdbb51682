package ump

import (
	"errors"

	"github.com/chanos/chanos/interconnect"
)

// Sentinel errors. The errors returned by this package wrap one of them (or
// a context error) with details; match them with errors.Is. The three that
// end a connection are the interconnect's, so the engine and users match
// the same values whatever the interconnect.
var (
	// ErrClosed reports that the connection was closed, by this side or by
	// the peer. A receiver sees it only after every message sent before the
	// peer's Close has been delivered.
	ErrClosed = interconnect.ErrClosed
	// ErrPeerDied reports that the peer process went away without closing
	// the connection (it exited or was killed). Messages it had completely
	// written before are still delivered first.
	ErrPeerDied = interconnect.ErrPeerDied
	// ErrProtocol reports that the peer broke the ring protocol: a bad
	// header, sequence word, length or index in shared memory, or bad
	// descriptors at setup. It ends the connection.
	ErrProtocol = interconnect.ErrProtocol
	// ErrTooLarge reports a message longer than the connection's maximum
	// message size. The connection remains usable.
	ErrTooLarge = errors.New("ump: message too large")
	// ErrBusy reports a ReceiveExclusive called while another
	// ReceiveExclusive ran on the connection, or a SendExclusive while
	// another SendExclusive ran. The connection remains usable.
	ErrBusy = errors.New("ump: another exclusive call is running")
)

// connError is the reason a connection ended, with its context.
type connError struct {
	err  error  // one of the sentinels
	what string // detail
}

func (e *connError) Error() string {
	if e.what == "" {
		return e.err.Error()
	}
	return e.err.Error() + ": " + e.what
}

func (e *connError) Unwrap() error { return e.err }

var (
	errClosedLocal = &connError{ErrClosed, "closed by this side"}
	errClosedPeer  = &connError{ErrClosed, "closed by the peer"}
	errPeerDied    = &connError{ErrPeerDied, "the peer's socket reached end of file without an orderly close"}
	errBusy        = &connError{ErrBusy, "an exclusive call while another of its kind ran"}
)

func protoErr(what string) error { return &connError{ErrProtocol, what} }
