package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/netns"
	"github.com/chanos/chanos/internal/testkit"
)

// netConfig is the quick net suite with this test binary as its server,
// and the baselines' programs where they are built (they must be under
// CI).
func netConfig(t *testing.T, loopback bool) (NetConfig, map[string]bool) {
	t.Helper()
	cfg := NetConfig{Quick: true, Repeat: 1, Server: testkit.Command(roleNetServer), Loopback: loopback}
	want := map[string]bool{"resume/net/0": true}
	for _, tr := range []string{"tcp", "net-plain", "net-auth", "net"} {
		want["rtt/"+tr+"/8"] = true
		want["stream/"+tr+"/64"] = true
		want["stream/"+tr+"/65536"] = true
	}
	if p, err := FindCTool(NetCTool); err == nil {
		cfg.CTool = p
		want["rtt/tcp-c/8"] = true
	} else if os.Getenv("CI") != "" {
		t.Fatalf("CI is set and the C baseline is missing: %v", err)
	} else {
		t.Logf("tcp-c left out: %v", err)
	}
	if p, err := FindPeers(); err == nil {
		cfg.Peers = p
		want["rtt/grpc-tcp/8"] = true
		want["stream/grpc-tcp/64"] = true
		want["stream/grpc-tcp/65536"] = true
	} else if os.Getenv("CI") != "" {
		t.Fatalf("CI is set and the peers are missing: %v", err)
	} else {
		t.Logf("grpc-tcp left out: %v", err)
	}
	return cfg, want
}

// runNetQuick runs the suite and checks that it reports every case it
// can, once, with its labels and figures, over path.
func runNetQuick(t *testing.T, cfg NetConfig, want map[string]bool, path string) {
	t.Helper()
	var notes strings.Builder
	cfg.Note = &notes
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var got []Result
	err := RunNet(ctx, cfg, func(r Result) error {
		got = append(got, r)
		return nil
	})
	t.Logf("notes:\n%s", notes.String())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteTable(&b, got)
	NetSummary(&b, got)
	t.Logf("\n%s", b.String())
	if !strings.Contains(notes.String(), "path: "+path) {
		t.Errorf("the notes do not say the path is %s", path)
	}
	for _, r := range got {
		k := fmt.Sprintf("%s/%s/%d", r.Case, r.Transport, r.Size)
		if !want[k] {
			t.Errorf("unexpected or repeated case %s", k)
		}
		delete(want, k)
		if r.Suite != "net" || r.Iters == 0 || r.Path != path {
			t.Errorf("%s: suite %q, %d iterations, path %q", k, r.Suite, r.Iters, r.Path)
		}
		if (r.Case == "stream") != (r.MsgsPerS != nil) || (r.Case != "stream") != (r.RTTp50 != nil) {
			t.Errorf("%s: figures missing: %+v", k, r)
		}
	}
	for k := range want {
		t.Errorf("case %s missing", k)
	}
}

// The net suite runs every case between two network namespaces where it
// can (root and ip netns), over loopback otherwise.
func TestRunNetQuick(t *testing.T) {
	cfg, want := netConfig(t, false)
	path := NetPathVeth
	if err := netns.Check(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and network namespaces cannot be built: %v", err)
		}
		t.Logf("over loopback: %v", err)
		path = NetPathLoopback
	}
	runNetQuick(t, cfg, want, path)
}

// Asked for loopback, the suite runs there even where it could build
// namespaces.
func TestRunNetLoopback(t *testing.T) {
	if netns.Check() != nil {
		t.Skip("TestRunNetQuick runs over loopback here already")
	}
	cfg, want := netConfig(t, true)
	runNetQuick(t, cfg, want, NetPathLoopback)
}

// cancelOn is a progress writer that cancels when a line contains s.
type cancelOn struct {
	s      string
	cancel context.CancelFunc
}

func (c cancelOn) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.s) {
		c.cancel()
	}
	return len(p), nil
}

// A run cancelled halfway (as Ctrl-C cancels `chanos bench net`) removes
// its namespaces, and the processes in them, before RunNet returns.
func TestRunNetCancelTearsDown(t *testing.T) {
	if err := netns.Check(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and network namespaces cannot be built: %v", err)
		}
		t.Skipf("no network namespaces: %v", err)
	}
	cfg, _ := netConfig(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var notes strings.Builder
	cfg.Note = &notes
	cfg.Progress = cancelOn{"stream/net-auth/64", cancel}
	err := RunNet(ctx, cfg, func(Result) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunNet cancelled returned %v", err)
	}
	_, rest, ok := strings.Cut(notes.String(), "server in ")
	ns, _, _ := strings.Cut(rest, " ")
	if !ok || !strings.HasPrefix(ns, netns.Prefix) {
		t.Fatalf("no server namespace in the notes %q", notes.String())
	}
	cluster := strings.TrimSuffix(ns, "m1")
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	if strings.Contains(string(out), cluster) {
		t.Errorf("namespaces of %s* left after RunNet returned:\n%s", cluster, out)
	}
}
