package main

// The plot subcommand: `chanos-peers plot --out FILE` reads result lines
// (the JSON of `chanos bench --json` or `chanos-peers --json`) on stdin and
// writes a chart, PNG or SVG by FILE's extension. It lives here so that the
// core module never depends on a plotting library; `chanos bench --plot
// FILE` pipes its results to it.

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
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

// plotPoint is what the charts read of a result line. Round-trip times
// are floats: chanos writes means with fractions of a nanosecond.
type plotPoint struct {
	Suite     string  `json:"suite"`
	Case      string  `json:"case"`
	Transport string  `json:"transport"`
	Peers     string  `json:"peers"`
	Size      int     `json:"size"`
	RTTNsP50  float64 `json:"rtt_ns_p50"`
	BytesPerS float64 `json:"bytes_per_s"`
}

// chanosTransports are the transports that are chanos itself.
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
	points, err := readPoints(stdin)
	if err == nil {
		err = writeChart(*out, points)
	}
	if err != nil {
		fmt.Fprintln(stderr, "chanos-peers plot:", err)
		return 1
	}
	return 0
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

// series is one line of a chart: a label and its points by size.
type series struct {
	label  string
	chanos bool
	xy     plotter.XYs
}

// collect groups the points that value accepts (returning a positive
// value) into series labelled by label, in order of first appearance.
func collect(points []plotPoint, label func(plotPoint) string, value func(plotPoint) float64) []*series {
	var out []*series
	byLabel := map[string]*series{}
	for _, p := range points {
		v := value(p)
		if v <= 0 || p.Size <= 0 {
			continue
		}
		l := label(p)
		s := byLabel[l]
		if s == nil {
			s = &series{label: l, chanos: slices.Contains(chanosTransports, p.Transport)}
			byLabel[l] = s
			out = append(out, s)
		}
		s.xy = append(s.xy, plotter.XY{X: float64(p.Size), Y: v})
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

func label(p plotPoint) string {
	switch {
	case p.Case == "rtt-spin":
		return fmt.Sprintf("raw ring %s %s", p.Transport, p.Peers)
	case slices.Contains(chanosTransports, p.Transport):
		return "chanos " + p.Transport
	}
	return p.Transport
}

// rttChart is round-trip p50 by payload size; streamChart is one-way
// throughput by message size. Both are log-log.
func rttChart(points []plotPoint) []*series {
	return collect(points, label, func(p plotPoint) float64 {
		if p.Case != "rtt" && p.Case != "rtt-spin" {
			return 0
		}
		return p.RTTNsP50 / 1e3
	})
}

func streamChart(points []plotPoint) []*series {
	return collect(points, label, func(p plotPoint) float64 {
		if p.Case != "stream" || p.Suite == "ump" {
			return 0
		}
		return p.BytesPerS / 1e6
	})
}

func newPlot(title, ylabel string, ss []*series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "payload size, bytes (log)"
	p.Y.Label.Text = ylabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for i, s := range ss {
		line, points, err := plotter.NewLinePoints(s.xy)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", title, s.label, err)
		}
		line.Color = plotutil.Color(i)
		points.Color = line.Color
		points.Shape = plotutil.Shape(i)
		points.Radius = vg.Points(3)
		if s.chanos {
			line.Width = vg.Points(2.5)
		} else {
			line.Dashes = plotutil.Dashes(1)
		}
		p.Add(line, points)
		p.Legend.Add(s.label, line, points)
	}
	return p, nil
}

// writeChart writes the charts that points have data for to file, one
// above the other.
func writeChart(file string, points []plotPoint) error {
	var plots []*plot.Plot
	if ss := rttChart(points); len(ss) > 0 {
		p, err := newPlot("Round trip p50 by payload size (case rtt)", "round trip p50, µs (log)", ss)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	if ss := streamChart(points); len(ss) > 0 {
		p, err := newPlot("One-way stream throughput by message size", "MB/s, 10^6 bytes/s (log)", ss)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	if len(plots) == 0 {
		return errors.New("no round-trip (case rtt) or stream results to plot on stdin")
	}
	width, height := 20*vg.Centimeter, vg.Length(len(plots))*14*vg.Centimeter
	var canvas vg.CanvasWriterTo
	switch ext := strings.ToLower(filepath.Ext(file)); ext {
	case ".png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(120))}
	case ".svg":
		canvas = vgsvg.New(width, height)
	default:
		return fmt.Errorf("%s: the extension must be .png or .svg", file)
	}
	dc := draw.New(canvas)
	rows := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3,
		PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3, PadY: vg.Millimeter * 6}
	for i, cs := range plot.Align(rows, tiles, dc) {
		plots[i].Draw(cs[0])
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := canvas.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return f.Close()
}
