//go:build race

package ump

import "sync/atomic"

// clearFlag stores 0 at *p. The race detector does not see the ordering of
// storeRelease (a plain store on x86-64, an assembly store on arm64), so
// race builds use sync/atomic's.
func clearFlag(p *uint64) { atomic.StoreUint64(p, 0) }

// enterFlag is flag.go's with an atomic swap always, which the race
// detector understands (it does not see the asymmetric fence).
func enterFlag(p *uint64, closing *atomic.Bool, marked bool) error {
	if atomic.SwapUint64(p, 1) != 0 {
		return errBusy
	}
	if closing.Load() {
		clearFlag(p)
		return errClosedLocal
	}
	return nil
}

// fastFence is false: race builds take enterFlag's swap.
func fastFence() bool { return false }
