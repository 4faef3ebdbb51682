package ump

// storeRelease stores v at *p with release ordering only: earlier loads and
// stores are visible before it, but unlike sync/atomic's sequentially
// consistent store it orders nothing after it. It is
// used for the sequence words of all but the last slot of a message, for
// the consumer's position and wait word, and to clear the exclusive
// calls' flags (clearFlag), where no store-load ordering is needed. On
// arm64 that is STLR, in assembly (cpu_arm64.s); on x86-64 a plain store
// (cpu_amd64.go).
//
//go:noescape
func storeRelease(p *uint64, v uint64)
