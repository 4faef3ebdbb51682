package ump

import (
	"testing"
	"unsafe"
)

const fuzzSlots, fuzzMax = 16, 300

// fuzzRing returns an aligned ring of fuzzSlots slots.
func fuzzRing() []byte {
	words := make([]uint64, fuzzSlots*SlotSize/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), fuzzSlots*SlotSize)
}

// FuzzRingReader hands the ring reader arbitrary slot contents at an
// arbitrary position: it must return messages within the maximum, "not
// ready" or a protocol error, and never panic or read out of bounds.
func FuzzRingReader(f *testing.F) {
	// Seeds: well-formed rings written by the producer.
	for _, sizes := range [][]int{{0}, {8, 100}, {56, 57, 200}, {300}, {300, 10, 10}} {
		mem := fuzzRing()
		t := producer{slots: mem, n: fuzzSlots, mask: fuzzSlots - 1, tail: 3}
		for _, n := range sizes {
			t.write(pattern(make([]byte, n), n))
		}
		f.Add(append([]byte(nil), mem...), uint64(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, pos uint64) {
		mem := fuzzRing()
		copy(mem, data)
		r := consumer{slots: mem, n: fuzzSlots, mask: fuzzSlots - 1, maxMsg: fuzzMax, msgLen: -1, pos: pos}
		for range 2 * fuzzSlots {
			done, err := r.poll()
			if err != nil {
				return
			}
			if !done {
				return
			}
			if len(r.buf) > fuzzMax {
				t.Fatalf("message of %d bytes, maximum %d", len(r.buf), fuzzMax)
			}
		}
	})
}
