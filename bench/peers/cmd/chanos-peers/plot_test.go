package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
)

// samples are result lines of real runs on the team's machine
// (`chanos bench SUITE --quick --json`, ring without --quick so that it
// has 8 stages; the clients lines for uds are from `chanos-peers clients
// --quick --json`), some cases left out for length: chanos's lines have
// float figures, the peers' integers and notes; the cases within one
// process (local, go-chan, memcpy) carry in_process, as runs write it.
var samples = map[string]string{
	"pingpong": `{"suite":"pingpong","case":"rtt-spin","transport":"ump","peers":"go-go","size":8,"iters":10000,"runs":1,"rtt_ns_p50":22943,"rtt_ns_p99":236140,"rtt_ns_mean":31338.0787}
{"suite":"pingpong","case":"rtt","transport":"ump","peers":"go-go","size":8,"iters":3295,"runs":1,"rtt_ns_p50":22341,"rtt_ns_p99":68187,"rtt_ns_mean":24286.97147192716}
{"suite":"pingpong","case":"rtt","transport":"local","peers":"go","size":8,"iters":19688,"runs":1,"rtt_ns_p50":2425,"rtt_ns_p99":42159,"rtt_ns_mean":4063.391101178383,"in_process":true}
{"suite":"pingpong","case":"rtt","transport":"ump","peers":"go-go","size":4096,"iters":893,"runs":1,"rtt_ns_p50":42880,"rtt_ns_p99":970495,"rtt_ns_mean":89634.71220604703}
{"suite":"pingpong","case":"rtt","transport":"local","peers":"go","size":4096,"iters":4472,"runs":1,"rtt_ns_p50":7324,"rtt_ns_p99":147215,"rtt_ns_mean":18245.218470483007,"in_process":true}
{"suite":"pingpong","case":"rtt","transport":"ump","peers":"go-go","size":65536,"iters":140,"runs":1,"rtt_ns_p50":290662,"rtt_ns_p99":5937425,"rtt_ns_mean":588139.3642857143}
{"suite":"pingpong","case":"rtt","transport":"local","peers":"go","size":65536,"iters":368,"runs":1,"rtt_ns_p50":61124,"rtt_ns_p99":3479987,"rtt_ns_mean":218977.71467391305,"in_process":true}
{"suite":"pingpong","case":"rtt","transport":"uds","peers":"go-go","size":8,"iters":2542,"rtt_ns_p50":25819,"rtt_ns_p99":113973,"cpu_percent":90}
{"suite":"pingpong","case":"rtt","transport":"uds","peers":"go-go","size":4096,"iters":1469,"rtt_ns_p50":35877,"rtt_ns_p99":190246,"cpu_percent":92.5}
{"suite":"pingpong","case":"rtt","transport":"uds","peers":"go-go","size":65536,"iters":484,"rtt_ns_p50":143277,"rtt_ns_p99":588489,"cpu_percent":82.6}
{"suite":"pingpong","case":"rtt","transport":"go-chan","peers":"go-go","size":8,"iters":84934,"rtt_ns_p50":772,"rtt_ns_p99":1093,"cpu_percent":99.6,"in_process":true}
{"suite":"pingpong","case":"rtt","transport":"go-chan","peers":"go-go","size":4096,"iters":64203,"rtt_ns_p50":992,"rtt_ns_p99":1333,"cpu_percent":96.7,"in_process":true}
{"suite":"pingpong","case":"rtt","transport":"go-chan","peers":"go-go","size":65536,"iters":13985,"rtt_ns_p50":4187,"rtt_ns_p99":63960,"cpu_percent":100,"in_process":true}
{"suite":"pingpong","case":"rtt","transport":"grpc-uds","peers":"go-go","size":8,"iters":477,"rtt_ns_p50":163395,"rtt_ns_p99":419935,"cpu_percent":99.9}
{"suite":"pingpong","case":"rtt","transport":"grpc-uds","peers":"go-go","size":4096,"iters":447,"rtt_ns_p50":157023,"rtt_ns_p99":631659,"cpu_percent":98.6}
{"suite":"pingpong","case":"rtt","transport":"grpc-uds","peers":"go-go","size":65536,"iters":87,"rtt_ns_p50":699135,"rtt_ns_p99":3125735,"cpu_percent":98.5}
`,
	"stream": `{"suite":"stream","case":"stream","transport":"ump","peers":"go-go","size":64,"iters":32512,"runs":1,"msgs_per_s":391276.38045182143,"bytes_per_s":25041688.34891657}
{"suite":"stream","case":"stream","transport":"local","peers":"go","size":64,"iters":56422,"runs":1,"msgs_per_s":705139.7894453738,"bytes_per_s":45128946.524503924,"in_process":true}
{"suite":"stream","case":"stream","transport":"ump","peers":"go-go","size":65536,"iters":312,"runs":1,"msgs_per_s":3607.8742549436115,"bytes_per_s":236445647.17198452}
{"suite":"stream","case":"stream","transport":"local","peers":"go","size":65536,"iters":1231,"runs":1,"msgs_per_s":15344.995513302816,"bytes_per_s":1005649625.9598134,"in_process":true}
{"suite":"stream","case":"stream","transport":"ump","peers":"go-go","size":1048576,"iters":45,"runs":1,"msgs_per_s":530.5014896599719,"bytes_per_s":556271130.0216947}
{"suite":"stream","case":"stream","transport":"local","peers":"go","size":1048576,"iters":91,"runs":1,"msgs_per_s":1115.147113086934,"bytes_per_s":1169316499.252245,"in_process":true}
{"suite":"stream","case":"stream","transport":"uds","peers":"go-go","size":64,"iters":14352,"total_ns":80210652,"msgs_per_s":178928.9,"bytes_per_s":11451446.6,"cpu_percent":80.8}
{"suite":"stream","case":"stream","transport":"uds","peers":"go-go","size":65536,"iters":1130,"total_ns":80197886,"msgs_per_s":14090.1,"bytes_per_s":923411871.5,"cpu_percent":92.1}
{"suite":"stream","case":"stream","transport":"uds","peers":"go-go","size":1048576,"iters":149,"total_ns":80146492,"msgs_per_s":1859.1,"bytes_per_s":1949403150.4,"cpu_percent":85.6}
{"suite":"stream","case":"stream","transport":"shmipc-go","peers":"go-go","size":64,"iters":104976,"total_ns":80437546,"msgs_per_s":1305062.2,"bytes_per_s":83523980.2,"cpu_percent":95.4}
{"suite":"stream","case":"stream","transport":"shmipc-go","peers":"go-go","size":65536,"iters":2229,"total_ns":82342454,"msgs_per_s":27069.9,"bytes_per_s":1774051378.2,"cpu_percent":93.3}
{"suite":"stream","case":"stream","transport":"shmipc-go","peers":"go-go","size":1048576,"iters":45,"total_ns":84279548,"msgs_per_s":533.9,"bytes_per_s":559873909.1,"cpu_percent":95.3}
`,
	"rpc": `{"suite":"rpc","case":"rtt-spin","transport":"ump","peers":"go-go","size":8,"iters":100000,"runs":1,"rtt_ns_p50":21901,"rtt_ns_p99":80991,"rtt_ns_mean":24288.55948}
{"suite":"rpc","case":"rpc","transport":"ump","peers":"go-go","size":8,"iters":20000,"runs":1,"rtt_ns_p50":21630,"rtt_ns_p99":89788,"rtt_ns_mean":24387.48305}
{"suite":"rpc","case":"rpc","transport":"local","peers":"go","size":8,"iters":20000,"runs":1,"rtt_ns_p50":2605,"rtt_ns_p99":67566,"rtt_ns_mean":4596.7601,"in_process":true}
{"suite":"rpc","case":"send-receive","transport":"local","peers":"go","size":8,"iters":100000,"runs":1,"msgs_per_s":1983666.9229630453,"in_process":true}
{"suite":"rpc","case":"send-receive","transport":"go-chan","peers":"go","size":8,"iters":100000,"runs":1,"msgs_per_s":5815883.888437157,"in_process":true}
{"suite":"rpc","case":"rpc","transport":"uds","peers":"go-go","size":8,"iters":1653,"rtt_ns_p50":33012,"rtt_ns_p99":136214,"cpu_percent":102.6}
{"suite":"rpc","case":"rpc","transport":"tcp","peers":"go-go","size":8,"iters":1224,"rtt_ns_p50":60423,"rtt_ns_p99":144479,"cpu_percent":102}
{"suite":"rpc","case":"rpc","transport":"pipe","peers":"go-go","size":8,"iters":2908,"rtt_ns_p50":17012,"rtt_ns_p99":118432,"cpu_percent":97.9}
{"suite":"rpc","case":"rpc","transport":"go-chan","peers":"go-go","size":8,"iters":46859,"rtt_ns_p50":781,"rtt_ns_p99":1663,"cpu_percent":69.9,"in_process":true}
{"suite":"rpc","case":"rpc","transport":"grpc-uds","peers":"go-go","size":8,"iters":138,"rtt_ns_p50":379298,"rtt_ns_p99":5040270,"cpu_percent":74.4}
{"suite":"rpc","case":"rpc","transport":"shmipc-go","peers":"go-go","size":8,"iters":576,"rtt_ns_p50":129502,"rtt_ns_p99":293778,"cpu_percent":112.3}
{"suite":"rpc","case":"rpc","transport":"netrpc-uds","peers":"go-go","size":8,"iters":1021,"rtt_ns_p50":58990,"rtt_ns_p99":226493,"cpu_percent":107}
`,
	"ump": `{"suite":"ump","case":"rtt-spin","transport":"ump","peers":"go-go","size":8,"iters":100000,"runs":3,"rtt_ns_p50":20899,"rtt_ns_p99":55974,"rtt_ns_mean":22011.49124}
{"suite":"ump","case":"rtt-spin","transport":"ump","peers":"c-c","size":8,"iters":100000,"runs":3,"rtt_ns_p50":58109,"rtt_ns_p99":106840,"rtt_ns_mean":56243.3}
{"suite":"ump","case":"rtt-spin","transport":"ump","peers":"go-c","size":8,"iters":100000,"runs":3,"rtt_ns_p50":17312,"rtt_ns_p99":65713,"rtt_ns_mean":22444.12017}
{"suite":"ump","case":"rtt-spin","transport":"ump","peers":"c-go","size":8,"iters":100000,"runs":3,"rtt_ns_p50":16601,"rtt_ns_p99":78336,"rtt_ns_mean":28922.2}
{"suite":"ump","case":"rtt-spin","transport":"raw-spin","peers":"c-c","size":8,"iters":100000,"runs":3,"rtt_ns_p50":411,"rtt_ns_p99":611,"rtt_ns_mean":43909.7}
{"suite":"ump","case":"rtt-parked","transport":"ump","peers":"go-go","size":8,"iters":5000,"runs":3,"rtt_ns_p50":12884,"rtt_ns_p99":55754,"rtt_ns_mean":24191.331}
{"suite":"ump","case":"rtt-parked","transport":"ump","peers":"c-c","size":8,"iters":5000,"runs":3,"rtt_ns_p50":10459,"rtt_ns_p99":715556,"rtt_ns_mean":56761.1}
{"suite":"ump","case":"rtt-parked","transport":"uds","peers":"c-c","size":8,"iters":5000,"runs":3,"rtt_ns_p50":13555,"rtt_ns_p99":23023,"rtt_ns_mean":14648.3}
{"suite":"ump","case":"stream","transport":"ump","peers":"go-go","size":64,"iters":1000000,"runs":3,"msgs_per_s":11891566.37151125,"bytes_per_s":761060247.77672}
{"suite":"ump","case":"stream","transport":"ump","peers":"c-c","size":64,"iters":1000000,"runs":3,"msgs_per_s":11407237,"bytes_per_s":730063178}
{"suite":"ump","case":"stream","transport":"shm-memcpy","peers":"c-c","size":64,"iters":1000000,"runs":3,"msgs_per_s":2449884,"bytes_per_s":156792545}
{"suite":"ump","case":"stream","transport":"memcpy","peers":"go","size":64,"iters":6010176,"runs":3,"msgs_per_s":120203281.99750164,"bytes_per_s":7693010047.840105,"in_process":true}
{"suite":"ump","case":"stream","transport":"ump","peers":"go-go","size":65536,"iters":5000,"runs":3,"msgs_per_s":40267.02319411139,"bytes_per_s":2638939632.049284}
{"suite":"ump","case":"stream","transport":"ump","peers":"c-c","size":65536,"iters":5000,"runs":3,"msgs_per_s":29020,"bytes_per_s":1901863429}
{"suite":"ump","case":"stream","transport":"shm-memcpy","peers":"c-c","size":65536,"iters":5000,"runs":3,"msgs_per_s":1767,"bytes_per_s":115779191}
{"suite":"ump","case":"stream","transport":"memcpy","peers":"go","size":65536,"iters":17216,"runs":3,"msgs_per_s":338005.1777068701,"bytes_per_s":22151507326.197437,"in_process":true}
{"suite":"ump","case":"stream","transport":"ump","peers":"go-go","size":1048576,"iters":300,"runs":3,"msgs_per_s":4508.330831835879,"bytes_per_s":4727327510.323138}
{"suite":"ump","case":"stream","transport":"ump","peers":"c-c","size":1048576,"iters":300,"runs":3,"msgs_per_s":8526,"bytes_per_s":8939740372}
{"suite":"ump","case":"stream","transport":"shm-memcpy","peers":"c-c","size":1048576,"iters":300,"runs":3,"msgs_per_s":1074,"bytes_per_s":1125992540}
{"suite":"ump","case":"stream","transport":"memcpy","peers":"go","size":1048576,"iters":448,"runs":3,"msgs_per_s":7722.2831185151035,"bytes_per_s":8097400743.280093,"in_process":true}
{"suite":"ump","case":"idle-cpu","transport":"ump","peers":"go-go","size":0,"iters":1,"runs":1,"cpu_percent":0.0018785547647000762}
`,
	"bind": `{"suite":"bind","case":"connect","transport":"ump","peers":"go-go","size":0,"iters":300,"runs":1,"rtt_ns_p50":315429,"rtt_ns_p99":4763603,"rtt_ns_mean":697464.79}
{"suite":"bind","case":"ns-get","transport":"ump","peers":"go-go","size":0,"iters":3000,"runs":1,"rtt_ns_p50":16291,"rtt_ns_p99":71223,"rtt_ns_mean":20099.769333333334}
`,
	"clients": `{"suite":"clients","case":"clients","transport":"ump","peers":"go-go","size":8,"clients":1,"iters":100000,"total_ns":436000000,"runs":1,"rtt_ns_mean":4360,"msgs_per_s":229357.79816513762}
{"suite":"clients","case":"clients","transport":"ump","peers":"go-go","size":8,"clients":2,"iters":100000,"total_ns":1440000000,"runs":1,"rtt_ns_mean":14400,"msgs_per_s":69444.44444444445}
{"suite":"clients","case":"clients","transport":"ump","peers":"go-go","size":8,"clients":3,"iters":100000,"total_ns":3040000000,"runs":1,"rtt_ns_mean":30400,"msgs_per_s":32894.73684210526}
{"suite":"clients","case":"clients","transport":"ump","peers":"go-go","size":8,"clients":4,"iters":100000,"total_ns":1564000000,"runs":1,"rtt_ns_mean":15640,"msgs_per_s":63938.6189258312}
{"suite":"clients","case":"clients","transport":"ump","peers":"c-c","size":8,"clients":1,"iters":100000,"total_ns":6032000000,"runs":1,"rtt_ns_mean":60320,"msgs_per_s":16578.249336870027}
{"suite":"clients","case":"clients","transport":"ump","peers":"c-c","size":8,"clients":2,"iters":100000,"total_ns":3511000000,"runs":1,"rtt_ns_mean":35110,"msgs_per_s":28481.913984619765}
{"suite":"clients","case":"clients","transport":"ump","peers":"c-c","size":8,"clients":3,"iters":100000,"total_ns":2784000000,"runs":1,"rtt_ns_mean":27840,"msgs_per_s":35919.54022988506}
{"suite":"clients","case":"clients","transport":"ump","peers":"c-c","size":8,"clients":4,"iters":100000,"total_ns":3537000000,"runs":1,"rtt_ns_mean":35370,"msgs_per_s":28272.54735651682}
{"suite":"clients","case":"clients","transport":"uds","peers":"go-go","size":8,"clients":1,"iters":1822,"rtt_ns_p50":32431,"rtt_ns_p99":120405,"msgs_per_s":22749.4,"cpu_percent":94.3,"total_ns":80090167}
{"suite":"clients","case":"clients","transport":"uds","peers":"go-go","size":8,"clients":2,"iters":1822,"rtt_ns_p50":45686,"rtt_ns_p99":362637,"msgs_per_s":27817.2,"cpu_percent":89.6,"total_ns":65498996}
{"suite":"clients","case":"clients","transport":"uds","peers":"go-go","size":8,"clients":3,"iters":1822,"rtt_ns_p50":80120,"rtt_ns_p99":469437,"msgs_per_s":30243.6,"cpu_percent":95.5,"total_ns":60244085}
{"suite":"clients","case":"clients","transport":"uds","peers":"go-go","size":8,"clients":4,"iters":1822,"rtt_ns_p50":110467,"rtt_ns_p99":515904,"msgs_per_s":30401.9,"cpu_percent":100.4,"total_ns":59930499}
`,
	"ring": `{"suite":"ring","case":"ring","transport":"ump","peers":"go","size":8,"stages":2,"iters":20229,"total_ns":500020479,"runs":3,"rtt_ns_p50":22622,"rtt_ns_p99":77345,"rtt_ns_mean":24718.002817736913}
{"suite":"ring","case":"ring","transport":"ump","peers":"go","size":8,"stages":4,"iters":7455,"total_ns":500016093,"runs":3,"rtt_ns_p50":61515,"rtt_ns_p99":131555,"rtt_ns_mean":67071.2398390342}
{"suite":"ring","case":"ring","transport":"ump","peers":"go","size":8,"stages":8,"iters":3241,"total_ns":500051549,"runs":3,"rtt_ns_p50":145973,"rtt_ns_p99":252993,"rtt_ns_mean":154289.27769207035}
{"suite":"ring","case":"ring","transport":"local","peers":"go","size":8,"stages":2,"iters":213850,"total_ns":500018076,"runs":3,"rtt_ns_p50":1643,"rtt_ns_p99":30567,"rtt_ns_mean":2338.171971007716,"in_process":true}
{"suite":"ring","case":"ring","transport":"local","peers":"go","size":8,"stages":4,"iters":110145,"total_ns":500001262,"runs":3,"rtt_ns_p50":3186,"rtt_ns_p99":55704,"rtt_ns_mean":4539.482155340687,"in_process":true}
{"suite":"ring","case":"ring","transport":"local","peers":"go","size":8,"stages":8,"iters":51690,"total_ns":500002127,"runs":3,"rtt_ns_p50":6151,"rtt_ns_p99":68007,"rtt_ns_mean":9673.092029406074,"in_process":true}
{"suite":"ring","case":"ring","transport":"go-chan","peers":"go","size":8,"stages":2,"iters":637118,"total_ns":500000373,"runs":3,"rtt_ns_p50":610,"rtt_ns_p99":1112,"rtt_ns_mean":784.7845658104151,"in_process":true}
{"suite":"ring","case":"ring","transport":"go-chan","peers":"go","size":8,"stages":4,"iters":367502,"total_ns":500000623,"runs":3,"rtt_ns_p50":1132,"rtt_ns_p99":1754,"rtt_ns_mean":1360.5385086339666,"in_process":true}
{"suite":"ring","case":"ring","transport":"go-chan","peers":"go","size":8,"stages":8,"iters":147422,"total_ns":500001059,"runs":3,"rtt_ns_p50":2255,"rtt_ns_p99":51205,"rtt_ns_mean":3391.631228717559,"in_process":true}
{"suite":"ring","case":"ring","transport":"pipe","peers":"go","size":8,"stages":2,"iters":33692,"total_ns":500004916,"runs":3,"rtt_ns_p50":9237,"rtt_ns_p99":94116,"rtt_ns_mean":14840.464086430013}
{"suite":"ring","case":"ring","transport":"pipe","peers":"go","size":8,"stages":4,"iters":9539,"total_ns":500004902,"runs":3,"rtt_ns_p50":31038,"rtt_ns_p99":198591,"rtt_ns_mean":52416.90973896635}
{"suite":"ring","case":"ring","transport":"pipe","peers":"go","size":8,"stages":8,"iters":2214,"total_ns":500003610,"runs":3,"rtt_ns_p50":221864,"rtt_ns_p99":441414,"rtt_ns_mean":225837.22222222222}
`,
}

