package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// samplePlotInput is result lines as chanos bench --json writes them:
// chanos's cases with float figures, the peers' with integers.
const samplePlotInput = `{"suite":"pingpong","case":"rtt-spin","transport":"ump","peers":"go-go","size":8,"iters":1000,"rtt_ns_p50":412,"rtt_ns_p99":900,"rtt_ns_mean":450.25}
{"suite":"pingpong","case":"rtt","transport":"ump","peers":"go-go","size":8,"iters":1000,"rtt_ns_p50":1500,"rtt_ns_p99":3000,"rtt_ns_mean":1612.5}
{"suite":"pingpong","case":"rtt","transport":"ump","peers":"go-go","size":65536,"iters":1000,"rtt_ns_p50":25000,"rtt_ns_p99":60000}
{"suite":"pingpong","case":"rtt","transport":"uds","peers":"go-go","size":8,"iters":100,"rtt_ns_p50":30000,"rtt_ns_p99":100000,"note":"x"}
{"suite":"pingpong","case":"rtt","transport":"uds","peers":"go-go","size":65536,"iters":100,"rtt_ns_p50":90000,"rtt_ns_p99":200000}

{"suite":"stream","case":"stream","transport":"ump","peers":"go-go","size":64,"iters":100,"msgs_per_s":5e6,"bytes_per_s":3.2e8}
{"suite":"stream","case":"stream","transport":"ump","peers":"go-go","size":1048576,"iters":100,"msgs_per_s":3000,"bytes_per_s":3.1e9}
{"suite":"stream","case":"stream","transport":"shmipc-go","peers":"go-go","size":64,"iters":100,"msgs_per_s":1e6,"bytes_per_s":6.4e7}
{"suite":"rpc","case":"rpc","transport":"grpc-uds","peers":"go-go","size":8,"iters":100,"rtt_ns_p50":280000}
`

func TestPlot(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, magic string }{{"chart.png", "\x89PNG"}, {"chart.svg", "<svg"}} {
		out := filepath.Join(dir, tc.name)
		var stderr bytes.Buffer
		if code := plotMain([]string{"--out", out}, strings.NewReader(samplePlotInput), &stderr); code != 0 {
			t.Fatalf("%s: exit %d: %s", tc.name, code, stderr.String())
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 1000 || !bytes.Contains(b[:min(len(b), 512)], []byte(tc.magic)) {
			t.Errorf("%s: %d bytes, not a %s file", tc.name, len(b), tc.magic)
		}
	}
}

func TestPlotErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args  []string
		input string
		code  int
		want  string
	}{
		{nil, samplePlotInput, 2, "usage"},
		{[]string{"--out", filepath.Join(dir, "x.gif")}, samplePlotInput, 1, ".png or .svg"},
		{[]string{"--out", filepath.Join(dir, "x.png")}, "not json\n", 1, "line 1"},
		{[]string{"--out", filepath.Join(dir, "x.png")}, `{"suite":"bind","case":"connect","transport":"ump","rtt_ns_p50":5}` + "\n", 1, "no round-trip"},
	} {
		var stderr bytes.Buffer
		code := plotMain(tc.args, strings.NewReader(tc.input), &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("plot %q: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}
