// Package net is the net interconnect: chanos connections between
// machines over TCP (docs/net.md).
//
// A connection is a pair of Links, one made by Dial and one returned by a
// Listener's Accept. Each frame a Link sends carries a sequence number and
// stays in a bounded send window until the peer acknowledges it; the
// acknowledgements are cumulative. When the TCP connection breaks, the
// dialing side redials and both sides resume from what the other has
// received: nothing is lost, duplicated or reordered, and the user sees a
// pause. A connection that cannot be resumed within its grace period ends
// with interconnect.ErrNetworkLost.
//
// Frames with capabilities are refused at send: descriptors do not cross
// machines.
package net
