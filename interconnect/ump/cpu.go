package ump

// spinPause waits between two polls of a word the peer is about to write:
// one PAUSE on x86-64 (YIELD on arm64), about 40 ns on the team's machine.
// More pauses between polls measured no better for streaming, within the
// noise, and worse for round trips (docs/ump.md, "Waiting").
func spinPause()

// storeRelease stores v at *p with release ordering only: earlier loads and
// stores are visible before it, but unlike sync/atomic's sequentially
// consistent store it does not drain the store buffer. It is used for the
// sequence words of all but the last slot of a message and for the
// consumer's position, where no store-load ordering is needed.
//
//go:noescape
func storeRelease(p *uint64, v uint64)
