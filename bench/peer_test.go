package bench

import (
	"slices"
	"testing"
)

func TestWindowMedian(t *testing.T) {
	// 1000 samples of 200 ns on a 10 ns clock: 19 of 20 read 200, one 210,
	// so p50 says 200 while the time per round trip is 200.5.
	steps := make([]int64, 1000)
	for i := range steps {
		steps[i] = 200
		if i%20 == 0 {
			steps[i] = 210
		}
	}
	// A preemption that spoils one window leaves the median alone.
	spoiled := slices.Clone(steps)
	spoiled[350] = 1_000_000

	for _, tc := range []struct {
		name    string
		samples []int64
		size    int
		want    float64
	}{
		{"quantized", steps, 100, 200.5},
		{"one window spoiled", spoiled, 100, 200.5},
		{"fewer than ten windows: windows shrink", []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 100, 6},
		{"the partial last window is left out", []int64{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1000}, 2, 4},
		{"one sample", []int64{7}, 100, 7},
		{"none", nil, 100, 0},
	} {
		if got := windowMedian(tc.samples, tc.size); got != tc.want {
			t.Errorf("%s: windowMedian = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRTTResultKeepsOrderForWindows(t *testing.T) {
	// Two halves of different speed: sorting before the windows are taken
	// would make every window uniform.
	s := make([]int64, 2000)
	for i := range s {
		s[i] = 100
		if i%2 == 1 {
			s[i] = 300
		}
	}
	r := rttResult(s, 400_000, nil)
	if *r.RTTWindow != 200 {
		t.Errorf("window = %v, want 200 (the windows were taken from sorted samples)", *r.RTTWindow)
	}
	if *r.RTTp50 != 300 || *r.RTTMean != 200 {
		t.Errorf("p50 = %v, mean = %v, want 300 and 200", *r.RTTp50, *r.RTTMean)
	}
}

func TestRTTResultWindowsTimedWhole(t *testing.T) {
	// Windows timed whole decide the window figure: the median window's
	// time per round trip, whatever the samples say.
	s := []int64{500, 500, 500}
	r := rttResult(s, 1500, []int64{RTTWindow * 180, RTTWindow * 170, RTTWindow * 400})
	if *r.RTTWindow != 180 {
		t.Errorf("window = %v, want 180 (the median of the windows timed whole)", *r.RTTWindow)
	}
	if *r.RTTp50 != 500 || *r.RTTMean != 500 {
		t.Errorf("p50 = %v, mean = %v, want 500 and 500 (from the samples)", *r.RTTp50, *r.RTTMean)
	}
}
