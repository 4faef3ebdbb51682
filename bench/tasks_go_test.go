package bench

import (
	"slices"
	"testing"
)

// The Go baseline's merge sort, its merges parallel above pmergeCutoff,
// sorts as slices.Sort does, at sizes around the cutoffs.
func TestMsortGo(t *testing.T) {
	for _, n := range []int{0, 1, 17, msortCutoff + 1, pmergeCutoff - 1, pmergeCutoff + 1, 3*pmergeCutoff + 7, 1 << 20} {
		a := msortInput(n)
		// Runs of equal values too, which the split's binary search must
		// place on one side or the other.
		for i := range a {
			if i%5 == 0 {
				a[i] = a[i] % 8
			}
		}
		want := slices.Clone(a)
		slices.Sort(want)
		msortGo(a, make([]int32, n), 0, n)
		if !slices.Equal(a, want) {
			t.Fatalf("n=%d: not sorted as slices.Sort sorts", n)
		}
	}
}
