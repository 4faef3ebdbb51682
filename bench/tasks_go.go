package bench

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"
)

// The Go baselines of the tasks suite: the same algorithms as the C
// runtime's workloads (c/tasks/tests/workloads.h), a goroutine where the
// C code spawns a task, run with GOMAXPROCS set to the workers.

func fibGo(n int64) int64 {
	if n < 2 {
		return n
	}
	var x int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		x = fibGo(n - 1)
		wg.Done()
	}()
	y := fibGo(n - 2)
	wg.Wait()
	return x + y
}

func fibSerial(n int64) int64 {
	if n < 2 {
		return n
	}
	return fibSerial(n-1) + fibSerial(n-2)
}

const (
	msortCutoff  = 2048    // MSORT_CUTOFF
	pmergeCutoff = 1 << 16 // PMERGE_CUTOFF
	nqSpawnRows  = 4       // NQ_SPAWN_ROWS
)

func mergeGo(a, tmp []int32, lo, mid, hi int) {
	mergeRunsGo(a, tmp, lo, mid, mid, hi, lo)
	copy(a[lo:hi], tmp[lo:hi])
}

// mergeRunsGo merges the sorted runs a[i:iend] and a[j:jend] into
// out[k:] (merge_runs).
func mergeRunsGo(a, out []int32, i, iend, j, jend, k int) {
	for i < iend && j < jend {
		if a[j] < a[i] {
			out[k] = a[j]
			j++
		} else {
			out[k] = a[i]
			i++
		}
		k++
	}
	k += copy(out[k:], a[i:iend])
	copy(out[k:], a[j:jend])
}

func msortSerialGo(a, tmp []int32, lo, hi int) {
	if hi-lo <= 16 {
		slices.Sort(a[lo:hi])
		return
	}
	mid := lo + (hi-lo)/2
	msortSerialGo(a, tmp, lo, mid)
	msortSerialGo(a, tmp, mid, hi)
	mergeGo(a, tmp, lo, mid, hi)
}

func msortGo(a, tmp []int32, lo, hi int) {
	if hi-lo <= msortCutoff {
		msortSerialGo(a, tmp, lo, hi)
		return
	}
	mid := lo + (hi-lo)/2
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		msortGo(a, tmp, lo, mid)
		wg.Done()
	}()
	msortGo(a, tmp, mid, hi)
	wg.Wait()
	if hi-lo <= pmergeCutoff {
		mergeGo(a, tmp, lo, mid, hi)
		return
	}
	pmergeGo(a, tmp, lo, mid, mid, hi, lo)
	pcopyGo(a[lo:hi], tmp[lo:hi])
}

// pmergeGo merges a[lo1:hi1] and a[lo2:hi2] into out[k:] in parallel, as
// pmerge_task does (merge_split in workloads.h).
func pmergeGo(a, out []int32, lo1, hi1, lo2, hi2, k int) {
	if (hi1-lo1)+(hi2-lo2) <= pmergeCutoff {
		mergeRunsGo(a, out, lo1, hi1, lo2, hi2, k)
		return
	}
	if hi1-lo1 < hi2-lo2 {
		lo1, hi1, lo2, hi2 = lo2, hi2, lo1, hi1
	}
	m1 := lo1 + (hi1-lo1)/2
	v := a[m1]
	m2 := lo2 + sort.Search(hi2-lo2, func(i int) bool { return a[lo2+i] >= v })
	k2 := k + (m1 - lo1) + (m2 - lo2)
	out[k2] = v
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		pmergeGo(a, out, lo1, m1, lo2, m2, k)
		wg.Done()
	}()
	pmergeGo(a, out, m1+1, hi1, m2, hi2, k2+1)
	wg.Wait()
}

// pcopyGo copies src into dst in parallel, in pieces of pmergeCutoff.
func pcopyGo(dst, src []int32) {
	if len(src) <= pmergeCutoff {
		copy(dst, src)
		return
	}
	h := len(src) / 2
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		pcopyGo(dst[:h], src[:h])
		wg.Done()
	}()
	pcopyGo(dst[h:], src[h:])
	wg.Wait()
}

func nqSerialGo(n, row int, cols, d1, d2 uint32) int64 {
	if row == n {
		return 1
	}
	free := (uint32(1)<<n - 1) &^ (cols | d1 | d2)
	var count int64
	for free != 0 {
		bit := free & -free
		free ^= bit
		count += nqSerialGo(n, row+1, cols|bit, (d1|bit)<<1, (d2|bit)>>1)
	}
	return count
}

func nqGo(n, row int, cols, d1, d2 uint32) int64 {
	if row >= nqSpawnRows || row == n {
		return nqSerialGo(n, row, cols, d1, d2)
	}
	free := (uint32(1)<<n - 1) &^ (cols | d1 | d2)
	counts := make([]int64, 0, n) // at most n free columns: slots never move
	var wg sync.WaitGroup
	for free != 0 {
		bit := free & -free
		free ^= bit
		counts = append(counts, 0)
		slot := &counts[len(counts)-1]
		wg.Add(1)
		go func() {
			*slot = nqGo(n, row+1, cols|bit, (d1|bit)<<1, (d2|bit)>>1)
			wg.Done()
		}()
	}
	wg.Wait()
	var sum int64
	for _, c := range counts {
		sum += c
	}
	return sum
}

// msortInput is the C program's input: xorshift32 from 2024.
func msortInput(n int) []int32 {
	a := make([]int32, n)
	s := uint32(2024)
	for i := range a {
		s ^= s << 13
		s ^= s >> 17
		s ^= s << 5
		a[i] = int32(s)
	}
	return a
}

// runGoTasks measures the Go baselines of the cases in want (all if
// empty) with workers 1 and 2, reps runs each (their median), and emits
// them with runtime "go".
func runGoTasks(fib int64, msortN, nq, reps int, want []string, emit func(Result) error) error {
	has := func(c string) bool { return len(want) == 0 || slices.Contains(want, c) }
	old := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(old)
	median := func(run func() bool) (float64, bool) {
		ts := make([]float64, reps)
		ok := true
		for i := range ts {
			t0 := time.Now()
			ok = run() && ok
			ts[i] = time.Since(t0).Seconds()
		}
		slices.Sort(ts)
		return ts[(len(ts)-1)/2], ok
	}
	for _, w := range []int{1, 2} {
		runtime.GOMAXPROCS(w)
		type gocase struct {
			name string
			n    int64
			run  func() func() bool // makes the input, returns a run that checks its result
		}
		cases := []gocase{
			{"fib", fib, func() func() bool {
				want := fibSerial(fib)
				return func() bool { return fibGo(fib) == want }
			}},
			{"mergesort", int64(msortN), func() func() bool {
				in := msortInput(msortN)
				a, tmp := make([]int32, msortN), make([]int32, msortN)
				return func() bool {
					copy(a, in)
					msortGo(a, tmp, 0, msortN)
					return slices.IsSorted(a)
				}
			}},
			{"nqueens", int64(nq), func() func() bool {
				want := nqSerialGo(nq, 0, 0, 0, 0)
				return func() bool { return nqGo(nq, 0, 0, 0, 0) == want }
			}},
		}
		for _, c := range cases {
			if !has(c.name) {
				continue
			}
			t, ok := median(c.run())
			if !ok {
				return fmt.Errorf("tasks: the Go baseline of %s computed a wrong result", c.name)
			}
			if err := emit(Result{Suite: "tasks", Case: c.name, Runtime: "go", Workers: w, N: c.n, TimeS: f64(t)}); err != nil {
				return err
			}
		}
	}
	return nil
}
