// Package usermodule runs the README's "Your own service in five
// minutes" as a user would: in a new module outside the tree, with the
// files and commands of that section, chanosc and chanos as the module's
// tools (go get -tool, go generate, go build), and the server and client
// as two programs against a real monitor; then the same service in C,
// built against an installed libchanos with pkg-config, and the Go and C
// programs against each other.
//
// The module reaches chanos through a replace of the checkout, and its
// steps run offline (GOPROXY=off keeps the go command from asking the
// module proxy for anything), once the module cache holds chanos's whole
// module graph (go mod download all, with the proxy). The C part needs the C build (CHANOS_C_BUILD), as
// the tests of tests/interop do: without it, it skips, or fails when CI
// is set.
package usermodule

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/chanos/chanos/internal/testkit"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testkit.CleanPrograms()
	os.Exit(code)
}

const section = "## Your own service in five minutes"

// walkthrough is what the README's section holds for the test: files by
// path (a line **`PATH`** before a fenced block) and scripts by name (a
// line <!-- tests/usermodule: NAME --> before a fenced block).
type walkthrough struct {
	files   map[string]string
	scripts map[string]string
	text    string
}

var (
	fileMark   = regexp.MustCompile("^\\*\\*`([^`]+)`\\*\\*$")
	scriptMark = regexp.MustCompile(`^<!-- tests/usermodule: (\S+) -->$`)
)

// readWalkthrough reads the section from the README of root.
func readWalkthrough(t *testing.T, root string) walkthrough {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n"+section+"\n")
	if i < 0 {
		t.Fatalf("README.md has no section %q", section)
	}
	text = text[i+1:]
	if j := strings.Index(text[len(section):], "\n## "); j >= 0 {
		text = text[:len(section)+j+1]
	}
	w := walkthrough{files: map[string]string{}, scripts: map[string]string{}, text: text}
	var file, script string // the label of the next block
	var block *strings.Builder
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case block != nil && line == "```":
			switch {
			case file != "":
				w.files[file] = block.String()
			case script != "":
				w.scripts[script] = block.String()
			}
			block, file, script = nil, "", ""
		case block != nil:
			block.WriteString(line + "\n")
		case strings.HasPrefix(line, "```"):
			block = &strings.Builder{}
		case fileMark.MatchString(line):
			file = fileMark.FindStringSubmatch(line)[1]
		case scriptMark.MatchString(line):
			script = scriptMark.FindStringSubmatch(line)[1]
		}
	}
	for _, f := range []string{"counter/counter.if", "counter/generate.go", "server/main.go", "client/main.go", "server.c", "client.c"} {
		if w.files[f] == "" {
			t.Fatalf("the README's walkthrough has no file %s", f)
		}
	}
	for _, s := range []string{"go-setup", "go-build", "c-build"} {
		if w.scripts[s] == "" {
			t.Fatalf("the README's walkthrough has no script %s", s)
		}
	}
	return w
}

// writeFiles writes the walkthrough's files whose paths match keep into
// dir.
func (w walkthrough) writeFiles(t *testing.T, dir string, keep func(string) bool) {
	t.Helper()
	for name, data := range w.files {
		if !keep(name) {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// offline is the environment of the go command in the user's module: no
// module proxy, no checksum database, no workspace, no toolchain switch.
var offline = []string{"GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false"}

// sh runs script with bash in dir, stopping at the first failure, and
// returns what it printed.
func sh(t *testing.T, dir string, env []string, what, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s\n%s", what, err, script, out)
	}
	return string(out)
}

// totals is what a client prints that adds 1, 2 and 3 to a count of
// from.
func totals(from int) string {
	var b strings.Builder
	for d := 1; d <= 3; d++ {
		from += d
		fmt.Fprintf(&b, "add %d: total %d\n", d, from)
	}
	return b.String()
}

// client runs a client program against the monitor in dir and checks
// what it prints.
func client(t *testing.T, dir, path, want string) {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), "CHANOS_DIR="+dir)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s: %v\n%s%s", path, err, out, stderr)
	}
	if string(out) != want {
		t.Fatalf("%s printed\n%s\nwant\n%s", path, out, want)
	}
}

// server starts a server program against the monitor in dir and waits
// until it serves.
func server(t *testing.T, dir, path string) *testkit.Child {
	t.Helper()
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), "CHANOS_DIR="+dir)
	s := testkit.Start(t, cmd)
	s.Expect(t, "serving counter")
	return s
}

func TestWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module and runs its programs")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	w := readWalkthrough(t, root)

	// A module that requires chanos reads the go.mod files, and its go mod
	// tidy the code, of modules in chanos's module graph that building
	// this repository never loads (its graph is pruned). A user's go
	// command fetches them from the module proxy; here they are fetched
	// first, the same way, so that the user's steps below run offline.
	// The checkout's go.mod and go.sum are copied for it, as the go
	// command adds the sums of what it downloads.
	modfile := filepath.Join(t.TempDir(), "go.mod")
	sh(t, root, nil, "go mod download all", "cp go.mod "+modfile+" && cp go.sum "+filepath.Dir(modfile)+"/ && go mod download -modfile="+modfile+" all")

	// The module, as the section makes it: its setup script run as it
	// stands, the checkout in place of /path/to/chanos.
	parent := t.TempDir()
	setup := w.scripts["go-setup"]
	if !strings.Contains(setup, "/path/to/chanos") {
		t.Fatalf("the go-setup script does not replace chanos by /path/to/chanos:\n%s", setup)
	}
	sh(t, parent, offline, "go-setup", strings.ReplaceAll(setup, "/path/to/chanos", root))
	mod := filepath.Join(parent, "counter-demo")
	gomod, err := os.ReadFile(filepath.Join(mod, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\tgithub.com/chanos/chanos/cmd/chanos\n", "\tgithub.com/chanos/chanos/cmd/chanosc\n", "replace github.com/chanos/chanos => " + root} {
		if !strings.Contains(string(gomod), want) {
			t.Fatalf("go.mod lacks %q:\n%s", want, gomod)
		}
	}
	w.writeFiles(t, mod, func(name string) bool { return strings.Contains(name, "/") })
	sh(t, mod, offline, "go-build", w.scripts["go-build"])
	if _, err := os.Stat(filepath.Join(mod, "counter", "counter.go")); err != nil {
		t.Fatalf("go generate wrote no counter/counter.go: %v", err)
	}
	// The package has one doc comment, the generated one: go doc prints
	// every file's, one after another.
	if doc := sh(t, mod, offline, "go doc ./counter", "go doc ./counter"); strings.Count(doc, "Package counter ") != 1 {
		t.Errorf("go doc ./counter shows %d package doc comments, want the generated one:\n%s", strings.Count(doc, "Package counter "), doc)
	}
	// go mod tidy keeps what the tools need, and the module still builds.
	sh(t, mod, offline, "tidy", "go mod tidy && go build ./... && grep -q 'cmd/chanosc' go.mod")

	dir, _ := testkit.StartMonitor(t)
	goServer := server(t, dir, filepath.Join(mod, "bin", "server"))
	goClient := filepath.Join(mod, "bin", "client")
	client(t, dir, goClient, totals(0))
	client(t, dir, goClient, totals(6)) // the count is the server's
	ps := sh(t, mod, append(offline, "CHANOS_DIR="+dir), "go tool chanos ps", "go tool chanos ps")
	if !strings.Contains(ps, "counter-server") || !strings.Contains(ps, "counter (counter)") {
		t.Errorf("go tool chanos ps does not show the server and its export:\n%s", ps)
	}
	// The README's call from the shell, on the count of 12 the clients left.
	call := `go tool chanos call counter/counter.if counter add '{"delta": 5}'`
	if out := sh(t, mod, append(offline, "CHANOS_DIR="+dir), call, call); out != `{"total":17}`+"\n" || !strings.Contains(w.text, call) {
		t.Errorf("%s: %q, want {\"total\":17}, and the README to show the command", call, out)
	}
	if v := sh(t, mod, offline, "go tool chanosc --version", "go tool chanosc --version"); !strings.HasPrefix(v, "chanosc devel go1.") {
		t.Errorf("go tool chanosc --version: %q, want chanosc devel (a replaced module) and the Go version", v)
	}

	t.Run("c", func(t *testing.T) {
		build := testkit.CBuild(t, filepath.Join("examples", "pingpong_server"))
		for _, tool := range []string{"pkg-config", "cc"} {
			if _, err := exec.LookPath(tool); err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("%s not found", tool)
				}
				t.Skipf("%s not found", tool)
			}
		}
		// What `make install PREFIX=...` does (the Makefile's install
		// target), without building again: the C build's install, and
		// chanosc beside it.
		if !strings.Contains(w.text, "make install PREFIX=") || !strings.Contains(w.text, "PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig") {
			t.Fatal("the walkthrough no longer installs with make install PREFIX=... and PKG_CONFIG_PATH")
		}
		prefix := t.TempDir()
		sh(t, "", nil, "install", fmt.Sprintf("cmake --install %q --prefix %q >/dev/null && install -D -m 0755 %q %q",
			build, prefix, testkit.GoProgram(t, "github.com/chanos/chanos/cmd/chanosc"), filepath.Join(prefix, "bin", "chanosc")))

		// The project: the section's counter.if, server.c and client.c;
		// its build script run as it stands, the installed chanosc and
		// pkg-config file found as the section says. cc is a wrapper
		// that adds warnings as errors, and the sanitizers when the
		// library was built with them (they link only into programs
		// built with them).
		proj := t.TempDir()
		w.writeFiles(t, proj, func(name string) bool { return strings.HasSuffix(name, ".c") })
		if err := os.WriteFile(filepath.Join(proj, "counter.if"), []byte(w.files["counter/counter.if"]), 0o644); err != nil {
			t.Fatal(err)
		}
		realCC, err := exec.LookPath("cc")
		if err != nil {
			t.Fatal(err)
		}
		flags := "-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pedantic"
		if cache, err := os.ReadFile(filepath.Join(build, "CMakeCache.txt")); err == nil && strings.Contains(string(cache), "CHANOS_SANITIZE:BOOL=ON") {
			flags += " -fsanitize=address,undefined"
		}
		wrappers := t.TempDir()
		if err := os.WriteFile(filepath.Join(wrappers, "cc"), []byte(fmt.Sprintf("#!/bin/sh\nexec %q %s \"$@\"\n", realCC, flags)), 0o755); err != nil {
			t.Fatal(err)
		}
		env := []string{
			"PATH=" + wrappers + string(os.PathListSeparator) + filepath.Join(prefix, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"),
			"PKG_CONFIG_PATH=" + filepath.Join(prefix, "lib", "pkgconfig"),
		}
		sh(t, proj, env, "c-build", w.scripts["c-build"])

		// The C client adds to the Go server's count, then the C server
		// serves the C client and the Go client.
		cClient := filepath.Join(proj, "client")
		client(t, dir, cClient, totals(17)) // the shell's call added 5
		goServer.Cmd.Process.Signal(syscall.SIGTERM)
		if err := goServer.Wait(t); err != nil {
			t.Fatalf("the Go server did not end cleanly on SIGTERM: %v", err)
		}
		server(t, dir, filepath.Join(proj, "server"))
		client(t, dir, cClient, totals(0))
		client(t, dir, goClient, totals(6))
	})
}
