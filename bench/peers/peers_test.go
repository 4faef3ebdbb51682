package peers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the peers' server processes, the
// way chanos-peers does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ServeCommand {
		os.Exit(ServeMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func TestHeader(t *testing.T) {
	b := make([]byte, hdrLen)
	for _, op := range []byte{opEcho, opSink, opAck, opCall, opCredit} {
		putHdr(b, op, 12345)
		gotOp, n, err := parseHdr(b)
		if err != nil || gotOp != op || n != 12345 {
			t.Errorf("op %d: parse = %d, %d, %v", op, gotOp, n, err)
		}
	}
	bad := map[string][]byte{
		"short":    {1, 0, 0, 0, opEcho},
		"op 0":     {0, 0, 0, 0, 0, 0, 0, 0},
		"op 9":     {0, 0, 0, 0, 9, 0, 0, 0},
		"reserved": {0, 0, 0, 0, opEcho, 0, 1, 0},
		"too long": {0, 0, 0, 2, opEcho, 0, 0, 0}, // 32 MiB
	}
	for name, h := range bad {
		if _, _, err := parseHdr(h); err == nil {
			t.Errorf("%s: parsed %v", name, h)
		}
	}
}

// TestServeFrames drives the frame protocol's server over an in-memory
// connection.
func TestServeFrames(t *testing.T) {
	cli, srv := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveFrames(srv, srv) }()
	c := newFramedClient(cli, cli, cli)
	if err := c.SetPayload([]byte("hello, frames")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c.RoundTrip(); err != nil {
			t.Fatalf("round trip: %v", err)
		}
		if err := c.Call(); err != nil {
			t.Fatalf("call: %v", err)
		}
	}
	for range 5 {
		if err := c.Send(); err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	if a, err := c.Ack(); err != nil || a != (Ack{Msgs: 5, Bytes: 5 * 13}) {
		t.Fatalf("ack = %+v, %v", a, err)
	}
	if a, err := c.Ack(); err != nil || a != (Ack{}) {
		t.Fatalf("second ack = %+v, %v", a, err)
	}
	// A malformed frame ends the server with an error.
	if _, err := cli.Write([]byte{0, 0, 0, 0, 42, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Fatalf("server after a bad frame: %v", err)
	}
	cli.Close()
}

func TestCheckCall(t *testing.T) {
	p := []byte{7, 0, 0, 0, 0, 0, 0, 0, 'a', 'b'}
	if err := checkCall(opCall, p, 7, []byte("ab")); err != nil {
		t.Errorf("good reply: %v", err)
	}
	if err := checkCall(opCall, p, 8, []byte("ab")); err == nil {
		t.Errorf("reply to the wrong call accepted")
	}
	if err := checkCall(opCall, p, 7, []byte("ac")); err == nil {
		t.Errorf("wrong argument accepted")
	}
}

func TestParseStatCPU(t *testing.T) {
	line := "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 70 0 0 20 0 3 0 100 0 0\n"
	d, err := parseStatCPU([]byte(line))
	if err != nil || d != 320*clockTick {
		t.Fatalf("parseStatCPU = %v, %v; want %v", d, err, 320*clockTick)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Fatal("short line parsed")
	}
	if d, err := cpuTime(os.Getpid()); err != nil || d < 0 {
		t.Fatalf("cpuTime(self pid) = %v, %v", d, err)
	}
}

func TestPercentile(t *testing.T) {
	var s []int64
	for i := 100; i >= 1; i-- {
		s = append(s, int64(i))
	}
	p50, p99 := latencies(s)
	if p50 != 50 || p99 != 99 {
		t.Errorf("p50, p99 = %d, %d; want 50, 99", p50, p99)
	}
	if p := percentile([]int64{5}, 0.99); p != 5 {
		t.Errorf("one sample: %d", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Errorf("no samples: %d", p)
	}
}

func TestParseSizes(t *testing.T) {
	got, err := ParseSizes("8, 64,4K,64KiB,1M,2mib,512B")
	want := []int{8, 64, 4 << 10, 64 << 10, 1 << 20, 2 << 20, 512}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ParseSizes = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"", "0", "-1", "9M", "x", "4Q", "1.5K"} {
		if s, err := ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) = %v", bad, s)
		}
	}
	for n, s := range map[int]string{8: "8 B", 4096: "4 KiB", 1 << 20: "1 MiB", 1500: "1500 B"} {
		if got := FormatSize(n); got != s {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, s)
		}
	}
}

