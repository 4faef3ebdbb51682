package bench

import (
	"testing"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/etcdtest"
)

// TestRunNames runs the names suite quickly against a real etcd: every
// case reports its figures, and the summary states the three ratios.
func TestRunNames(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	etcdtest.Need(t)
	var results []Result
	err := RunNames(testkit.Context(t), NamesConfig{Quick: true}, func(r Result) error {
		results = append(results, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"get/chanos", "get/etcd", "get/embedded", "set/chanos", "set/etcd", "wait-for/chanos", "wait-for/etcd-set", "wait-for/etcd"}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(results), len(want), results)
	}
	for i, r := range results {
		if got := r.Case + "/" + r.Transport; got != want[i] || r.Suite != "names" || r.RTTp50 == nil || *r.RTTp50 <= 0 || r.Iters == 0 {
			t.Errorf("result %d: %s %+v, want %s with figures", i, got, r, want[i])
		}
	}
	var b testkit.Output
	NamesSummary(&b, results)
	if n := b.Count("(p50):", "goal <="); n != 3 {
		t.Errorf("the summary states %d goals, want 3:\n%s", n, b.String())
	}
}
