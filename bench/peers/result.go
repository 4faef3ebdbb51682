package peers

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one measurement. Its JSON form is one line of the output shared
// with `chanos bench --json`; fields that do not apply are omitted.
type Result struct {
	Suite     string `json:"suite"`
	Case      string `json:"case"`
	Transport string `json:"transport"`
	// Peers names the languages of the two ends, client first.
	Peers   string `json:"peers"`
	Size    int    `json:"size,omitempty"`
	Clients int    `json:"clients,omitempty"`
	// Iters is round trips (pingpong, rpc, clients: all clients together)
	// or messages (stream) measured, warm-up excluded.
	Iters    int64 `json:"iters"`
	RTTNsP50 int64 `json:"rtt_ns_p50,omitempty"`
	RTTNsP99 int64 `json:"rtt_ns_p99,omitempty"`
	// MsgsPerS is messages per second (stream), or round trips per second
	// of all clients together (clients).
	MsgsPerS  float64 `json:"msgs_per_s,omitempty"`
	BytesPerS float64 `json:"bytes_per_s,omitempty"`
	// CPUPercent is the CPU time of the driver and the server process
	// together over wall time; 100 is one core busy.
	CPUPercent float64 `json:"cpu_percent,omitempty"`
	// InProcess is set when the server runs in the driver's process (the
	// Go channel): `chanos bench` compares such a peer with chanos's local
	// interconnect only, and the others with chanos over ump.
	InProcess bool `json:"in_process,omitempty"`
	// TotalNs is the wall time of the whole measured run (clients: the
	// time for all clients to finish the fixed number of round trips).
	TotalNs int64 `json:"total_ns,omitempty"`
	// Note says how the peer was driven, where that needs saying.
	Note string `json:"note,omitempty"`
}

// WriteJSON writes r as one line of JSON.
func (r Result) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteTable writes results as a table for people, leaving out columns
// that no result fills.
func WriteTable(w io.Writer, rs []Result) error {
	head := []string{"suite", "case", "transport", "peers", "size", "clients", "iters",
		"p50", "p99", "msgs/s", "MB/s", "total", "cpu%", "note"}
	rows := [][]string{head}
	for _, r := range rs {
		rows = append(rows, []string{r.Suite, r.Case, r.Transport, r.Peers, FormatSize(r.Size),
			blankZero(r.Clients), fmt.Sprint(r.Iters), formatNs(r.RTTNsP50), formatNs(r.RTTNsP99),
			formatRate(r.MsgsPerS), formatRate(r.BytesPerS / 1e6), formatNs(r.TotalNs),
			formatPercent(r.CPUPercent), r.Note})
	}
	var keep []int
	for c := range head {
		for _, row := range rows[1:] {
			if row[c] != "" {
				keep = append(keep, c)
				break
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		var cells []string
		for _, c := range keep {
			cells = append(cells, row[c])
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

func blankZero(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

// FormatSize writes a byte count the way the suites name sizes: 8 B,
// 4 KiB, 1 MiB.
func FormatSize(n int) string {
	switch {
	case n == 0:
		return ""
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func formatNs(ns int64) string {
	if ns == 0 {
		return ""
	}
	d := time.Duration(ns)
	switch {
	case d < 10*time.Microsecond:
		return fmt.Sprintf("%.2fµs", float64(ns)/1e3)
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(ns)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func formatRate(v float64) string {
	switch {
	case v == 0:
		return ""
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func formatPercent(v float64) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf("%.0f", v)
}

// maxSize is the largest payload the suites accept.
const maxSize = 8 << 20

// ParseSizes parses a comma-separated list of sizes such as
// "8,64,4K,64KiB,1M" (K and M are powers of 1024).
func ParseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		num, mult := f, 1
		u := strings.ToUpper(f)
		for _, suf := range []struct {
			s string
			m int
		}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"K", 1 << 10}, {"M", 1 << 20}, {"B", 1}} {
			if strings.HasSuffix(u, suf.s) {
				num, mult = strings.TrimSpace(f[:len(f)-len(suf.s)]), suf.m
				break
			}
		}
		var n int
		if _, err := fmt.Sscanf(num, "%d", &n); err != nil || fmt.Sprint(n) != num {
			return nil, fmt.Errorf("bad size %q", f)
		}
		if n < 1 || n > maxSize/mult {
			return nil, fmt.Errorf("size %q out of range (1 B to 8 MiB)", f)
		}
		out = append(out, n*mult)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no sizes in %q", s)
	}
	return out, nil
}

// percentile returns the nearest-rank q-quantile (0 < q <= 1) of sorted.
func percentile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// latencies sorts samples and returns their median and 99th percentile.
func latencies(samples []int64) (p50, p99 int64) {
	slices.Sort(samples)
	return percentile(samples, 0.50), percentile(samples, 0.99)
}

func round1(v float64) float64 { return math.Round(v*10) / 10 }
