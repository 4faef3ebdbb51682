//go:build race

package ump

import "sync/atomic"

// clearFlag stores 0 at *p. The race detector does not see the ordering of
// storeRelease, an assembly store, so race builds use sync/atomic's.
func clearFlag(p *uint64) { atomic.StoreUint64(p, 0) }