// allSamples is the input of `chanos bench all`: every suite's lines.
func allSamples() string {
	var b strings.Builder
	for _, s := range suiteOrder {
		b.WriteString(samples[s])
	}
	return b.String()
}

// titleRE matches panel titles, which start with their suite.
var titleRE = regexp.MustCompile(`^(pingpong|stream|rpc|ump|bind|clients|ring): `)

func TestPlotCharts(t *testing.T) {
	want := map[string][]string{
		"pingpong": {"pingpong: round trip p50 by payload size, between processes", "pingpong: round trip p50 by payload size, in one process"},
		"stream":   {"stream: one-way throughput by message size, between processes", "stream: one-way throughput by message size, in one process"},
		"rpc":      {"rpc: round trip of an 8-byte rpc, by transport", "rpc: one-way local messages"},
		"ump":      {"ump: round trip of 8 bytes", "ump: one-way stream throughput by message size", "ump: CPU of an idle connection"},
		"bind":     {"bind: connect by name"},
		"clients":  {"clients: time per round trip by number of client processes"},
		"ring":     {"ring: time per hop by ring size"},
	}
	inputs := map[string]string{}
	for s, in := range samples {
		inputs[s] = in
	}
	inputs["all"] = allSamples()
	for _, s := range suiteOrder {
		want["all"] = append(want["all"], want[s]...)
	}
	dir := t.TempDir()
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			points, err := readPoints(strings.NewReader(in))
			if err != nil {
				t.Fatal(err)
			}
			panels, unknown, err := buildPanels(points)
			if err != nil || len(unknown) > 0 {
				t.Fatalf("buildPanels: %v, unknown suites %q", err, unknown)
			}
			svg := filepath.Join(dir, name+".svg")
			plotOK(t, svg, in)
			titles := svgTitles(t, svg)
			if len(titles) != len(want[name]) {
				t.Fatalf("SVG has %d panels %q, want %d %q", len(titles), titles, len(want[name]), want[name])
			}
			for i, w := range want[name] {
				if !strings.HasPrefix(titles[i], w) {
					t.Errorf("panel %d is %q, want %q...", i, titles[i], w)
				}
			}
			pngFile := filepath.Join(dir, name+".png")
			plotOK(t, pngFile, in)
			checkPNG(t, pngFile, panels)
		})
	}
}

