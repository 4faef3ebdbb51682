package bench

import _ "unsafe" // for go:linkname

// nanotime is the runtime's monotonic clock (CLOCK_MONOTONIC through the
// vDSO), the clock the C peers read with clock_gettime. time.Now reads the
// wall clock too and costs about twice as much, which would bias per
// round-trip timings of Go peers against C peers.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64