func TestResultJSON(t *testing.T) {
	var b bytes.Buffer
	r := Result{Suite: SuitePingPong, Case: "rtt", Transport: "uds", Peers: "go-go", Size: 8, Iters: 10, RTTNsP50: 100, RTTNsP99: 200}
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	line := b.String()
	if !strings.HasSuffix(line, "}\n") || strings.Count(line, "\n") != 1 {
		t.Fatalf("not one line: %q", line)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"suite", "case", "transport", "peers", "size", "iters", "rtt_ns_p50", "rtt_ns_p99"} {
		if _, ok := m[k]; !ok {
			t.Errorf("field %s missing from %s", k, line)
		}
	}
	for _, k := range []string{"msgs_per_s", "bytes_per_s", "clients", "total_ns", "note"} {
		if _, ok := m[k]; ok {
			t.Errorf("field %s present in %s", k, line)
		}
	}
}

func TestLookup(t *testing.T) {
	want := []string{"uds", "tcp", "pipe", "go-chan", "grpc-uds", "shmipc-go", "netrpc-uds"}
	if got := Transports(); !slices.Equal(got, want) {
		t.Fatalf("Transports() = %v", got)
	}
	if _, err := Lookup("raw-spin"); err == nil {
		t.Fatal("raw-spin is the core module's, not a peer")
	}
}

func TestGRPCRejectsNonUnixPeer(t *testing.T) {
	dec := func(any) error { return nil }
	if _, err := grpcUnary(nil, context.Background(), dec, nil); !errors.Is(err, errNotUnix) {
		t.Fatalf("unary without a Unix peer: %v", err)
	}
}

// smokeOptions are measurements just long enough to exercise every path.
func smokeOptions(transport string) Options {
	o := QuickOptions()
	o.Transports = []string{transport}
	o.PingSizes = []int{8, 4 << 10}
	o.StreamSizes = []int{64, 64 << 10}
	o.Clients = []int{1, 2}
	o.Warmup = 2 * time.Millisecond
	o.Duration = 10 * time.Millisecond
	return o
}

// TestPeers runs every suite on every peer briefly and checks that the
// results are whole and consistent. It asserts nothing about speed.
func TestPeers(t *testing.T) {
	for _, name := range Transports() {
		t.Run(name, func(t *testing.T) {
			var rs []Result
			err := Run(context.Background(), smokeOptions(name), func(r Result) { rs = append(rs, r) })
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != 7 {
				t.Fatalf("%d results, want 7: %+v", len(rs), rs)
			}
			var clientsIters []int64
			for _, r := range rs {
				checkResult(t, r, name)
				if r.Suite == SuiteClients {
					clientsIters = append(clientsIters, r.Iters)
				}
			}
			if len(clientsIters) != 2 || clientsIters[0] != clientsIters[1] {
				t.Errorf("clients runs did not split the same number of round trips: %v", clientsIters)
			}
		})
	}
}

