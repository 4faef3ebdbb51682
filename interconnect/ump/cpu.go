package ump

// cpuRelax tells the CPU that the caller is spinning (PAUSE on x86-64,
// YIELD on arm64).
func cpuRelax()

// storeRelease stores v at *p with release ordering only: earlier loads and
// stores are visible before it, but unlike sync/atomic's sequentially
// consistent store it does not drain the store buffer. It is used for the
// sequence words of all but the last slot of a message and for the
// consumer's position, where no store-load ordering is needed.
//
//go:noescape
func storeRelease(p *uint64, v uint64)