// plotOK runs chanos-peers plot --out file with input on stdin.
func plotOK(t *testing.T, file, input string) {
	t.Helper()
	var stderr bytes.Buffer
	if code := plotMain([]string{"--out", file}, strings.NewReader(input), &stderr); code != 0 || stderr.Len() > 0 {
		t.Fatalf("plot --out %s: exit %d: %s", file, code, stderr.String())
	}
}

// svgTitles parses file as XML and returns its texts that are panel
// titles, in order.
func svgTitles(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	var titles []string
	var inText, root bool
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not XML: %v", file, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			root = root || tok.Name.Local == "svg"
			inText = tok.Name.Local == "text"
		case xml.EndElement:
			inText = false
		case xml.CharData:
			if s := string(tok); inText && titleRE.MatchString(s) {
				titles = append(titles, s)
			}
		}
	}
	if !root {
		t.Fatalf("%s has no svg element", file)
	}
	return titles
}

// checkPNG decodes file and checks that it is as tall as panels' layout,
// that each panel's band has some of the series' colours, and that the
// gaps between the bands are blank.
func checkPNG(t *testing.T, file string, panels []panel) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", file, err)
	}
	px := func(l vg.Length) int { return int(math.Round(l.Points() / vg.Inch.Points() * chartDPI)) }
	b := img.Bounds()
	if dx, dy := b.Dx()-px(chartWidth), b.Dy()-px(chartHeight(panels)); dx < -1 || dx > 1 || dy < -1 || dy > 1 {
		t.Fatalf("%s is %dx%d, want %dx%d for %d panels", file, b.Dx(), b.Dy(), px(chartWidth), px(chartHeight(panels)), len(panels))
	}
	top := chartPad
	for i, p := range panels {
		coloured := 0
		for y := px(top); y < px(top+p.height); y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				if slices.ContainsFunc(palette, func(c color.Color) bool { return sameColour(img.At(x, y), c) }) {
					coloured++
				}
			}
		}
		if coloured < 20 {
			t.Errorf("panel %d (%s): %d pixels of the series' colours", i, p.plot.Title.Text, coloured)
		}
		top += p.height
		if i < len(panels)-1 {
			// The middle half of the gap: text may reach into its edges.
			if y, ok := blankRows(img, px(top+panelGap/4), px(top+panelGap*3/4)); !ok {
				t.Errorf("gap below panel %d: row %d is not blank", i, y)
			}
		}
		top += panelGap
	}
}