func checkResult(t *testing.T, r Result, transport string) {
	t.Helper()
	if r.Transport != transport || r.Peers != "go-go" || r.Case != caseOf[r.Suite] || r.Size <= 0 {
		t.Errorf("labels: %+v", r)
	}
	if r.Iters < minSamples {
		t.Errorf("%s: %d iterations", r.Suite, r.Iters)
	}
	if r.CPUPercent < 0 {
		t.Errorf("%s: cpu %v", r.Suite, r.CPUPercent)
	}
	if want := transport == "go-chan"; r.InProcess != want {
		t.Errorf("%s: in_process %v, want %v", r.Suite, r.InProcess, want)
	}
	switch r.Suite {
	case SuitePingPong, SuiteRPC, SuiteClients:
		if r.RTTNsP50 <= 0 || r.RTTNsP99 < r.RTTNsP50 {
			t.Errorf("%s: p50 %d, p99 %d", r.Suite, r.RTTNsP50, r.RTTNsP99)
		}
		if r.MsgsPerS != 0 && r.Suite != SuiteClients || r.BytesPerS != 0 {
			t.Errorf("%s: throughput fields set: %+v", r.Suite, r)
		}
	case SuiteStream:
		if r.MsgsPerS <= 0 || r.RTTNsP50 != 0 {
			t.Errorf("stream: %+v", r)
		}
		if want := r.MsgsPerS * float64(r.Size); math.Abs(r.BytesPerS-want) > 0.01*want+1 {
			t.Errorf("stream: bytes/s %v, msgs/s × size %v", r.BytesPerS, want)
		}
	}
	if r.Suite == SuiteClients && (r.Clients < 1 || r.TotalNs <= 0 || r.MsgsPerS <= 0) {
		t.Errorf("clients: %+v", r)
	}
	if r.Suite != SuiteClients && r.Clients != 0 {
		t.Errorf("%s: clients set", r.Suite)
	}
}

// TestServersAreProcesses checks that every peer but go-chan serves from
// another process, and that the process ends cleanly when closed.
func TestServersAreProcesses(t *testing.T) {
	r := &runner{o: QuickOptions(), env: Env{Exe: mustExe(t)}}
	for _, p := range Peers() {
		s, err := r.open(context.Background(), p, 1, 1)
		if err != nil {
			t.Fatalf("%s: %v", p.Transport(), err)
		}
		pid := s.srv.PID()
		if err := s.finish(s.clients[0].RoundTrip()); err != nil {
			t.Errorf("%s: %v", p.Transport(), err)
		}
		switch {
		case p.Transport() == "go-chan" && pid != 0:
			t.Errorf("go-chan has a server process %d", pid)
		case p.Transport() != "go-chan" && (pid == 0 || pid == os.Getpid()):
			t.Errorf("%s serves in this process", p.Transport())
		}
	}
}

func mustExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestServeMain runs the server command as chanos-peers runs it: it says
// "ready ADDR" and exits when its stdin ends, or fails on bad arguments.
func TestServeMain(t *testing.T) {
	exe := mustExe(t)
	// Stdin is /dev/null, so a server that starts exits at once.
	out, err := exec.Command(exe, ServeCommand, "tcp", "127.0.0.1:0", "1").Output()
	if err != nil || !strings.HasPrefix(string(out), "ready 127.0.0.1:") {
		t.Errorf("good server: %q, %v", out, err)
	}
	for _, args := range [][]string{
		{"uds"},
		{"nope", "-", "1"},
		{"tcp", "127.0.0.1:0", "0"},
		{"uds", "/nonexistent/dir/s.sock", "1"},
	} {
		cmd := exec.Command(exe, append([]string{ServeCommand}, args...)...)
		cmd.Stderr = io.Discard
		out, err := cmd.Output()
		if err == nil || len(out) != 0 {
			t.Errorf("server %q: %q, %v", args, out, err)
		}
	}
}

// TestClientsCalibrates checks that clients runs without a one-client run
// first still split a fixed number of round trips.
func TestClientsCalibrates(t *testing.T) {
	o := smokeOptions("go-chan")
	o.Suites = []string{SuiteClients}
	o.Clients = []int{3, 2}
	var rs []Result
	if err := Run(context.Background(), o, func(r Result) { rs = append(rs, r) }); err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Clients != 3 || rs[1].Clients != 2 || rs[0].Iters != rs[1].Iters || rs[0].Iters < minSamples {
		t.Fatalf("results: %+v", rs)
	}
}

func TestRunRejects(t *testing.T) {
	for name, o := range map[string]Options{
		"suite":     {Suites: []string{"nope"}},
		"transport": {Transports: []string{"raw-spin"}},
		"clients":   {Suites: []string{SuiteClients}, Clients: []int{0}},
	} {
		if err := Run(context.Background(), o, func(Result) { t.Errorf("%s: emitted a result", name) }); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
