package peers

import (
	"context"
	"fmt"
	"strings"
)

// A Peer is one IPC system that chanos is compared with.
type Peer interface {
	// Transport is the label the peer's results carry, such as "uds".
	Transport() string
	// Start starts a server that n clients will dial. Unless the peer is
	// in-process by definition, the server runs in its own process,
	// started from env.Exe.
	Start(ctx context.Context, env Env, n int) (Server, error)
}

// Env is what a peer needs to start its server.
type Env struct {
	// Exe is the binary that serves when run with ServeCommand as its
	// first argument (see ServeMain).
	Exe string
}

// A Server is a running peer server.
type Server interface {
	// Dial connects client i, for i in [0, n).
	Dial(ctx context.Context, i int) (Client, error)
	// PID is the server process's id, or 0 when it runs in this process.
	PID() int
	// Close stops the server (killing its process if need be). It is safe
	// to call more than once and concurrently with client operations,
	// which then fail; clients are closed after their server.
	Close() error
}

// A Client is one connection to a Server. Its methods are called from one
// goroutine at a time.
type Client interface {
	// SetPayload sets the payload that RoundTrip, Call and Send carry from
	// now on. The client may copy it into a buffer of its own, so that
	// the operations themselves copy nothing the peer would not.
	SetPayload(p []byte) error
	// RoundTrip sends the payload as a message and waits for its echo.
	RoundTrip() error
	// Call makes one request/response call through the peer's RPC layer
	// (a framed request with a call id where the peer has none).
	Call() error
	// Send sends the payload one way.
	Send() error
	// Ack waits until the server has received everything sent, and
	// returns the messages and payload bytes it received since the
	// previous Ack.
	Ack() (Ack, error)
	// Close closes the connection.
	Close() error
}

// Ack counts what a server received.
type Ack struct {
	Msgs  uint64
	Bytes uint64
}

// verifier is implemented by clients that can check, after a measurement,
// that their traffic really took the path their label names.
type verifier interface {
	Verify() error
}

// quiescer is implemented by clients that must do something before the
// server process ends (see shmipcClient.quiesce).
type quiescer interface {
	quiesce()
}

// noter is implemented by peers whose results need a word of explanation
// for some suites (which channel buffering, which RPC calls, ...).
type noter interface {
	Note(suite string) string
}

// Peers returns every peer, in the order results are reported.
func Peers() []Peer {
	return []Peer{
		streamPeer{"uds"},
		streamPeer{"tcp"},
		streamPeer{"pipe"},
		chanPeer{},
		grpcPeer{},
		shmipcPeer{},
		netrpcPeer{},
	}
}

// Transports returns the labels of every peer, in order.
func Transports() []string {
	var names []string
	for _, p := range Peers() {
		names = append(names, p.Transport())
	}
	return names
}

// Lookup returns the peer labelled name.
func Lookup(name string) (Peer, error) {
	for _, p := range Peers() {
		if p.Transport() == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("unknown transport %q (have %s)", name, strings.Join(Transports(), ", "))
}

func noteFor(p Peer, suite string) string {
	if n, ok := p.(noter); ok {
		return n.Note(suite)
	}
	return ""
}
