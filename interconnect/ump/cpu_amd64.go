package ump

// storeRelease stores v at *p with release ordering only: earlier loads and
// stores are visible before it, but unlike sync/atomic's sequentially
// consistent store it does not drain the store buffer. It is used for the
// sequence words of all but the last slot of a message, for the
// consumer's position and wait word, and to clear the exclusive calls'
// flags (clearFlag), where no store-load ordering is needed.
//
// On x86-64 every store is a release store: the processor makes a store
// visible only after the loads and stores before it. So this is a plain
// store, which the compiler inlines, and it stays after them in the
// compiled code too, since the gc compiler orders every load and store
// on one memory chain and never schedules a load or store after a later
// store. An assembly function, as on arm64, would put a call with
// stack-passed arguments on the path between a message's arrival and its
// answer (measured: docs/results/, the Go tax).
func storeRelease(p *uint64, v uint64) { *p = v }
