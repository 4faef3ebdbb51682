//go:build !race

package ump

// clearFlag stores 0 at *p with release ordering (storeRelease): what was
// done before is visible to whoever loads the 0.
func clearFlag(p *uint64) { storeRelease(p, 0) }
