package spawn

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	spawnif "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/internal/testkit"
)

// shipEnv is a monitor started with flags, a domain of it in this
// process, and that domain's spawn connection.
func shipEnv(t *testing.T, dir string, flags ...string) *env {
	t.Helper()
	return joined(t, dir, testkit.StartMonitorIn(t, dir, flags...), "ship-test")
}

// TestShip: on one machine (over ump), 'chanos spawn --ship' sends a
// program that lives in a directory of the caller's into the monitor's
// cache and runs it; once that directory is gone, a spawn by hash runs
// the cached copy. A policy that leaves the cache out refuses shipped
// programs; one that names the cache's directory allows them.
func TestShip(t *testing.T) {
	dir := testkit.ShortDir(t)
	e := shipEnv(t, dir)
	ctx := testkit.Context(t)
	bin := testkit.GoProgram(t, "github.com/chanos/chanos/cmd/chanos")

	src := t.TempDir()
	prog := filepath.Join(src, "shipme")
	b, err := os.ReadFile("/bin/echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "spawn", "--ship", "--wait", "--json", "--", prog, "shipped")
	cmd.Env = append(os.Environ(), "CHANOS_DIR="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chanos spawn --ship: %v: %s", err, out)
	}
	var st struct {
		ID       uint64 `json:"id"`
		ExitCode int    `json:"exit_code"`
		SHA256   string `json:"sha256"`
		Uploaded bool   `json:"uploaded"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	hash, _, err := spawnif.HashFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Uploaded || st.SHA256 != hash || st.ExitCode != 0 {
		t.Fatalf("spawn --ship: %s; want uploaded, sha256 %s, exit 0", out, hash)
	}
	if got := e.output(t, st.ID); got != "shipped\n" {
		t.Fatalf("output %q", got)
	}

	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	s := e.start(t, spawnif.Request{Hash: hash, Program: "shipme", Args: []string{"from", "the", "cache"}})
	if got := e.output(t, s.ID); got != "from the cache\n" {
		t.Fatalf("spawn by hash after the caller's copy went: %q", got)
	}
	procs, err := e.c.Procs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if procs[0].Program != filepath.Join(dir, "spawn-cache", hash) {
		t.Fatalf("list: program %q, want the cached file", procs[0].Program)
	}

	// Policies: allowed directories that leave the cache out refuse
	// shipped programs; naming the cache allows them.
	other := t.TempDir()
	body := []byte("#!/bin/sh\necho policy\n")
	prog2 := filepath.Join(other, "p")
	if err := os.WriteFile(prog2, body, 0o755); err != nil {
		t.Fatal(err)
	}
	strict := shipEnv(t, testkit.ShortDir(t), "--spawn-allow", "/bin")
	if _, err := strict.c.Ship(ctx, prog2); !errors.Is(err, spawnif.ErrDenied) {
		t.Fatalf("ship under a policy that leaves the cache out: %v, want ErrDenied", err)
	}
	dir3 := testkit.ShortDir(t)
	open := shipEnv(t, dir3, "--spawn-allow", "/bin", "--spawn-allow", filepath.Join(dir3, "spawn-cache"))
	sh, err := open.c.Ship(ctx, prog2)
	if err != nil {
		t.Fatalf("ship under a policy that allows the cache: %v", err)
	}
	s = open.start(t, spawnif.Request{Hash: sh.Hash, Program: "p"})
	if got := open.output(t, s.ID); got != "policy\n" {
		t.Fatalf("output %q", got)
	}

	// The monitor's flags for the cache's limits.
	small := shipEnv(t, testkit.ShortDir(t), "--spawn-ship-max", "16")
	if _, err := small.c.Ship(ctx, prog2); !errors.Is(err, spawnif.ErrExhausted) || !strings.Contains(err.Error(), "--spawn-ship-max") {
		t.Fatalf("ship of %d bytes to a monitor with --spawn-ship-max 16: %v, want ErrExhausted naming the flag", len(body), err)
	}
}

// TestShipHashingWhileSending: a file this process has not hashed is
// hashed while it is sent (put_open, put_close); the service checks the
// hash and runs the file. Shipped again before the process can keep its
// hash (changed within the racy window), it is hashed and sent again
// until the hash is known, and the cache, which holds it, drops that
// copy: not uploaded, and no upload's file left behind.
func TestShipHashingWhileSending(t *testing.T) {
	dir := testkit.ShortDir(t)
	e := shipEnv(t, dir)
	ctx := testkit.Context(t)
	prog := filepath.Join(t.TempDir(), "big")
	pad := make([]byte, 3<<20)
	rand.Read(pad)
	body := append([]byte("#!/bin/sh\necho big\nexit 0\n# "), hex.EncodeToString(pad)...)
	if err := os.WriteFile(prog, body, 0o755); err != nil {
		t.Fatal(err)
	}
	hash, _, err := spawnif.HashFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		sh, err := e.c.Ship(ctx, prog)
		if err != nil {
			t.Fatalf("ship %d: %v", i+1, err)
		}
		if sh.Hash != hash || sh.Size != int64(len(body)) || sh.Uploaded != want {
			t.Fatalf("ship %d: %+v; want hash %s, size %d, uploaded %v", i+1, sh, hash, len(body), want)
		}
		names, err := os.ReadDir(filepath.Join(dir, "spawn-cache"))
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != 1 || names[0].Name() != hash {
			t.Fatalf("after ship %d the cache holds %v; want only %s", i+1, names, hash)
		}
	}
	s := e.start(t, spawnif.Request{Hash: hash, Program: "big"})
	if got := e.output(t, s.ID); got != "big\n" {
		t.Fatalf("output %q", got)
	}
}

// TestShipFromC: examples/c/ship_test ships a program that lives in a
// directory of the caller's through the C code chanosc generates for
// spawn.if (SHA-256 by OpenSSL), runs it by its hash, and the second time
// finds it cached and sends nothing; its hash is the Go library's.
func TestShipFromC(t *testing.T) {
	cprog := filepath.Join(testkit.CBuild(t, "examples/ship_test"), "examples/ship_test")
	dir := testkit.ShortDir(t)
	shipEnv(t, dir)
	prog := filepath.Join(t.TempDir(), "cshipped")
	b, err := os.ReadFile("/bin/echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	hash, _, err := spawnif.HashFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	for i, sent := range []string{"uploaded " + strconv.Itoa(len(b)), "cached"} {
		cmd := exec.Command(cprog, prog, "from-c")
		cmd.Env = append(os.Environ(), "CHANOS_DIR="+dir,
			"ASAN_OPTIONS=exitcode=23:abort_on_error=0:detect_leaks=1",
			"UBSAN_OPTIONS=halt_on_error=1:exitcode=23:abort_on_error=0:print_stacktrace=1")
		out, err := cmd.CombinedOutput()
		want := strings.Join([]string{"sha256 " + hash, sent, "exit 0", "output from-c"}, "\n")
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Fatalf("ship_test, run %d: %v:\n%s\nwant\n%s", i+1, err, out, want)
		}
	}
}
