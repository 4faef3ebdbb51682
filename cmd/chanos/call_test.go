package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/kv"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/interfaces/reflection"
	"github.com/chanos/chanos/internal/testkit"
)

// callKV is a kv server for TestCall: put stores, get answers not found
// for a key it lacks and gives its reply the call's metadata "echo" as
// reply metadata, watch records the prefix.
type callKV struct {
	kv.UnimplementedServer
	mu      sync.Mutex
	vals    map[string][]byte
	watched chan string
}

func (s *callKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vals[key] = value
	return uint64(len(s.vals)), nil
}

func (s *callKV) Get(ctx context.Context, key string) (kv.Status, []byte, error) {
	md, _ := chanos.MetadataFrom(ctx)
	if md["echo"] != "" {
		if err := chanos.SetReplyMetadata(ctx, chanos.Metadata{"echo": md["echo"]}); err != nil {
			return 0, nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.vals[key]
	if !ok {
		return 0, nil, chanos.Errorf(chanos.CodeNotFound, "no key %q", key)
	}
	return kv.StatusOk, v, nil
}

func (s *callKV) Watch(ctx context.Context, from *kv.Client, m kv.Watch) error {
	s.watched <- m.Prefix
	return nil
}

// cliServer starts a monitor and joins a domain to it, for a test that
// runs chanos commands against what the domain serves: the chanos
// binary, the monitor's directory, the test's context and the domain.
func cliServer(t *testing.T) (bin, dir string, ctx context.Context, d *chanos.Domain) {
	t.Helper()
	bin = chanosBin(t)
	dir, _ = testkit.StartMonitor(t)
	ctx = testkit.Context(t)
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return bin, dir, ctx, d
}

// serveKV exports srv under name in d and serves it until the test ends.
func serveKV(t *testing.T, ctx context.Context, d *chanos.Domain, name string, srv kv.Server) {
	t.Helper()
	l, err := kv.Export(ctx, d, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go kv.Serve(ctx, l, srv)
}

// TestCall: chanos call calls an rpc of a service from its .if file and
// JSON arguments, and prints the out arguments as JSON; an error reply
// exits 1 with its code; metadata goes both ways; a one-way message is
// sent; a changed .if is refused at bind, as any client would be.
func TestCall(t *testing.T) {
	bin, dir, ctx, d := cliServer(t)
	srv := &callKV{vals: map[string][]byte{}, watched: make(chan string, 1)}
	serveKV(t, ctx, d, "call.kv", srv)
	ifFile := filepath.Join("..", "..", "interfaces", "kv.if")

	for _, tc := range []struct {
		args           []string
		status         int
		stdout, stderr string
	}{
		{[]string{"call", ifFile, "call.kv", "put", `{"key": "a", "value": "hello"}`}, 0, `{"version":1}` + "\n", ""},
		{[]string{"call", ifFile, "call.kv", "put", `{"key": "b", "value": {"base64": "/wA="}}`}, 0, `{"version":2}` + "\n", ""},
		{[]string{"call", ifFile, "call.kv", "get", `{"key": "a"}`}, 0, `{"st":"ok","value":"hello"}` + "\n", ""},
		{[]string{"call", "kv.if", "call.kv", "get", `{"key": "a"}`}, 0, `{"st":"ok","value":"hello"}` + "\n", ""}, // the bundled kv.if
		{[]string{"call", ifFile, "call.kv", "get", `{"key": "b"}`}, 0, `{"st":"ok","value":{"base64":"/wA="}}` + "\n", ""},
		{[]string{"call", "--meta", "echo=x1", ifFile, "call.kv", "get", `{"key": "a"}`}, 0, `{"st":"ok","value":"hello"}` + "\n", "reply metadata: echo=x1\n"},
		{[]string{"call", "--json", ifFile, "call.kv", "get", `{"key": "zz"}`}, 1, `{"error":"chanos: call: kv.get: not found: no key \"zz\"","code":"not_found"}` + "\n", ""},
		{[]string{"call", ifFile, "call.kv", "get", `{"key": 7}`}, 2, "", "chanos call: "},
		{[]string{"call", ifFile, "call.kv", "get", `{"kee": "a"}`}, 2, "", "chanos call: "},
		{[]string{"call", ifFile, "call.kv", "nope"}, 2, "", "chanos call: dynamic: kv has no message or rpc \"nope\""},
	} {
		r := runCmd(t, bin, dir, tc.args...)
		if r.status != tc.status || r.stdout != tc.stdout || !strings.HasPrefix(r.stderr, tc.stderr) || (tc.stderr == "" && r.stderr != "") {
			t.Errorf("chanos %s: status %d, stdout %q, stderr %q; want %d, %q, %q", strings.Join(tc.args[1:], " "), r.status, r.stdout, r.stderr, tc.status, tc.stdout, tc.stderr)
		}
	}

	if r := runCmd(t, bin, dir, "call", ifFile, "call.kv", "watch", `{"prefix": "p/"}`); r.status != 0 || r.stdout != "" {
		t.Errorf("chanos call ... watch: status %d, %q, %q", r.status, r.stdout, r.stderr)
	}
	if got := testkit.Await(t, "the watch message", srv.watched); got != "p/" {
		t.Errorf("the server got watch %q, want p/", got)
	}

	// kv.if with get's key bound changed: another interface, refused.
	src, err := os.ReadFile(ifFile)
	if err != nil {
		t.Fatal(err)
	}
	changed := filepath.Join(t.TempDir(), "kv.if")
	if err := os.WriteFile(changed, []byte(strings.Replace(string(src), "rpc get(in String key[256]", "rpc get(in String key[255]", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCmd(t, bin, dir, "call", changed, "call.kv", "get", `{"key": "a"}`)
	if r.status != 1 || !strings.Contains(r.stderr, "fingerprint") {
		t.Errorf("chanos call with a changed kv.if: status %d, stderr %q; want a fingerprint mismatch", r.status, r.stderr)
	}
}

// lyingReflection answers every describe with what it holds.
type lyingReflection struct {
	reflection.UnimplementedServer
	iface string
	fp    uint64
	def   string
}

func (r lyingReflection) Describe(ctx context.Context, name string) (string, uint64, string, error) {
	return r.iface, r.fp, r.def, nil
}

// TestCallByReflection: with the reflection service beside the export,
// chanos call needs no .if and chanos describe prints the interface,
// which compiles to the export's; an export whose domain serves no
// reflection is told at once, not at the timeout.
func TestCallByReflection(t *testing.T) {
	bin, dir, ctx, d := cliServer(t)
	for _, name := range []string{"refl.kv", "bare.kv"} {
		serveKV(t, ctx, d, name, &callKV{vals: map[string][]byte{}, watched: make(chan string, 1)})
	}
	rl, err := reflection.Export(ctx, d, reflection.NameOf("refl.kv"))
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	go reflection.Serve(ctx, rl, reflection.NewExports(d))

	for _, tc := range []struct {
		args           []string
		status         int
		stdout, stderr string
	}{
		{[]string{"call", "refl.kv", "put", `{"key": "a", "value": "hi"}`}, 0, `{"version":1}` + "\n", ""},
		{[]string{"call", "refl.kv", "get", `{"key": "a"}`}, 0, `{"st":"ok","value":"hi"}` + "\n", ""},
		{[]string{"call", "--json", "refl.kv", "get", `{"key": "zz"}`}, 1, `{"error":"chanos: call: kv.get: not found: no key \"zz\"","code":"not_found"}` + "\n", ""},
		{[]string{"call", "refl.kv", "nope"}, 2, "", "chanos call: dynamic: kv has no message or rpc \"nope\""},
		{[]string{"describe", "refl.kv"}, 0, kv.Definition, ""},
		{[]string{"describe", "--json", "refl.kv"}, 0, "", ""},
	} {
		r := runCmd(t, bin, dir, tc.args...)
		if tc.args[1] == "--json" && tc.args[0] == "describe" {
			var got struct{ Name, Iface, Fingerprint, Definition string }
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.status != 0 || got.Name != "refl.kv" || got.Iface != "kv" ||
				got.Fingerprint != fmt.Sprintf("%016x", kv.Fingerprint) || got.Definition != kv.Definition || strings.Count(r.stdout, "\n") != 1 {
				t.Errorf("chanos describe --json: status %d, %v, %+v, stdout %q", r.status, err, got, r.stdout)
			}
			continue
		}
		if r.status != tc.status || r.stdout != tc.stdout || !strings.HasPrefix(r.stderr, tc.stderr) || (tc.stderr == "" && r.stderr != "") {
			t.Errorf("chanos %s: status %d, stdout %q, stderr %q; want %d, %q, %q", strings.Join(tc.args, " "), r.status, r.stdout, r.stderr, tc.status, tc.stdout, tc.stderr)
		}
	}

	// Reflection services that lie: a definition that does not compile,
	// and one of another interface than the fingerprint they claim.
	for name, srv := range map[string]reflection.Server{
		"garbled.kv": lyingReflection{iface: "kv", fp: kv.Fingerprint, def: "interface kv { rpc"},
		"swapped.kv": lyingReflection{iface: "kv", fp: kv.Fingerprint, def: pingpong.Definition},
	} {
		serveKV(t, ctx, d, name, &callKV{})
		rl, err := reflection.Export(ctx, d, reflection.NameOf(name))
		if err != nil {
			t.Fatal(err)
		}
		defer rl.Close()
		go reflection.Serve(ctx, rl, srv)
	}
	for name, want := range map[string]string{
		"garbled.kv": `chanos: call: the definition garbled.kv.reflection gave does not compile: garbled.kv.reflection:1:`,
		"swapped.kv": `chanos: call: swapped.kv.reflection described kv (fingerprint ` + fmt.Sprintf("%016x", kv.Fingerprint) + `) with a definition of pingpong`,
	} {
		r := runCmd(t, bin, dir, "call", name, "get", `{"key": "a"}`)
		if r.status != 1 || !strings.HasPrefix(r.stderr, want) {
			t.Errorf("chanos call %s (a lying reflection): status %d, stderr %q; want 1 and %q...", name, r.status, r.stderr, want)
		}
	}

	start := time.Now()
	r := runCmd(t, bin, dir, "call", "--timeout", "30s", "bare.kv", "get", `{"key": "a"}`)
	if r.status != 1 || !strings.Contains(r.stderr, `"bare.kv" is exported but "bare.kv.reflection" is not`) {
		t.Errorf("chanos call of an export without reflection: status %d, stderr %q", r.status, r.stderr)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("chanos call of an export without reflection took %v: it waited for the timeout", el)
	}
}

// watchKV answers a watch with two changed messages at once.
type watchKV struct{ callKV }

func (s *watchKV) Watch(ctx context.Context, from *kv.Client, m kv.Watch) error {
	for i, key := range []string{m.Prefix + "a", m.Prefix + "b"} {
		if err := from.Send(ctx, &kv.Changed{Key: key, Version: uint64(i + 1)}); err != nil {
			return err
		}
	}
	return nil
}

// TestCallMessages: --messages N prints the next N one-way messages the
// peer sends, a JSON object a line; --wait ends the wait for more with
// status 0.
func TestCallMessages(t *testing.T) {
	bin, dir, ctx, d := cliServer(t)
	serveKV(t, ctx, d, "msgs.kv", &watchKV{})

	want := `{"message":"changed","args":{"deleted":false,"key":"p/a","version":1}}` + "\n" +
		`{"message":"changed","args":{"deleted":false,"key":"p/b","version":2}}` + "\n"
	r := runCmd(t, bin, dir, "call", "kv.if", "msgs.kv", "watch", `{"prefix": "p/"}`, "--messages", "2")
	if r.status != 0 || r.stdout != want || r.stderr != "" {
		t.Errorf("chanos call ... watch --messages 2: status %d, stdout %q, stderr %q; want %q", r.status, r.stdout, r.stderr, want)
	}
	start := time.Now()
	r = runCmd(t, bin, dir, "call", "--messages", "-1", "--wait", "300ms", "kv.if", "msgs.kv", "watch", `{"prefix": "p/"}`)
	if r.status != 0 || r.stdout != want || time.Since(start) < 300*time.Millisecond {
		t.Errorf("chanos call ... --messages -1 --wait 300ms: status %d, stdout %q, stderr %q after %v", r.status, r.stdout, r.stderr, time.Since(start))
	}
}
