package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The Flounder corpus, testdata/flounder: interfaces compiled as
// Barrelfish's build runs Flounder, with -i platform.if -i arch.if
// -i types.if before each (docs/idl.md, "Include files").
const corpus = "../../testdata/flounder"

var includes = []string{"platform.if", "arch.if", "types.if"}

func flounderArgs(lang, out, file string) []string {
	var args []string
	for _, inc := range includes {
		args = append(args, "-i", filepath.Join(corpus, inc))
	}
	return append(args, "-lang", lang, "-o", out, file)
}

// corpusFiles returns the corpus's interfaces, the include files aside.
func corpusFiles(t *testing.T) []string {
	t.Helper()
	all, err := filepath.Glob(filepath.Join(corpus, "*.if"))
	if err != nil || len(all) == 0 {
		t.Fatalf("no interfaces in %s: %v", corpus, err)
	}
	var files []string
	for _, f := range all {
		inc := false
		for _, i := range includes {
			inc = inc || filepath.Base(f) == i
		}
		if !inc {
			files = append(files, f)
		}
	}
	return files
}

func chanosc(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errs bytes.Buffer
	status := run(args, &out, &errs)
	return status, errs.String()
}

// TestFlounderCorpusGo compiles each interface of the corpus to Go, twice
// (the output must not change), checks the names the rules give, and runs
// go vet on the packages.
func TestFlounderCorpusGo(t *testing.T) {
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	// Under testdata, which ./... patterns skip, but inside this module,
	// so that go vet resolves the generated packages' imports.
	root, err := os.MkdirTemp("testdata", "flounder")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(root)
		os.Remove("testdata") // if empty
	})
	var pkgs []string
	src := map[string]string{}
	for _, f := range corpusFiles(t) {
		name := strings.TrimSuffix(filepath.Base(f), ".if")
		dir := filepath.Join(root, name)
		if status, errs := chanosc(t, flounderArgs("go", dir, f)...); status != 0 {
			t.Fatalf("chanosc %s: status %d\n%s", f, status, errs)
		}
		first, err := os.ReadFile(filepath.Join(dir, name+".go"))
		if err != nil {
			t.Fatal(err)
		}
		again := t.TempDir()
		if status, errs := chanosc(t, flounderArgs("go", again, f)...); status != 0 {
			t.Fatalf("chanosc %s again: %s", f, errs)
		}
		if second, _ := os.ReadFile(filepath.Join(again, name+".go")); !bytes.Equal(first, second) {
			t.Errorf("%s: the Go output differs between runs", f)
		}
		src[name] = string(first)
		pkgs = append(pkgs, "./"+dir)
	}
	for name, wants := range map[string][]string{
		"sensors": {
			"type TriggerT struct", "type Trigger struct", "Trigger TriggerT",
			"type ReadingT uint16", "type Reading struct", "Reading ReadingT",
			"type ReadCallT uint8", "type ReadCall struct",
			"EdgeAbove ", "type Coreid = uint8", "Err wire.Errval", "Sink wire.Iref",
			"type Physaddr = uint64",
		},
		"keywords": {
			"type StructT struct", "type Struct struct", "type EnumT uint32", "EnumTAlias ", "Struct EnumT",
			"type TypedefT = StructT", "type AliasT = uint16", "type Structs [2]AliasT",
			"Typedef(ctx context.Context, struct_ StructT) (alias []byte, type_ wire.Errval, err error)",
			"Alias(ctx context.Context, func_ int32, class uint8) (new_ uint64, this bool, err error)",
		},
		"lexical": {
			`Escapes:`, `"quoted", tab here, ABC, \a\a\x00, a gap, comment end */, start /* and`, "trigraph ??/ kept apart, Ӓ.",
			"type Block [10]byte", "type Page [15]byte", "type Words [15]uint16",
			"MaxPutDataLen = 256", "MaxPutNameLen = 64", "MaxGetDataLen = 256",
		},
	} {
		for _, want := range wants {
			if !strings.Contains(src[name], want) {
				t.Errorf("%s.go lacks %q", name, want)
			}
		}
	}
	out, err := exec.Command("go", append([]string{"vet"}, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go vet: %v\n%s", err, out)
	}
}

