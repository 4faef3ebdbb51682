package bench

import (
	"strings"
	"testing"
)

// TestShipLeast checks the least time a ship can take, from the CPU the
// machine spent: a copy of 10 ms at 100 % of one CPU (10 ms of work), a
// hash of 6 ms and AES-GCM of 2 ms, on two CPUs.
func TestShipLeast(t *testing.T) {
	ms := func(v float64) *float64 { return &v }
	res := func(p50 float64, cpu *float64, iters int) *Result {
		p := p50 * 1e6
		return &Result{RTTp50: &p, CPUPercent: cpu, TotalNS: int64(p) * int64(iters), Iters: iters}
	}
	ship := res(24, ms(150), 10)
	cp := res(10, ms(100), 30)
	var b strings.Builder
	shipLeast(&b, ship, cp, res(6, nil, 10), res(2, nil, 10), 2)
	out := b.String()
	for _, want := range []string{
		"a ship 36.0 ms (150 %", "a TCP copy 10.0 ms (100 %)",
		"SHA-256 of 10 MB 6.0 ms, AES-GCM 2.0 ms",
		// (10 + 6) / 2 = 8 ms; (10 + 2*6 + 2*2) / 2 = 13 ms
		"the target's hash 8.0 ms = 0.80 x the copy", "both ways 13.0 ms = 1.30 x",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("shipLeast printed\n%s\nwant %q in it", out, want)
		}
	}
	b.Reset()
	shipLeast(&b, res(24, nil, 10), cp, res(6, nil, 10), res(2, nil, 10), 2)
	if b.Len() != 0 {
		t.Errorf("without the ship's CPU: printed %q, want nothing", b.String())
	}
}
