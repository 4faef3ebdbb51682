package bench

import (
	"context"
	"fmt"
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
	want := map[string]bool{"resume/net/0": true}
	for _, tr := range []string{"tcp", "net-plain", "net-auth", "net"} {
		want["rtt/"+tr+"/8"] = true
		want["stream/"+tr+"/64"] = true
		want["stream/"+tr+"/65536"] = true
	}
	for _, r := range got {
		k := fmt.Sprintf("%s/%s/%d", r.Case, r.Transport, r.Size)
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
