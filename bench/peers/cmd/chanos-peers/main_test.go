package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/chanos/chanos/bench/peers"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == peers.ServeCommand {
		os.Exit(peers.ServeMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e, false)
	return code, o.String(), e.String()
}

// TestJSON checks the line format that chanos bench merges.
func TestJSON(t *testing.T) {
	code, out, errOut := runCLI("--json", "rpc", "--transports", "go-chan,uds", "--warmup", "1ms", "--duration", "5ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), out)
	}
	for i, want := range []string{"go-chan", "uds"} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatalf("line %d: %v: %s", i, err, lines[i])
		}
		if m["suite"] != "rpc" || m["case"] != "rpc" || m["transport"] != want || m["peers"] != "go-go" || m["size"] != 8.0 {
			t.Errorf("line %d: %s", i, lines[i])
		}
		for _, k := range []string{"iters", "rtt_ns_p50", "rtt_ns_p99"} {
			if v, ok := m[k].(float64); !ok || v <= 0 {
				t.Errorf("line %d: %s = %v", i, k, m[k])
			}
		}
		if _, ok := m["msgs_per_s"]; ok {
			t.Errorf("line %d: msgs_per_s in an rpc result", i)
		}
	}
}

func TestTable(t *testing.T) {
	code, out, errOut := runCLI("stream", "--quick", "--transports", "pipe", "--sizes", "64,4K", "--duration", "5ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"transport", "msgs/s", "pipe", "64 B", "4 KiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestClientsFlag(t *testing.T) {
	code, out, errOut := runCLI("clients", "--json", "--transports", "go-chan", "--clients", "1,3", "--warmup", "1ms", "--duration", "5ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var got []int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r peers.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Clients)
	}
	if len(got) != 2 || got[0] != 1 || got[1] != 3 {
		t.Fatalf("clients %v, want [1 3]", got)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nosuchsuite"},
		{"pingpong", "--transports", "raw-spin"},
		{"pingpong", "--sizes", "0"},
		{"pingpong", "--clients", "x"},
		{"pingpong", "extra"},
		{"--bogus"},
	} {
		code, out, errOut := runCLI(args...)
		if code != 2 || out != "" || errOut == "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}