// TestFlounderCorpusC compiles each interface of the corpus to C and the
// C with the flags of the C build: C11, -Wall -Wextra -Werror -pedantic.
func TestFlounderCorpusC(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found")
	}
	dir := t.TempDir()
	var srcs, headers []string
	for _, f := range corpusFiles(t) {
		if status, errs := chanosc(t, flounderArgs("c", dir, f)...); status != 0 {
			t.Fatalf("chanosc %s: status %d\n%s", f, status, errs)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".if")
		srcs = append(srcs, filepath.Join(dir, name+".c"))
		headers = append(headers, name+".h")
	}
	h := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name+".h"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for name, wants := range map[string][]string{
		"sensors": {
			"struct sensors_trigger_t {", "struct sensors_trigger {", "struct sensors_trigger_t trigger;",
			"typedef uint16_t sensors_reading_t;", "struct sensors_reading {", "typedef uint8_t sensors_read_call_t;",
			"struct sensors_read_call {", "SENSORS_EDGE_ABOVE", "uint64_t err;", "struct chanos_iref sink;",
		},
		"keywords": {
			"struct keywords_struct_t {", "uint32_t typedef_;", "uint8_t enum_;", "bool default_;",
			"enum keywords_enum_t {", "KEYWORDS_ENUM_T_CLASS", "struct keywords_struct {",
			"typedef uint16_t keywords_alias_t;", "struct keywords_struct_t struct_;", "int32_t func;", "uint8_t class_;",
		},
		"lexical": {
			`"Escapes: \"quoted\",`, `tab\there, ABC, \a\a\x00, a gap, comment end *\/, start /\* and trigraph ?\?/`, `kept apart, Ӓ".`,
			"typedef uint8_t lexical_block[10];", "typedef uint8_t lexical_page[15];",
		},
	} {
		text := h(name)
		for _, want := range wants {
			if !strings.Contains(text, want) {
				t.Errorf("%s.h lacks %q", name, want)
			}
		}
	}
	flags := []string{"-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wshadow",
		"-I../../c/include", "-I" + dir}
	for _, src := range srcs {
		out, err := exec.Command(cc, append(flags, "-c", "-o", filepath.Join(dir, "x.o"), src)...).CombinedOutput()
		if err != nil {
			t.Fatalf("compiling %s: %v\n%s", filepath.Base(src), err, out)
		}
	}
	// All headers in one translation unit: the prefixes keep them apart.
	var all strings.Builder
	for _, hd := range headers {
		fmt.Fprintf(&all, "#include \"%s\"\n", hd)
	}
	all.WriteString("int main(void) { return 0; }\n")
	unit := filepath.Join(dir, "all.c")
	if err := os.WriteFile(unit, []byte(all.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, append(flags, "-fsyntax-only", unit)...).CombinedOutput(); err != nil {
		t.Fatalf("the headers together: %v\n%s", err, out)
	}
	// And as C++: the keyword rule keeps C++'s keywords out of the members.
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Log("g++ not found: the headers are not checked as C++")
		return
	}
	unit = filepath.Join(dir, "all.cc")
	if err := os.WriteFile(unit, []byte(strings.Replace(all.String(), "main(void)", "main()", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
		"-I../../c/include", "-I"+dir, unit).CombinedOutput()
	if err != nil {
		t.Fatalf("the headers as C++: %v\n%s", err, out)
	}
}

// TestFlounderCorpusErrors runs chanosc on the corpus's malformed
// interfaces: each fails with status 1 and errors that start with
// FILE:LINE:COL, in both languages.
func TestFlounderCorpusErrors(t *testing.T) {
	bad := filepath.Join(corpus, "bad")
	pos := regexp.MustCompile(`^[^:\s]+\.if:\d+:\d+: `)
	for file, want := range map[string]struct {
		lang, err string
	}{
		"redefined.if":     {"go", "redefined.if:3:11: type coreid is declared again with a different definition (first declared at ../../testdata/flounder/types.if:9:7)"},
		"errval_struct.if": {"go", "errval_struct.if:2:37: struct errval redeclares a builtin type"},
		"unclosed.if":      {"c", "unclosed.if:2:5: comment not terminated"},
		"escape.if":        {"go", `escape.if:1:21: unknown escape \z in string`},
		"number.if":        {"c", `number.if:2:25: malformed number "0o9"`},
		"ccollide.if":      {"c", "ccollide.if:5:13: C name CCOLLIDE_MSG_PING of the number of message ping collides with that of enumerator ping of msg at ../../testdata/flounder/bad/ccollide.if:4:20"},
	} {
		t.Run(file, func(t *testing.T) {
			status, errs := chanosc(t, flounderArgs(want.lang, t.TempDir(), filepath.Join(bad, file))...)
			if status != 1 {
				t.Errorf("status %d, want 1", status)
			}
			for _, line := range strings.Split(strings.TrimSpace(errs), "\n") {
				if !pos.MatchString(line) {
					t.Errorf("error line %q does not start with FILE:LINE:COL:", line)
				}
			}
			if !strings.Contains(errs, want.err) {
				t.Errorf("errors\n%s\ndo not contain\n%s", errs, want.err)
			}
		})
	}
}

// A mistake on the command line says what it is on its first line, then
// prints the usage, and exits 2.
func TestCommandLineMistakes(t *testing.T) {
	file := filepath.Join(corpus, "sensors.if")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-lang", "go", "-o", t.TempDir()}, "chanosc: give the FILE.if to compile"},
		{[]string{file, "-lang", "go", "-o", t.TempDir()}, `chanosc: give one FILE.if, after the flags; not ["` + file + `" "-lang"`},
		{[]string{"-lang", "go", file}, "chanosc: give the output directory: -o OUTDIR"},
		{[]string{"--version", file}, `chanosc: --version takes no arguments, not ["` + file + `"]`},
	} {
		status, errs := chanosc(t, c.args...)
		first, rest, _ := strings.Cut(errs, "\n")
		if status != 2 || !strings.HasPrefix(first, c.want) || !strings.HasPrefix(rest, "usage: chanosc") {
			t.Errorf("chanosc %q: status %d, stderr\n%s\nwant 2, a first line %q, then the usage", c.args, status, errs, c.want)
		}
	}
}
