// Package chanos is the user's API of chanos: a process joins its
// machine's monitor (Join, Domain), exports services and connects to them
// by name (Export, Connect, Listener), and talks over connections (Conn):
// one-way messages in both directions and rpc calls, with errors as
// values and the reason a connection ended (ErrClosed, ErrPeerDied,
// ErrProtocol, ErrNetworkLost).
//
// An rpc fails with a status code (Code), gRPC's canonical ones or an
// application's own: a handler returns Errorf(CodeNotFound, ...), and the
// caller matches errors.Is(err, CodeNotFound) or reads CodeOf(err).
//
// Most programs use the typed packages chanosc generates from an
// interface's IDL (see the interfaces directory and docs/codegen-go.md),
// which wrap this package's Conn and Listener. The connection engine that
// every connection runs on, whatever its interconnect, is internal; the
// code chanosc generates reaches it through package chanos/genrt.
package chanos
