package bench

import (
	"slices"
	"testing"
)

func TestMedianKeepsEachRunsFigure(t *testing.T) {
	run := func(window, p50 float64) Result { return Result{RTTWindow: &window, RTTp50: &p50} }
	// The window ranks the runs where there is one, not p50.
	m := Median([]Result{run(300, 100), run(400, 90), run(200, 500)})
	if m.Runs != 3 || *m.RTTWindow != 300 || *m.RTTp50 != 100 {
		t.Errorf("median run: runs %d, window %v, p50 %v; want the run of window 300", m.Runs, *m.RTTWindow, *m.RTTp50)
	}
	if want := []float64{300, 400, 200}; !slices.Equal(m.RunFigures, want) {
		t.Errorf("RunFigures = %v, want %v, in the order the runs ran", m.RunFigures, want)
	}
	// One run: its figure is the result's own.
	if one := Median([]Result{run(300, 100)}); one.RunFigures != nil || one.Runs != 1 {
		t.Errorf("one run: RunFigures = %v, runs %d; want none, 1", one.RunFigures, one.Runs)
	}
	// What the runs themselves carry is not taken for runs.
	again := Median([]Result{m, run(250, 100)})
	if want := []float64{300, 250}; !slices.Equal(again.RunFigures, want) {
		t.Errorf("RunFigures = %v, want %v", again.RunFigures, want)
	}
}

func TestRoundSpread(t *testing.T) {
	subject := &Result{RunFigures: []float64{300, 280, 350}}
	base := &Result{RunFigures: []float64{200, 200, 175}}
	if got, want := roundSpread(subject, base), " (rounds 1.40-2.00)"; got != want {
		t.Errorf("roundSpread = %q, want %q", got, want)
	}
	if got := roundSpread(&Result{RunFigures: []float64{300}}, &Result{RunFigures: []float64{200}}); got != "" {
		t.Errorf("one round: %q, want nothing", got)
	}
	if got := roundSpread(subject, &Result{RunFigures: []float64{200, 200}}); got != "" {
		t.Errorf("rounds that do not pair: %q, want nothing", got)
	}
}
