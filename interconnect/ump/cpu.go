package ump

import _ "unsafe" // for go:linkname

// spinPause waits between two polls of a word the peer is about to write:
// one PAUSE on x86-64 (YIELD on arm64). More pauses between polls
// measured no better for streaming, within the noise, and worse for round
// trips (docs/ump.md, "Waiting").
func spinPause()

// nanotime is the runtime's monotonic clock in ns: one vDSO clock read,
// where time.Now makes two (it reads the wall clock too). The spin loops
// read it every 64 polls to bound the spin window, and a read is time in
// which a message that arrives is not seen; C's loop reads
// CLOCK_MONOTONIC once.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64