func sameColour(a, b color.Color) bool {
	r1, g1, b1, _ := a.RGBA()
	r2, g2, b2, _ := b.RGBA()
	return r1 == r2 && g1 == g2 && b1 == b2
}

// blankRows reports whether rows y0 to y1 of img are white, and if not,
// the first row that is not.
func blankRows(img image.Image, y0, y1 int) (int, bool) {
	for y := y0; y < y1; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			if !sameColour(img.At(x, y), color.White) {
				return y, false
			}
		}
	}
	return 0, true
}

// TestPlotUnknownSuite checks that suites without a chart are named on
// stderr and left out of a chart of the others.
func TestPlotUnknownSuite(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.svg")
	in := `{"suite":"future","case":"x","transport":"ump","peers":"go-go","size":8,"iters":1,"rtt_ns_p50":5}` + "\n" + samples["bind"]
	var stderr bytes.Buffer
	if code := plotMain([]string{"--out", out}, strings.NewReader(in), &stderr); code != 0 || !strings.Contains(stderr.String(), "no chart for suite future") {
		t.Fatalf("exit %d, stderr %q; want 0 and a note of suite future", code, stderr.String())
	}
	if titles := svgTitles(t, out); len(titles) != 1 {
		t.Errorf("panels %q, want bind's only", titles)
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
		{nil, samples["pingpong"], 2, "usage"},
		{[]string{"--out", filepath.Join(dir, "x.png"), "extra"}, samples["pingpong"], 2, "usage"},
		{[]string{"--out", filepath.Join(dir, "x.gif")}, samples["pingpong"], 1, ".png or .svg"},
		{[]string{"--out", filepath.Join(dir, "x.png")}, "not json\n", 1, "line 1"},
		{[]string{"--out", filepath.Join(dir, "x.png")}, "", 1, "no results to plot"},
		{[]string{"--out", filepath.Join(dir, "x.png")}, `{"suite":"future","case":"x","rtt_ns_p50":5}` + "\n", 1, "no results to plot"},
		{[]string{"--out", filepath.Join(dir, "no such dir", "x.png")}, samples["bind"], 1, "creating the chart"},
	} {
		var stderr bytes.Buffer
		code := plotMain(tc.args, strings.NewReader(tc.input), &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("plot %q: exit %d, stderr %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

func TestLogTicks(t *testing.T) {
	var labels []string
	for _, tk := range (logTicks{fine: true}).Ticks(0.2, 50) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"0.2", "0.5", "1", "2", "5", "10", "20", "50"}; !slices.Equal(labels, want) {
		t.Errorf("fine ticks of 0.2 to 50: %q, want %q", labels, want)
	}
	labels = nil
	for _, tk := range (logTicks{}).Ticks(0.5, 6000) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"1", "10", "100", "1000"}; !slices.Equal(labels, want) {
		t.Errorf("ticks of 0.5 to 6000: %q, want %q", labels, want)
	}
	for v, want := range map[float64]string{0.411: "0.411", 21.63: "21.6", 315.429: "315", 4727.3: "4730", 0.0018785: "0.00188", 33: "33.0"} {
		if got := formatValue(v); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
		}
	}
}
