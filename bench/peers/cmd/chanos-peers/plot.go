package main

// The plot subcommand: `chanos-peers plot --out FILE` reads result lines
// (the JSON of `chanos bench --json` or `chanos-peers --json`) on stdin and
// writes a chart, PNG or SVG by FILE's extension. It lives here so that the
// core module never depends on a plotting library; `chanos bench --plot
// FILE` pipes its results to it.
//
// The chart has one panel per kind of figure in the input, stacked top to
// bottom in the order of `chanos bench all`: each suite varies something
// different (payload size, ring size, client count, or only the
// transport), so each gets the chart that puts its variable on an axis.

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// PlotCommand is the first argument that selects the plot subcommand.
const PlotCommand = "plot"

// The subcommand is dispatched before main, so that main's start-up (which
// reserves stdout for results) does not apply to it.
func init() {
	if len(os.Args) > 1 && os.Args[1] == PlotCommand {
		os.Exit(plotMain(os.Args[2:], os.Stdin, os.Stderr))
	}
}

// plotPoint is what the charts read of a result line. Figures are floats:
// chanos writes means with fractions of a nanosecond.
type plotPoint struct {
	Suite      string  `json:"suite"`
	Case       string  `json:"case"`
	Transport  string  `json:"transport"`
	Peers      string  `json:"peers"`
	Size       int     `json:"size"`
	Clients    int     `json:"clients"`
	Stages     int     `json:"stages"`
	Iters      float64 `json:"iters"`
	TotalNS    float64 `json:"total_ns"`
	RTTNsP50   float64 `json:"rtt_ns_p50"`
	RTTNsP99   float64 `json:"rtt_ns_p99"`
	RTTNsMean  float64 `json:"rtt_ns_mean"`
	MsgsPerS   float64 `json:"msgs_per_s"`
	BytesPerS  float64 `json:"bytes_per_s"`
	CPUPercent float64 `json:"cpu_percent"`
	InProcess  bool    `json:"in_process"`
}

// chanosTransports are the transports that are chanos itself: their lines
// are drawn solid and thick, the others' dashed.
var chanosTransports = []string{"ump", "local"}

// plotMain runs `chanos-peers plot` and returns the exit status: 0, 1 if
// the chart could not be made, 2 for bad usage.
func plotMain(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("chanos-peers plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "the chart to write: FILE.png or FILE.svg")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: chanos-peers plot --out FILE.png|FILE.svg < results.jsonl")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	err := plotFile(*out, stdin, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "chanos-peers plot:", err)
		return 1
	}
	return 0
}

// plotFile reads result lines from r and writes their chart to file.
// Suites it has no chart for are named on stderr and otherwise ignored, so
// that a run of several suites still gets a chart of those it knows.
func plotFile(file string, r io.Reader, stderr io.Writer) error {
	// Check the extension before reading: a wrong one is a mistake in the
	// command, not in the data.
	if _, err := newCanvas(file, vg.Centimeter, vg.Centimeter); err != nil {
		return err
	}
	points, err := readPoints(r)
	if err != nil {
		return err
	}
	panels, unknown, err := buildPanels(points)
	if err != nil {
		return err
	}
	if len(panels) == 0 {
		return fmt.Errorf("no results to plot on stdin (suites with a chart: %s)", strings.Join(suiteOrder, ", "))
	}
	if len(unknown) > 0 {
		fmt.Fprintf(stderr, "chanos-peers plot: no chart for suite %s: left out\n", strings.Join(unknown, ", "))
	}
	return writeChart(file, panels)
}

// readPoints decodes result lines, skipping blank ones.
func readPoints(r io.Reader) ([]plotPoint, error) {
	var ps []plotPoint
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var p plotPoint
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			return nil, fmt.Errorf("stdin line %d: %w", n, err)
		}
		ps = append(ps, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading stdin: %w", err)
	}
	return ps, nil
}

// A panel is one chart of the image: a plot and its legend, which is
// drawn beside the plot rather than over its data.
type panel struct {
	plot   *plot.Plot
	legend plot.Legend
	height vg.Length
}

