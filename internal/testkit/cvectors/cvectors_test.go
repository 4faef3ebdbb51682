package main

import (
	"errors"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	cgen "github.com/chanos/chanos/gen/c"
	"github.com/chanos/chanos/idl"
	"github.com/chanos/chanos/internal/testkit/wiretest/alltypes"
	"github.com/chanos/chanos/wire"
)

func TestIntLiteral(t *testing.T) {
	for in, want := range map[string]string{
		"0": "0", "-5": "-5", "2147483647": "2147483647", "-2147483647": "-2147483647",
		"-2147483648":          "INT64_C(-2147483648)",
		"2147483648":           "UINT64_C(2147483648)",
		"18446744073709551615": "UINT64_C(18446744073709551615)",
		"-9223372036854775808": "INT64_MIN",
		"-9223372036854775807": "INT64_C(-9223372036854775807)",
	} {
		n, _ := new(big.Int).SetString(in, 10)
		if got := intLiteral(n); got != want {
			t.Errorf("intLiteral(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestCString(t *testing.T) {
	if got, want := cString([]byte("a b_Z9\x00\"?\\\xff")), `"a b_Z9\000\042\077\134\377"`; got != want {
		t.Errorf("cString = %s, want %s", got, want)
	}
}

func TestBadVectors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("v.if", `interface v { message m(uint8 a); };`)
	for _, c := range []struct{ json, want string }{
		{`{"interface": "v.if", "vectors": [{"name": "x", "message": "m", "kind": "message", "fields": {}, "hex": ""}]}`, "no value for argument a"},
		{`{"interface": "v.if", "vectors": [{"name": "x", "message": "m", "kind": "message", "fields": {"a": 1, "b": 2}, "hex": ""}]}`, "b is not an argument"},
		{`{"interface": "v.if", "vectors": [{"name": "x", "message": "n", "kind": "message", "fields": {}, "hex": ""}]}`, "no message \"n\""},
		{`{"interface": "v.if", "vectors": [{"name": "x", "message": "m", "kind": "call", "fields": {}, "hex": ""}]}`, "no frame of kind"},
		{`{"interface": "v.if", "vectors": [{"name": "x", "message": "m", "kind": "message", "fields": {"a": 256}, "hex": ""}]}`, "out of range"},
		{`{"interface": "v.if", "malformed": [{"name": "x", "hex": "zz", "error": "size"}]}`, "bad hex"},
		{`{"interface": "v.if", "malformed": [{"name": "x", "hex": "", "error": "oops"}]}`, "unknown error"},
	} {
		_, err := generateFile(write("v.json", c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got error %v, want one containing %q", c.json, err, c.want)
		}
	}
}

// TestAlltypes generates the C test of the shared vectors and, if gcc is
// installed, builds it with the generated interface under the sanitizers
// and runs it, as the C build does. Under CI a missing gcc fails it.
func TestAlltypes(t *testing.T) {
	const vectors = "../../../testdata/wire/alltypes.json"
	if _, err := os.Stat(vectors); err != nil {
		t.Fatalf("the shared vectors: %v", err)
	}
	src, err := generateFile(vectors)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("gcc not found (CI is set): %v", err)
		}
		t.Skip("gcc not found")
	}
	iface, err := idl.Load("../../../testdata/wire/alltypes.if", []string{"../../../testdata/wire/types.if"}, idl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	files, err := cgen.New().Generate(iface)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	test := filepath.Join(dir, "vectors.c")
	if err := os.WriteFile(test, src, 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "vectors")
	args := []string{"-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-g",
		"-fsanitize=address,undefined", "-fno-sanitize-recover=all",
		"-I../../../c/include", "-I../../../c/tests", "-I" + dir, "-o", exe,
		test, filepath.Join(dir, "alltypes.c"), "../../../c/src/wire.c", "../../../c/src/errors.c",
		// the stubs and dispatch of the generated code call the connection layer
		"-D_GNU_SOURCE", "-pthread", "../../../c/src/ump.c", "../../../c/src/conn.c",
		"../../../c/src/endpoint_ref.c", "../../../c/src/serve.c"}
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("compiling: %v\n%s", err, out)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "CHANOS_MUTATIONS=500", "CHANOS_VECTOR_FAULTS=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("vector test failed: %v\n%s", err, out)
	}
	checkFaultTexts(t, iface, out)
}

// placeholder is a capability passed beside a frame to Go's decoders.
type placeholder struct{}

func (placeholder) Close() error { return nil }

// checkFaultTexts compares the descriptions C gives the faults of the
// malformed vectors (the vector test's "fault" lines, with
// CHANOS_VECTOR_FAULTS set) with Go's errors for the same frames, which
// they must match word for word. Where Go's fast path for a frame of fixed
// size refuses it as a whole (wire.FixedError names its field "body"), C
// names the field at fault instead: there only the message and the code
// must agree.
func checkFaultTexts(t *testing.T, iface *idl.Interface, out []byte) {
	texts := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.SplitN(line, "\t", 3); len(f) == 3 && f[0] == "fault" {
			texts[f[1]] = f[2]
		}
	}
	vf, err := readVectors("../../../testdata/wire/alltypes.json")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]wire.Kind{"message": wire.KindMessage, "call": wire.KindCall, "reply": wire.KindReply}
	for _, v := range vf.Malformed {
		frame, err := parseHex(v.Hex)
		if err != nil {
			t.Fatal(err)
		}
		caps := make([]wire.Cap, v.NCaps)
		for i := range caps {
			caps[i] = placeholder{}
		}
		if v.Message == "" {
			_, err = alltypes.Decode(frame, caps)
		} else {
			var m *idl.Message
			for _, im := range iface.Messages {
				if im.Name == v.Message {
					m = im
				}
			}
			if m == nil {
				t.Fatalf("%s: no message %s", v.Name, v.Message)
			}
			err = alltypes.New(m.Number, kinds[v.Kind]).Decode(frame, caps)
		}
		var we *wire.Error
		if !errors.As(err, &we) {
			t.Errorf("%s: Go's error %v is no *wire.Error", v.Name, err)
			continue
		}
		got, ok := texts[v.Name]
		switch {
		case !ok:
			t.Errorf("%s: C described no fault", v.Name)
		case we.Field == "body" && we.Offset == wire.HeaderSize && !hasArg(iface, v.Message, "body"):
			if prefix := "wire: " + we.Message + ": field "; !strings.HasPrefix(got, prefix) {
				t.Errorf("%s: C says\n\t%s\nGo (a fixed frame's fast path) says\n\t%s", v.Name, got, we)
			}
		case got != we.Error():
			t.Errorf("%s: C says\n\t%s\nGo says\n\t%s", v.Name, got, we)
		}
	}
}

// hasArg reports whether message msg of iface has an argument name.
func hasArg(iface *idl.Interface, msg, name string) bool {
	for _, m := range iface.Messages {
		for _, a := range m.Args {
			if m.Name == msg && a.Name == name {
				return true
			}
		}
	}
	return false
}
