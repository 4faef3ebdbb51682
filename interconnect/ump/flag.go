//go:build !race

package ump

import (
	"sync/atomic"
)

// clearFlag stores 0 at *p with release ordering (storeRelease): what was
// done before is visible to whoever loads the 0.
func clearFlag(p *uint64) { storeRelease(p, 0) }

// enterFlag marks an exclusive call as running in *p, which Close waits to
// see cleared before it unmaps the rings. It fails with errBusy if *p
// shows one running already and with errClosedLocal once closing is set.
//
// The mark is a plain store, and the closing flag is loaded after it: Close
// sets closing and then runs fenceAllThreads before it looks at *p, so
// either it sees the mark or the load here sees closing (an asymmetric
// Dekker: the fence is Close's, not every call's). Where there is no such
// fence, an atomic swap orders the two. Two calls that enter at the same
// instant are not told apart; the callers promised not to make them.
//
// SendExclusive and ReceiveExclusive take enterFlag's fast way themselves,
// written out where the call would be (too large to be inlined, a call
// costs a nanosecond on the path of every message), and call enterFlag
// with marked set if they marked the call and then saw closing.
func enterFlag(p *uint64, closing *atomic.Bool, marked bool) error {
	if !marked {
		if atomic.LoadUint64(p) != 0 {
			return errBusy
		}
		if fastFence() {
			*p = 1
		} else if atomic.SwapUint64(p, 1) != 0 {
			return errBusy
		}
	}
	if closing.Load() {
		clearFlag(p)
		return errClosedLocal
	}
	return nil
}

// fastFence reports whether enterFlag's fast way, a plain store, may be
// taken: startFence's registration has ended, and succeeded.
func fastFence() bool { return fenceState.Load() == fenceYes }