// suiteOrder is the order of the panels, that of `chanos bench all`.
var suiteOrder = []string{"pingpong", "stream", "rpc", "ump", "bind", "clients", "ring"}

// suitePanels makes a suite's panels from its results.
var suitePanels = map[string]func(*styles, []plotPoint) ([]panel, error){
	"pingpong": pingpongPanels,
	"stream":   streamPanels,
	"rpc":      rpcPanels,
	"ump":      umpPanels,
	"bind":     bindPanels,
	"clients":  clientsPanels,
	"ring":     ringPanels,
}

// buildPanels returns the panels of points' suites, in suiteOrder, and the
// suites that have no chart, in order of appearance.
func buildPanels(points []plotPoint) ([]panel, []string, error) {
	bySuite := map[string][]plotPoint{}
	var unknown []string
	for _, p := range points {
		if _, ok := suitePanels[p.Suite]; !ok && !slices.Contains(unknown, p.Suite) {
			unknown = append(unknown, p.Suite)
		}
		bySuite[p.Suite] = append(bySuite[p.Suite], p)
	}
	// One styles for the whole image, so that a transport has the same
	// colour and marker in every panel.
	st := &styles{}
	var panels []panel
	for _, s := range suiteOrder {
		if len(bySuite[s]) == 0 {
			continue
		}
		ps, err := suitePanels[s](st, bySuite[s])
		if err != nil {
			return nil, nil, fmt.Errorf("suite %s: %w", s, err)
		}
		panels = append(panels, ps...)
	}
	return panels, unknown, nil
}

// The panels of each suite.

// where splits the comparison suites' panels by where the two sides of a
// case run, so that chanos's local interconnect and the Go channel, in one
// process, are drawn apart from ump and the peers between processes: a
// chart of the two together would invite the ratio of unlike cases.
var where = []struct {
	inProcess   bool
	name, cases string
}{
	{false, "between processes", "case rtt; raw ring: rtt-spin"},
	{true, "in one process", "case rtt"},
}

