package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// A Bound is a regression check on a run's results: chanos's figure for a
// case over the figure of its own raw baseline in the same run must not
// exceed Max. The bounds are wide, several times the ratios a loaded
// 2-core VM gives, so that noise never trips them; what they catch is a
// regression of an order of magnitude, which a check of figures against a
// fixed time could not tell from a slow machine. docs/bench-compare.md,
// "Regression bounds", lists them and the ratios they were chosen from.
type Bound struct {
	Suite string
	// Subject and Base are result keys (case/transport/peers/size, see
	// Result.Key) of the suite.
	Subject, Base string
	// Max is the largest ratio that passes.
	Max float64
	// What names the ratio, for the report.
	What string
	// ratio returns the subject's figure over the base's, and which
	// figure it took, or false if they lack it.
	ratio func(subject, base *Result) (float64, string, bool)
}

// Bounds are the checks of `chanos bench check` (and so of `make
// bench-smoke`). The ratios they were chosen from, quick and full runs on
// the team's 2-core VM, idle and with both cores kept busy by other
// processes: ump C/C against the raw cache line 1.8 to 2.8, rpc over ump
// against the raw ring 1.08 to 1.62, local send+receive against a Go
// channel 1.5 to 3.1. Each bound is at least 2.5 times the highest, and
// ten times the lowest is above it.
var Bounds = []Bound{
	{
		Suite: "ump", Subject: "rtt-spin/ump/c-c/8", Base: "rtt-spin/raw-spin/c-c/8", Max: 8,
		What:  "ump C/C round trip / raw cache line round trip",
		ratio: roundTripRatio,
	},
	{
		Suite: "rpc", Subject: "rpc/ump/go-go/8", Base: "rtt-spin/ump/go-go/8", Max: 5,
		What:  "rpc over ump / raw ring round trip",
		ratio: roundTripRatio,
	},
	{
		Suite: "rpc", Subject: "send-receive/local/go/8", Base: "send-receive/go-chan/go/8", Max: 8,
		What:  "local send+receive time / Go channel's",
		ratio: messageTimeRatio,
	},
}

// roundTripRatio is the subject's round trip over the base's: the ratio
// paired by round where the suite gives one (Result.PairedRatio is the
// subject's against this base), else that of the window figures, else of
// p50.
func roundTripRatio(s, b *Result) (float64, string, bool) {
	switch {
	case s.PairedRatio != nil && *s.PairedRatio > 0:
		return *s.PairedRatio, "window, paired by round", true
	case s.RTTWindow != nil && b.RTTWindow != nil && *b.RTTWindow > 0:
		return *s.RTTWindow / *b.RTTWindow, "window", true
	case s.RTTp50 != nil && b.RTTp50 != nil && *b.RTTp50 > 0:
		return *s.RTTp50 / *b.RTTp50, "p50", true
	}
	return 0, "", false
}

// messageTimeRatio is the subject's time per message over the base's.
func messageTimeRatio(s, b *Result) (float64, string, bool) {
	if s.MsgsPerS == nil || b.MsgsPerS == nil || *s.MsgsPerS <= 0 {
		return 0, "", false
	}
	return *b.MsgsPerS / *s.MsgsPerS, "msgs/s", true
}

// ReadResults reads result lines, one JSON object a line, as `chanos
// bench --json` writes them; blank lines are skipped.
func ReadResults(r io.Reader) ([]Result, error) {
	var rs []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var res Result
		if err := json.Unmarshal([]byte(line), &res); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		rs = append(rs, res)
	}
	return rs, sc.Err()
}

// Check checks results against bounds and writes a line per bound to w.
// A bound whose suite has no results is left out (said so on w); one
// whose suite ran but lacks a figure fails, as does a run in which no
// bound could be checked. The error names every failure.
func Check(w io.Writer, results []Result, bounds []Bound) error {
	find := func(suite, key string) *Result {
		for i := range results {
			if results[i].Suite == suite && results[i].Key() == key {
				return &results[i]
			}
		}
		return nil
	}
	ran := map[string]bool{}
	for _, r := range results {
		ran[r.Suite] = true
	}
	var errs []error
	checked := 0
	for _, b := range bounds {
		name := fmt.Sprintf("%s: %s (%s over %s)", b.Suite, b.What, b.Subject, b.Base)
		if !ran[b.Suite] {
			fmt.Fprintf(w, "skip  %s: the suite did not run\n", name)
			continue
		}
		s, base := find(b.Suite, b.Subject), find(b.Suite, b.Base)
		if s == nil || base == nil {
			missing := b.Subject
			if s != nil {
				missing = b.Base
			}
			err := fmt.Errorf("%s: no result for %s", name, missing)
			fmt.Fprintf(w, "FAIL  %v\n", err)
			errs = append(errs, err)
			continue
		}
		v, fig, ok := b.ratio(s, base)
		if !ok {
			err := fmt.Errorf("%s: the results lack the figures of the ratio", name)
			fmt.Fprintf(w, "FAIL  %v\n", err)
			errs = append(errs, err)
			continue
		}
		checked++
		if v > b.Max {
			err := fmt.Errorf("%s: %.2f by %s, above the bound %.1f", name, v, fig, b.Max)
			fmt.Fprintf(w, "FAIL  %v\n", err)
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(w, "ok    %s: %.2f by %s (bound %.1f)\n", name, v, fig, b.Max)
	}
	if checked == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no bound could be checked: none of their suites is in the results"))
	}
	return errors.Join(errs...)
}
