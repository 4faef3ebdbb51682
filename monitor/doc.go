// Package monitor is the chanos monitor, one per machine and user: the
// control path through which domains export services by name, bind to
// them, and learn of connections to their own exports. It also hosts the
// nameservice, as a chanos service of its own.
//
// Domains reach the monitor over a Unix seqpacket socket, DIR/monitor.sock
// (see Dir), one frame of the interface monitor (interfaces/monitor.if) per
// packet, with file descriptors attached by SCM_RIGHTS. The monitor hands
// out the shared-memory rings of a bound connection and then steps aside:
// the data path never goes through it. docs/monitor-protocol.md specifies
// the protocol and docs/nameservice.md the nameservice.
//
// Everything a domain can make the monitor hold is counted against a
// quota, per domain and in total (Config), and a large reply's memory is
// reserved before it is built: a request beyond them is refused,
// "resource exhausted", a join beyond the session cap is told "monitor
// full", idle sessions are pinged, and the monitor's memory stays under
// Config.MemoryBound. docs/quotas.md describes them.
//
// Run starts a monitor and serves until its context ends; New and Serve do
// the same in two steps, so that a caller knows when the socket is ready.
// Client is a minimal client of the protocol, used by the chanos command
// line and by tests; domains use the chanos package instead.
package monitor