func pingpongPanels(st *styles, points []plotPoint) ([]panel, error) {
	var out []panel
	for _, w := range where {
		ss := collect(points, chanosLabel, func(p plotPoint) (float64, float64) {
			if p.Case != "rtt" && p.Case != "rtt-spin" || p.InProcess != w.inProcess {
				return 0, 0
			}
			return float64(p.Size), p.RTTNsP50 / 1e3
		})
		ps, err := linePanels(st, ss, lineSpec{
			title:  "pingpong: round trip p50 by payload size, " + w.name + " (" + w.cases + ")",
			xLabel: "payload size, bytes",
			yLabel: "round trip p50, µs",
			xLog:   true,
			xTick:  sizeName,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	return out, nil
}

func streamPanels(st *styles, points []plotPoint) ([]panel, error) {
	var out []panel
	for _, w := range where {
		ss := collect(points, chanosLabel, func(p plotPoint) (float64, float64) {
			if p.Case != "stream" || p.InProcess != w.inProcess {
				return 0, 0
			}
			return float64(p.Size), p.BytesPerS / 1e6
		})
		ps, err := linePanels(st, ss, lineSpec{
			title:  "stream: one-way throughput by message size, " + w.name,
			xLabel: "message size, bytes",
			yLabel: "throughput, MB/s",
			xLog:   true,
			xTick:  sizeName,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, ps...)
	}
	return out, nil
}

func rpcPanels(st *styles, points []plotPoint) ([]panel, error) {
	var rtt, msgs []dotRow
	for _, p := range points {
		switch {
		case p.Case == "rtt-spin":
			rtt = append(rtt, rttRow("raw ring round trip (rtt-spin)", chanosLabel(p)+" "+p.Peers, p))
		case p.Case == "rpc" && p.InProcess:
			rtt = append(rtt, rttRow("in one process: chanos local, Go channel", chanosLabel(p)+" "+p.Peers, p))
		case p.Case == "rpc" && slices.Contains(chanosTransports, p.Transport):
			rtt = append(rtt, rttRow("chanos rpc over ump (generated stubs)", chanosLabel(p)+" "+p.Peers, p))
		case p.Case == "rpc":
			rtt = append(rtt, rttRow("peers' rpc, between processes", p.Transport, p))
		case p.Case == "send-receive" && p.MsgsPerS > 0:
			msgs = append(msgs, dotRow{group: "send-receive", label: p.Transport + " " + p.Peers, value: p.MsgsPerS / 1e6})
		}
	}
	var out []panel
	for _, d := range []dotSpec{
		{title: "rpc: round trip of an 8-byte rpc, by transport", xLabel: "round trip, µs", stat: "p50", unit: "µs", rows: rtt},
		{title: "rpc: one-way local messages (case send-receive)", xLabel: "million messages/s", unit: "M/s", rows: msgs},
	} {
		if len(d.rows) == 0 {
			continue
		}
		pn, err := dotPanel(d)
		if err != nil {
			return nil, err
		}
		out = append(out, pn)
	}
	return out, nil
}

func umpPanels(st *styles, points []plotPoint) ([]panel, error) {
	var rtt, idle []dotRow
	for _, p := range points {
		label := p.Transport + " " + p.Peers
		switch {
		case p.Case == "rtt-spin":
			rtt = append(rtt, rttRow("rtt-spin: spinning", label, p))
		case p.Case == "rtt-parked":
			rtt = append(rtt, rttRow("rtt-parked: parked, woken by the kernel", label, p))
		case p.Case == "idle-cpu" && p.CPUPercent >= 0:
			idle = append(idle, dotRow{group: "idle-cpu", label: label, value: p.CPUPercent})
		}
	}
	var out []panel
	if len(rtt) > 0 {
		pn, err := dotPanel(dotSpec{title: "ump: round trip of 8 bytes, by transport and peers (client-server)", xLabel: "round trip, µs", stat: "p50", unit: "µs", rows: rtt})
		if err != nil {
			return nil, err
		}
		out = append(out, pn)
	}
	ss := collect(points, func(p plotPoint) string { return p.Transport + " " + p.Peers }, func(p plotPoint) (float64, float64) {
		if p.Case != "stream" {
			return 0, 0
		}
		return float64(p.Size), p.BytesPerS / 1e6
	})
	ls, err := linePanels(st, ss, lineSpec{
		title:  "ump: one-way stream throughput by message size",
		xLabel: "message size, bytes",
		yLabel: "throughput, MB/s",
		xLog:   true,
		xTick:  sizeName,
	})
	if err != nil {
		return nil, err
	}
	out = append(out, ls...)
	if len(idle) > 0 {
		pn, err := dotPanel(dotSpec{title: "ump: CPU of an idle connection (case idle-cpu)", xLabel: "CPU, % of one core", unit: "%", rows: idle})
		if err != nil {
			return nil, err
		}
		out = append(out, pn)
	}
	return out, nil
}

// bindCases names the bind suite's cases on the chart.
var bindCases = map[string]string{
	"connect": "connect by name",
	"ns-get":  "nameservice get",
}

func bindPanels(st *styles, points []plotPoint) ([]panel, error) {
	var rows []dotRow
	for _, p := range points {
		label := bindCases[p.Case]
		if label == "" {
			label = p.Case
		}
		rows = append(rows, rttRow("bind", label+" ("+p.Transport+" "+p.Peers+")", p))
	}
	pn, err := dotPanel(dotSpec{title: "bind: connect by name (lookup, bind, ring setup) and nameservice get", xLabel: "latency, µs", stat: "p50", unit: "µs", rows: rows})
	if err != nil {
		return nil, err
	}
	return []panel{pn}, nil
}

func clientsPanels(st *styles, points []plotPoint) ([]panel, error) {
	ss := collect(points, func(p plotPoint) string {
		return p.Transport + ", " + clientServer(p.Peers)
	}, func(p plotPoint) (float64, float64) {
		// The clients share the round trips: the figure is the wall time
		// of the run over all of them, what the seed's Figure 4.18 shows.
		// chanos writes it as the mean; the peers as msgs/s.
		var v float64
		switch {
		case p.TotalNS > 0 && p.Iters > 0:
			v = p.TotalNS / p.Iters
		case p.MsgsPerS > 0:
			v = 1e9 / p.MsgsPerS
		default:
			v = p.RTTNsMean
		}
		return float64(p.Clients), v / 1e3
	})
	return linePanels(st, ss, lineSpec{
		title:  "clients: time per round trip by number of client processes",
		xLabel: "client processes sharing the round trips",
		yLabel: "wall time / all round trips, µs",
		xTick:  strconv.Itoa,
	})
}

func ringPanels(st *styles, points []plotPoint) ([]panel, error) {
	ss := collect(points, chanosLabel, func(p plotPoint) (float64, float64) {
		if p.Stages <= 0 {
			return 0, 0
		}
		return float64(p.Stages), p.RTTNsP50 / float64(p.Stages) / 1e3
	})
	return linePanels(st, ss, lineSpec{
		title:  "ring: time per hop by ring size (trip p50 / stages)",
		xLabel: "stages in the ring: processes, goroutines for go-chan",
		yLabel: "per hop, µs",
		xLog:   true, // 2, 4, 8: evenly spaced
		xTick:  strconv.Itoa,
	})
}

// chanosLabel names a series by its transport, saying which are chanos.
func chanosLabel(p plotPoint) string {
	switch {
	case p.Case == "rtt-spin":
		return "raw ring " + p.Transport
	case slices.Contains(chanosTransports, p.Transport):
		return "chanos " + p.Transport
	}
	return p.Transport
}

// clientServer spells out a clients suite's peers, which are the client's
// language then the server's (docs/benchmarks.md).
func clientServer(peers string) string {
	c, s, ok := strings.Cut(peers, "-")
	if !ok {
		return peers
	}
	lang := func(l string) string {
		switch l {
		case "go":
			return "Go"
		case "c":
			return "C"
		}
		return l
	}
	return lang(c) + " clients, " + lang(s) + " server"
}

// Line panels.

// series is one line of a line panel.
type series struct {
	label  string
	chanos bool
	xy     plotter.XYs
}

// collect groups the points for which xy returns positive coordinates
// into series labelled by label, in order of first appearance, each
// sorted by x.
func collect(points []plotPoint, label func(plotPoint) string, xy func(plotPoint) (float64, float64)) []*series {
	var out []*series
	byLabel := map[string]*series{}
	for _, p := range points {
		x, y := xy(p)
		if x <= 0 || y <= 0 {
			continue
		}
		l := label(p)
		s := byLabel[l]
		if s == nil {
			s = &series{label: l, chanos: slices.Contains(chanosTransports, p.Transport)}
			byLabel[l] = s
			out = append(out, s)
		}
		s.xy = append(s.xy, plotter.XY{X: x, Y: y})
	}
	for _, s := range out {
		slices.SortFunc(s.xy, func(a, b plotter.XY) int {
			switch {
			case a.X < b.X:
				return -1
			case a.X > b.X:
				return 1
			}
			return 0
		})
	}
	return out
}

// lineSpec describes a line panel: x takes the values present in the data,
// each labelled by xTick.
type lineSpec struct {
	title, xLabel, yLabel string
	xLog                  bool
	xTick                 func(int) string
}

// lineHeight is the height of a line panel.
const lineHeight = 12 * vg.Centimeter

// linePanels returns a line panel of ss, or none if ss is empty.
func linePanels(st *styles, ss []*series, spec lineSpec) ([]panel, error) {
	if len(ss) == 0 {
		return nil, nil
	}
	p := newPlot(spec.title)
	var xs, ys []float64
	for _, s := range ss {
		for _, xy := range s.xy {
			xs = append(xs, xy.X)
			ys = append(ys, xy.Y)
		}
	}
	slices.Sort(xs)
	xs = slices.Compact(xs)
	var ticks []plot.Tick
	for _, x := range xs {
		ticks = append(ticks, plot.Tick{Value: x, Label: spec.xTick(int(x))})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	p.X.Label.Text = axisLabel(spec.xLabel, spec.xLog, "")
	if spec.xLog {
		p.X.Scale = plot.LogScale{}
	}
	if len(xs) == 1 {
		// A single x would make an empty range.
		p.X.Min, p.X.Max = xs[0]/2, xs[0]*2
	}
	p.Y.Label.Text = axisLabel(spec.yLabel, setValueAxis(&p.Y, ys), "")
	p.Add(plotter.NewGrid())
	legend := newLegend()
	for _, s := range ss {
		line, points, err := plotter.NewLinePoints(s.xy)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", spec.title, s.label, err)
		}
		c, shape := st.of(s.label)
		line.Color = c
		points.Color = c
		points.Shape = shape
		points.Radius = vg.Points(3.5)
		if s.chanos {
			line.Width = vg.Points(2.5)
		} else {
			line.Width = vg.Points(1.2)
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(line, points)
		legend.Add(s.label, line, points)
	}
	return []panel{{plot: p, legend: legend, height: lineHeight}}, nil
}

// Dot panels: one row per case, for the suites whose cases differ only by
// transport. Bars would need a linear axis, on which the fast transports
// vanish beside the slow ones; dots on a log axis show both.

// dotRow is a row of a dot panel: value is drawn as a dot, and p99, if
// larger, as a whisker from it.
type dotRow struct {
	group, label string
	value, p99   float64
}

// dotSpec describes a dot panel. Rows are drawn top to bottom in order,
// coloured by group. The values are written beside the dots, after stat
// (which figure they are, if it needs saying) and followed by unit.
type dotSpec struct {
	title, xLabel, stat, unit string
	rows                      []dotRow
}

// rttRow is the row of a round-trip result, in µs.
func rttRow(group, label string, p plotPoint) dotRow {
	return dotRow{group: group, label: label, value: p.RTTNsP50 / 1e3, p99: p.RTTNsP99 / 1e3}
}

// dotPanel returns the dot panel of spec.
func dotPanel(spec dotSpec) (panel, error) {
	p := newPlot(spec.title)
	var xs []float64
	note := ""
	for _, r := range spec.rows {
		xs = append(xs, r.value, max(r.value, r.p99))
		if r.p99 > r.value {
			note = "dot: p50, whisker: to p99"
		}
	}
	logX := setValueAxis(&p.X, xs)
	p.X.Label.Text = axisLabel(spec.xLabel, logX, note)
	// A log axis has no place for zero; a linear one starts at it.
	rows := slices.DeleteFunc(slices.Clone(spec.rows), func(r dotRow) bool {
		return r.value < 0 || logX && r.value == 0
	})
	if len(rows) == 0 {
		return panel{}, fmt.Errorf("%s: no figures to draw", spec.title)
	}
	n := len(rows)
	var groups []string
	byGroup := map[string][]int{}
	names := make([]string, n)
	for i, r := range rows {
		if _, ok := byGroup[r.group]; !ok {
			groups = append(groups, r.group)
		}
		byGroup[r.group] = append(byGroup[r.group], i)
		// Row 0 at the top.
		names[n-1-i] = r.label
	}
	p.NominalY(names...)
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	p.Add(plotter.NewGrid())
	legend := newLegend()
	for gi, g := range groups {
		c := palette[gi%len(palette)]
		var dots, whiskerAt plotter.XYs
		var whiskers plotter.XErrors
		var labels []string
		for _, i := range byGroup[g] {
			r := rows[i]
			y := float64(n - 1 - i)
			dots = append(dots, plotter.XY{X: r.value, Y: y})
			labels = append(labels, strings.TrimSpace(spec.stat+" "+formatValue(r.value)+" "+spec.unit))
			if r.p99 > r.value {
				whiskerAt = append(whiskerAt, plotter.XY{X: r.value, Y: y})
				whiskers = append(whiskers, struct{ Low, High float64 }{0, r.p99 - r.value})
			}
		}
		if len(whiskers) > 0 {
			p.Add(&plotter.XErrorBars{
				XYs:       whiskerAt,
				XErrors:   whiskers,
				LineStyle: draw.LineStyle{Color: c, Width: vg.Points(1.2)},
				CapWidth:  vg.Points(7),
			})
		}
		sc, err := plotter.NewScatter(dots)
		if err != nil {
			return panel{}, fmt.Errorf("%s: %s: %w", spec.title, g, err)
		}
		sc.Color = c
		sc.Shape = draw.CircleGlyph{}
		sc.Radius = vg.Points(4.5)
		p.Add(sc)
		// The value beside each dot, above its row line, so that the
		// figure can be read without the log axis.
		tl, err := plotter.NewLabels(plotter.XYLabels{XYs: dots, Labels: labels})
		if err != nil {
			return panel{}, fmt.Errorf("%s: %s: %w", spec.title, g, err)
		}
		for i := range tl.TextStyle {
			tl.TextStyle[i].Font.Size = vg.Points(9)
			tl.TextStyle[i].Color = color.Gray{Y: 0x30}
		}
		tl.Offset = vg.Point{X: vg.Points(6), Y: vg.Points(4)}
		p.Add(tl)
		if len(groups) > 1 {
			legend.Add(g, sc)
		}
	}
	height := 4*vg.Centimeter + vg.Length(n)*0.9*vg.Centimeter
	return panel{plot: p, legend: legend, height: height}, nil
}

// Axes and styles.

// newPlot returns a plot with the common settings.
func newPlot(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(14)
	p.Title.Padding = vg.Points(8)
	return p
}

// newLegend returns a legend for the strip beside a plot.
func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.Left, l.Top = true, true
	l.ThumbnailWidth = vg.Points(28)
	l.Padding = vg.Points(3)
	l.TextStyle.Font.Size = vg.Points(11)
	return l
}

// setValueAxis sets the range, scale and ticks of the axis of a figure from
// its values vs. Values spanning more than a decade go on a log scale,
// where the fast and the slow can both be read; others on a linear one from
// zero, where ratios can be seen. It returns whether the scale is log.
func setValueAxis(a *plot.Axis, vs []float64) bool {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if v > 0 {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 1, 10
	}
	if hi/lo > 10 {
		lo, hi = lo/1.2, hi*1.2
		t := logTicks{fine: math.Log10(hi/lo) <= 3}
		if t.fine {
			// Out to the next labelled ticks, at most 2.5 times further,
			// so that both ends of the axis have a figure.
			lo, hi = t.below(lo), t.above(hi)
		}
		a.Scale = plot.LogScale{}
		a.Tick.Marker = t
		a.Min, a.Max = lo, hi
		return true
	}
	a.Min, a.Max = 0, hi*1.1
	a.Tick.Marker = linearTicks{}
	return false
}

// linearTicks are gonum's default ticks without its trailing zeros
// ("25.00").
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = formatTick(t.Value)
		}
	}
	return ticks
}

// axisLabel is an axis's label: text, the scale if log, then note.
func axisLabel(text string, log bool, note string) string {
	if log {
		text += " (log)"
	}
	if note != "" {
		text += "; " + note
	}
	return text
}

// logTicks labels a log axis at 1, 2 and 5 times powers of ten if fine
// (for axes of few decades), else at powers of ten; gonum's LogTicks
// labels only powers of ten, so a range such as 13 to 90 would have no
// label.
type logTicks struct{ fine bool }

// labelled returns the multipliers of powers of ten that are labelled.
func (t logTicks) labelled() []float64 {
	if t.fine {
		return []float64{1, 2, 5}
	}
	return []float64{1}
}

// below returns the largest labelled tick at or below v.
func (t logTicks) below(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	out := p
	for _, m := range t.labelled() {
		if m*p <= v {
			out = m * p
		}
	}
	return out
}

// above returns the smallest labelled tick at or above v.
func (t logTicks) above(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range t.labelled() {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func (t logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	labelled := t.labelled()
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for m := 1; m < 10; m++ {
			v := float64(m) * math.Pow(10, e)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			tick := plot.Tick{Value: v}
			if slices.Contains(labelled, float64(m)) {
				tick.Label = formatTick(v)
			}
			ticks = append(ticks, tick)
		}
	}
	return ticks
}

// formatValue writes v with three significant digits at most, without an
// exponent for the magnitudes on the charts.
func formatValue(v float64) string {
	if v == 0 {
		return "0"
	}
	digits := int(math.Floor(math.Log10(math.Abs(v))))
	prec := max(0, 2-digits)
	scale := math.Pow(10, float64(digits-2))
	return strconv.FormatFloat(math.Round(v/scale)*scale, 'f', prec, 64)
}

// formatTick writes a tick's value without trailing zeros.
func formatTick(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// sizeName writes a byte count as the suites' tables do.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// palette is Tableau 10, its yellow, pink and grey darkened to be seen on
// white: more distinct colours than gonum's seven, so that the ten
// transports of pingpong each get their own.
var palette = []color.Color{
	color.RGBA{0x4e, 0x79, 0xa7, 0xff}, color.RGBA{0xf2, 0x8e, 0x2b, 0xff},
	color.RGBA{0xe1, 0x57, 0x59, 0xff}, color.RGBA{0x76, 0xb7, 0xb2, 0xff},
	color.RGBA{0x59, 0xa1, 0x4f, 0xff}, color.RGBA{0xc9, 0xa2, 0x1a, 0xff},
	color.RGBA{0xb0, 0x7a, 0xa1, 0xff}, color.RGBA{0xe8, 0x6f, 0x9a, 0xff},
	color.RGBA{0x9c, 0x75, 0x5f, 0xff}, color.RGBA{0x70, 0x70, 0x70, 0xff},
}

var shapes = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.BoxGlyph{}, draw.TriangleGlyph{}, draw.PyramidGlyph{},
	draw.RingGlyph{}, draw.SquareGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{},
}

// styles gives each series label a colour and marker, the same in every
// panel of an image.
type styles struct{ labels []string }

func (st *styles) of(label string) (color.Color, draw.GlyphDrawer) {
	i := slices.Index(st.labels, label)
	if i < 0 {
		i = len(st.labels)
		st.labels = append(st.labels, label)
	}
	return palette[i%len(palette)], shapes[i%len(shapes)]
}

// Layout.

const (
	chartWidth = 26 * vg.Centimeter
	chartDPI   = 110
	panelGap   = 8 * vg.Millimeter
	chartPad   = 4 * vg.Millimeter
	legendGap  = 5 * vg.Millimeter
)

// chartHeight is the height of the image of panels.
func chartHeight(panels []panel) vg.Length {
	h := 2*chartPad + vg.Length(max(len(panels)-1, 0))*panelGap
	for _, p := range panels {
		h += p.height
	}
	return h
}

// newCanvas returns the canvas for file, by its extension.
func newCanvas(file string, w, h vg.Length) (vg.CanvasWriterTo, error) {
	switch ext := strings.ToLower(filepath.Ext(file)); ext {
	case ".png":
		return vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(chartDPI))}, nil
	case ".svg":
		return vgsvg.New(w, h), nil
	}
	return nil, fmt.Errorf("%s: the extension must be .png or .svg", file)
}

