package idl

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestFormatRoundTrip formats every interface of the repository, the
// Flounder corpus with its include files among them, and compiles the
// result alone: it must be the same interface (name, description, doc
// comments, annotations, messages, fingerprint), and formatting it again
// must give the same text.
func TestFormatRoundTrip(t *testing.T) {
	flounder := []string{"../testdata/flounder/platform.if", "../testdata/flounder/arch.if", "../testdata/flounder/types.if"}
	includes := map[string][]string{
		"../testdata/wire/alltypes.if": {"../testdata/wire/types.if"},
	}
	isInclude := map[string]bool{"../testdata/wire/types.if": true}
	for _, f := range flounder {
		isInclude[f] = true
	}
	var files []string
	for _, dir := range []string{"../interfaces", "../testdata/*", "../testdata/versions/*", "../examples/*", "../c/tests", "../gen/golang/testdata", "../internal/testkit/wiretest"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.if"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 20 {
		t.Fatalf("found %d interface files, want the repository's (20 or more)", len(files))
	}
	for _, file := range files {
		inc := includes[file]
		if filepath.Base(filepath.Dir(file)) == "flounder" {
			inc = flounder
		}
		if isInclude[file] {
			continue
		}
		iface, err := Load(file, inc, Options{})
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		text := iface.Format()
		again, err := Compile(Source{Name: "formatted.if", Data: []byte(text)}, nil, Options{AllowNameMismatch: true})
		if err != nil {
			t.Errorf("%s: the formatted interface does not compile: %v\n%s", file, err, text)
			continue
		}
		if again.Fingerprint() != iface.Fingerprint() || again.Canonical() != iface.Canonical() {
			t.Errorf("%s: fingerprint %016x after formatting, %016x before\n%s", file, again.Fingerprint(), iface.Fingerprint(), text)
		}
		if again.Name != iface.Name || again.Description != iface.Description || again.Doc != iface.Doc {
			t.Errorf("%s: name, description or doc changed: %q %q %q, want %q %q %q", file, again.Name, again.Description, again.Doc, iface.Name, iface.Description, iface.Doc)
		}
		for i, m := range iface.Messages {
			g := again.Messages[i]
			if g.Doc != m.Doc || len(g.Annotations) != len(m.Annotations) {
				t.Errorf("%s: message %s: doc %q and %d annotations, want %q and %d", file, m.Name, g.Doc, len(g.Annotations), m.Doc, len(m.Annotations))
			}
			for j, a := range m.Args {
				if g.Args[j].Doc != a.Doc || g.Args[j].LenName != a.LenName {
					t.Errorf("%s: %s.%s: doc %q, length %q; want %q, %q", file, m.Name, a.Name, g.Args[j].Doc, g.Args[j].LenName, a.Doc, a.LenName)
				}
			}
		}
		if again.Format() != text {
			t.Errorf("%s: formatting twice differs:\n%s\n---\n%s", file, text, again.Format())
		}
	}
}

// TestFormatDescriptionEscapes checks that a description with quotes,
// backslashes, control bytes and digits after them, and UTF-8, comes back
// byte for byte.
func TestFormatDescriptionEscapes(t *testing.T) {
	src := `interface d "a \"quoted\" \\ path\n\t1\x07\&2 — é" { message m(); };`
	iface, err := compile(t, "d.if", src)
	if err != nil {
		t.Fatal(err)
	}
	want := "a \"quoted\" \\ path\n\t1\a2 — é"
	if iface.Description != want {
		t.Fatalf("description %q, want %q", iface.Description, want)
	}
	again, err := compile(t, "d.if", iface.Format())
	if err != nil {
		t.Fatalf("%v\n%s", err, iface.Format())
	}
	if again.Description != want {
		t.Errorf("after formatting: %q, want %q\n%s", again.Description, want, iface.Format())
	}
}

// TestFormatIncludedTypes checks that only the include files' types that
// the interface uses, directly or through another type, are written.
func TestFormatIncludedTypes(t *testing.T) {
	inc := Source{Name: "inc.if", Data: []byte(`
		alias unused uint8;
		alias coreid uint8;
		typedef struct { coreid core; uint32 n; } loc;
		typedef loc loc2;
	`)}
	iface, err := compile(t, "t.if", `interface t { message m(loc2 l); };`, inc)
	if err != nil {
		t.Fatal(err)
	}
	text := iface.Format()
	if strings.Contains(text, "unused") || !strings.Contains(text, "alias coreid uint8;") || !strings.Contains(text, "} loc;") || !strings.Contains(text, "typedef loc loc2;") {
		t.Errorf("formatted:\n%s", text)
	}
}
