package bench

import (
	"context"
	"testing"
)

// The net suite runs every case and reports each figure with its labels.
func TestRunNetQuick(t *testing.T) {
	var got []Result
	err := RunNet(context.Background(), NetConfig{Quick: true}, func(r Result) error {
		got = append(got, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"rtt/tcp": true, "rtt/net-plain": true, "rtt/net": true,
		"stream/tcp": true, "stream/net-plain": true, "stream/net": true,
		"resume/net": true,
	}
	for _, r := range got {
		k := r.Case + "/" + r.Transport
		if !want[k] {
			t.Errorf("unexpected or repeated case %s", k)
		}
		delete(want, k)
		if r.Suite != "net" || r.Iters == 0 {
			t.Errorf("%s: suite %q, %d iterations", k, r.Suite, r.Iters)
		}
		if (r.Case == "stream") != (r.MsgsPerS != nil) || (r.Case != "stream") != (r.RTTp50 != nil) {
			t.Errorf("%s: figures missing: %+v", k, r)
		}
	}
	for k := range want {
		t.Errorf("case %s missing", k)
	}
}