// writeChart draws panels one above the other, each with its legend in a
// strip on its right, and writes the image to file.
func writeChart(file string, panels []panel) error {
	height := chartHeight(panels)
	canvas, err := newCanvas(file, chartWidth, height)
	if err != nil {
		return err
	}
	dc := draw.New(canvas)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	// One legend width for all panels, so that their plots line up.
	var legendW vg.Length
	for i := range panels {
		if w := panels[i].legend.Rectangle(dc).Size().X; w > legendW {
			legendW = w
		}
	}
	if legendW > 0 {
		legendW += legendGap
	}
	top := dc.Max.Y - chartPad
	for i := range panels {
		pn := &panels[i]
		c := dc
		c.Min = vg.Point{X: dc.Min.X + chartPad, Y: top - pn.height}
		c.Max = vg.Point{X: dc.Max.X - chartPad, Y: top}
		pc := draw.Crop(c, 0, -legendW, 0, 0)
		pn.plot.Draw(pc)
		lc := c
		lc.Min.X = pc.Max.X + legendGap
		// Below the title, level with the top of the data.
		lc.Max.Y -= pn.plot.Title.TextStyle.Rectangle(pn.plot.Title.Text).Size().Y + pn.plot.Title.Padding + vg.Points(4)
		pn.legend.Draw(lc)
		top -= pn.height + panelGap
	}
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("creating the chart: %w", err)
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return nil
}
