package c

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chanos/chanos/gen"
	"github.com/chanos/chanos/idl"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func generate(t *testing.T, iface *idl.Interface) []gen.File {
	t.Helper()
	files, err := New().Generate(iface)
	if err != nil {
		t.Fatalf("Generate(%s): %v", iface.Name, err)
	}
	return files
}

// TestGolden compares the output for two interfaces with the files in
// testdata/; run with -update after an intended change and review the diff.
func TestGolden(t *testing.T) {
	for _, iface := range []*idl.Interface{pingpongAST(), ctestAST()} {
		for _, f := range generate(t, iface) {
			golden := filepath.Join("testdata", f.Name+".golden")
			if *update {
				if err := os.WriteFile(golden, f.Data, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(f.Data, want) {
				t.Errorf("%s differs from %s; run go test ./gen/c -update and review the diff", f.Name, golden)
			}
		}
	}
}

// TestCtestMatchesIDL checks that ctestAST and c/tests/ctest.if, which the
// C tests compile with chanosc, describe the same interface.
func TestCtestMatchesIDL(t *testing.T) {
	iface, err := idl.Load("../../c/tests/ctest.if", nil, idl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	parsed := generate(t, iface)
	for i, f := range generate(t, ctestAST()) {
		if !bytes.Equal(f.Data, parsed[i].Data) {
			t.Errorf("%s from c/tests/ctest.if differs from the one from ctestAST", f.Name)
		}
	}
}

func TestDeterministic(t *testing.T) {
	a := generate(t, ctestAST())
	for range 5 {
		b := generate(t, ctestAST())
		for i := range a {
			if a[i].Name != b[i].Name || !bytes.Equal(a[i].Data, b[i].Data) {
				t.Fatalf("output %s differs between runs", a[i].Name)
			}
		}
	}
}

// TestNoAbsolutePaths checks that output does not depend on where the
// interface file lives.
func TestNoAbsolutePaths(t *testing.T) {
	for _, f := range generate(t, pingpongAST()) {
		if bytes.Contains(f.Data, []byte("/somewhere")) {
			t.Errorf("%s mentions the directory of the interface file", f.Name)
		}
	}
}

func TestFileNames(t *testing.T) {
	files := generate(t, pingpongAST())
	if len(files) != 2 || files[0].Name != "pingpong.h" || files[1].Name != "pingpong.c" {
		t.Fatalf("got files %v %v, want pingpong.h and pingpong.c", files[0].Name, files[1].Name)
	}
}

func TestMember(t *testing.T) {
	for in, want := range map[string]string{
		"int": "int_", "default": "default_", "bool": "bool_", "true": "true_",
		"errno": "errno_", "stdin": "stdin_", "_Bool": "_Bool_", "linux": "linux_",
		"client_id": "client_id", "Int": "Int", "value": "value", "len": "len",
	} {
		if got := Member(in); got != want {
			t.Errorf("Member(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKeywordMembers(t *testing.T) {
	h := string(generate(t, ctestAST())[0].Data)
	for _, want := range []string{"int32_t register_;", "uint32_t long_;", "uint16_t default_[CTEST_KEYWORDS_DEFAULT_MAX];", "uint8_t errno_;"} {
		if !strings.Contains(h, want) {
			t.Errorf("ctest.h lacks %q", want)
		}
	}
}

func TestIncludedTypes(t *testing.T) {
	inc := &builder{file: "/inc/types.if"}
	color := inc.enum("color", "red")
	color.Included = true
	b := &builder{file: "/x/t.if"}
	iface := b.iface("t", []*idl.TypeDecl{color}, b.message("m", b.arg("c", ref(color))))
	h := string(generate(t, iface)[0].Data)
	if !strings.Contains(h, "/* enum color, from types.if. */\nenum t_color {") {
		t.Errorf("included type not marked with its file:\n%s", h)
	}
}

// TestTypeOrder checks that a type follows the types it contains, even
// when declared before them.
func TestTypeOrder(t *testing.T) {
	b := &builder{file: "/x/t.if"}
	inner := &idl.TypeDecl{Name: "inner", Kind: idl.DeclStruct}
	outer := b.strct("outer", b.field("i", ref(inner)))
	inner.Pos = b.pos()
	inner.Fields = []*idl.Field{b.field("x", builtin(idl.Uint8))}
	h := string(generate(t, b.iface("t", []*idl.TypeDecl{outer, inner}))[0].Data)
	if strings.Index(h, "struct t_inner {") > strings.Index(h, "struct t_outer {") {
		t.Error("struct t_outer is declared before struct t_inner, which it contains")
	}
}

func TestMaxSizes(t *testing.T) {
	h := string(generate(t, ctestAST())[0].Data)
	for _, want := range []string{
		"#define CTEST_EMPTY_MAX_FRAME_SIZE 16\n",
		// 1+2+4+8 + 1+2+4+8 + 8+8+8 + 1+1+8 + 32 + 4+4 = 104, plus 16.
		"#define CTEST_SCALARS_MAX_FRAME_SIZE 120\n",
		// 4+16 + 4+8 + 4+4, plus 16.
		"#define CTEST_TEXTS_MAX_FRAME_SIZE 56\n",
		"#define CTEST_MAX_FRAME_SIZE 1052\n", // an rpc error reply
		"#define CTEST_MAX_CAPS       5\n",
	} {
		if !strings.Contains(h, want) {
			t.Errorf("ctest.h lacks %q", want)
		}
	}
}

func TestLiteral(t *testing.T) {
	for v, want := range map[uint64]string{
		0: "0", 2147483647: "2147483647", 2147483648: "2147483648u",
		4294967295: "4294967295u", 4294967296: "UINT64_C(4294967296)",
	} {
		if got := literal(v); got != want {
			t.Errorf("literal(%d) = %s, want %s", v, got, want)
		}
	}
}

func TestHugeBounds(t *testing.T) {
	b := &builder{file: "/x/big.if"}
	iface := b.iface("big", nil,
		b.message("m", b.dyn("v", builtin(idl.Uint64), "n", 1<<32-1), b.str("s", 1<<32-1)))
	h := string(generate(t, iface)[0].Data)
	// 16 + 4 + 8*(2^32-1) + 4 + 2^32-1
	if !strings.Contains(h, "#define BIG_M_MAX_FRAME_SIZE UINT64_C(38654705679)") {
		t.Errorf("wrong frame size for huge bounds:\n%s", h)
	}
}

// TestCollisions checks that IDL names that meet in C are reported at the
// second one's position.
func TestCollisions(t *testing.T) {
	cases := []struct {
		name  string
		iface func() *idl.Interface
		want  string
	}{{
		"enumerator and message number",
		func() *idl.Interface {
			b := &builder{file: "/x/p.if"}
			return b.iface("p", []*idl.TypeDecl{b.enum("msg", "ping")}, b.message("ping"))
		},
		"p.if:3:1: C name P_MSG_PING of the number of message ping collides with that of enumerator ping of msg at /x/p.if:2:1",
	}, {
		"rpc call and message",
		func() *idl.Interface {
			b := &builder{file: "/x/p.if"}
			return b.iface("p", nil, b.rpc("get"), b.message("get_call"))
		},
		"p.if:2:1: C name p_get_call of message get_call collides with that of rpc get (call) at /x/p.if:1:1",
	}, {
		"enumerators differing in case",
		func() *idl.Interface {
			b := &builder{file: "/x/p.if"}
			return b.iface("p", []*idl.TypeDecl{b.enum("e", "red", "RED")})
		},
		"p.if:3:1: C name P_E_RED of enumerator RED of e collides with that of enumerator red of e at /x/p.if:2:1",
	}, {
		"keyword rule",
		func() *idl.Interface {
			b := &builder{file: "/x/p.if"}
			return b.iface("p", nil, b.message("m", b.arg("int", builtin(idl.Uint8)), b.arg("int_", builtin(idl.Uint8))))
		},
		"p.if:2:1: C name int_ of argument int_ of m collides with that of argument int of m at /x/p.if:1:1",
	}, {
		"length and argument",
		func() *idl.Interface {
			b := &builder{file: "/x/p.if"}
			return b.iface("p", nil, b.message("m", b.arg("n", builtin(idl.Uint8)), b.dyn("v", builtin(idl.Uint32), "n", 4)))
		},
		"p.if:2:1: C name n of length n of argument v collides with that of argument n of m at /x/p.if:1:1",
	}, {
		"message named msg",
		func() *idl.Interface {
			b := &builder{file: "/x/p.if"}
			return b.iface("p", nil, b.message("msg"))
		},
		"p.if:1:1: C name p_msg of the tagged union of interface p collides with that of message msg",
	}, {
		"struct fields",
		func() *idl.Interface {
			b := &builder{file: "/x/p.if"}
			return b.iface("p", []*idl.TypeDecl{b.strct("s", b.field("true", builtin(idl.Bool)), b.field("true_", builtin(idl.Bool)))})
		},
		"p.if:2:1: C name true_ of field true_ of s collides with that of field true of s at /x/p.if:1:1",
	}, {
		"reserved interface name",
		func() *idl.Interface {
			b := &builder{file: "/x/chanos.if"}
			return b.iface("chanos", nil)
		},
		"chanos.if:1:1: interface name chanos is reserved",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New().Generate(c.iface())
			if err == nil {
				t.Fatalf("Generate succeeded, want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not contain %q", err, c.want)
			}
			if !strings.HasPrefix(err.Error(), "/x/") {
				t.Errorf("error %q does not start with FILE:LINE:COL", err)
			}
			// chanosc prints an *idl.Error as it is, without its own name.
			var ie *idl.Error
			if !errors.As(err, &ie) {
				t.Errorf("error %q is a %T, not an *idl.Error", err, err)
			}
		})
	}
}

func TestUnsupported(t *testing.T) {
	b := &builder{file: "/x/u.if"}
	iface := b.iface("u", nil, b.message("m", b.arg("s", builtin(idl.String))))
	if _, err := New().Generate(iface); err == nil || !strings.Contains(err.Error(), "String needs a bound") {
		t.Errorf("unbounded String: got %v", err)
	}
	b = &builder{file: "/x/u.if"}
	iface = b.iface("u", []*idl.TypeDecl{b.enum("e")})
	if _, err := New().Generate(iface); err == nil || !strings.Contains(err.Error(), "no enumerators") {
		t.Errorf("empty enum: got %v", err)
	}
}

// TestEdgeShapes checks that the corner cases of the mapping still make
// valid C: an interface without messages, empty structs, zero bounds.
func TestEdgeShapes(t *testing.T) {
	b := &builder{file: "/x/edge.if"}
	empty := b.strct("nothing")
	zero := b.array("zero", builtin(idl.Uint32), 0)
	noMsgs := b.iface("nomsgs", []*idl.TypeDecl{empty, zero})
	b2 := &builder{file: "/x/edge.if"}
	empty2 := b2.strct("nothing")
	// The front end rejects Strings in structs today; the AST allows them.
	named := b2.strct("named", b2.strField("name", 8), b2.field("x", builtin(idl.Uint8)))
	edge := b2.iface("edge", []*idl.TypeDecl{empty2, named},
		b2.message("m", b2.arg("e", ref(empty2)), b2.dyn("v", builtin(idl.Uint32), "n", 0), b2.str("s", 0),
			b2.arg("nm", ref(named))),
		b2.rpc("r", out(b2.arg("x", builtin(idl.Uint8)))))
	compileC(t, []*idl.Interface{noMsgs, edge}, "")
}

// TestCompileAndRun compiles the generated code with the flags the C build
// uses and runs c/tests/codegen_test.c against ctest under ASan and UBSan.
func TestCompileAndRun(t *testing.T) {
	compileC(t, []*idl.Interface{pingpongAST(), ctestAST()}, "../../c/tests/codegen_test.c")
}

// compileC writes the code of ifaces to a temporary directory and compiles
// it and, if main is not "", runs main linked with it and with libchanos's
// connections (wire.c, errors.c, and ump.c, conn.c, endpoint_ref.c and
// serve.c, which the stubs and dispatch call).
func compileC(t *testing.T, ifaces []*idl.Interface, main string) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found")
	}
	dir := t.TempDir()
	srcs := []string{"../../c/src/wire.c", "../../c/src/errors.c"}
	if main != "" {
		srcs = append(srcs, "../../c/src/ump.c", "../../c/src/conn.c", "../../c/src/endpoint_ref.c", "../../c/src/serve.c")
	}
	for _, iface := range ifaces {
		for _, f := range generate(t, iface) {
			p := filepath.Join(dir, f.Name)
			if err := os.WriteFile(p, f.Data, 0o644); err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(p, ".c") {
				srcs = append(srcs, p)
			}
		}
	}
	flags := []string{"-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Wshadow",
		"-I../../c/include", "-I" + dir}
	if main == "" {
		for _, src := range srcs {
			out, err := exec.Command(cc, append(flags, "-c", "-o", filepath.Join(dir, "x.o"), src)...).CombinedOutput()
			if err != nil {
				t.Fatalf("compiling %s: %v\n%s", filepath.Base(src), err, out)
			}
		}
		compileCxx(t, dir)
		return
	}
	exe := filepath.Join(dir, "test")
	san := []string{"-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-D_GNU_SOURCE", "-pthread"}
	args := append(append(append(flags, san...), "-o", exe, main), srcs...)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("compiling: %v\n%s", err, out)
	}
	out, err := exec.Command(exe).CombinedOutput()
	if err != nil {
		t.Fatalf("%s failed: %v\n%s", filepath.Base(main), err, out)
	}
	t.Logf("%s", out)
}

// compileCxx includes every generated header of dir, with chanos.h, in a
// C++ translation unit: the keyword rule keeps C++ keywords out of the
// members, so C++ programs can use the generated code.
func compileCxx(t *testing.T, dir string) {
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Log("g++ not found: generated headers not checked as C++")
		return
	}
	hs, _ := filepath.Glob(filepath.Join(dir, "*.h"))
	var b strings.Builder
	b.WriteString("#include <chanos.h>\n")
	for _, h := range hs {
		fmt.Fprintf(&b, "#include \"%s\"\n", filepath.Base(h))
	}
	b.WriteString("int main() { return 0; }\n")
	src := filepath.Join(dir, "cxx_test.cc")
	if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
		"-I../../c/include", "-I"+dir, src).CombinedOutput()
	if err != nil {
		t.Fatalf("the generated headers as C++: %v\n%s", err, out)
	}
}

// TestBundledInterfaces compiles the C of every interface in the tree:
// interfaces/*.if and the shared vectors' alltypes.if.
func TestBundledInterfaces(t *testing.T) {
	paths, _ := filepath.Glob("../../interfaces/*.if")
	var ifaces []*idl.Interface
	for _, p := range paths {
		iface, err := idl.Load(p, nil, idl.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ifaces = append(ifaces, iface)
	}
	if _, err := os.Stat("../../testdata/wire/alltypes.if"); err == nil {
		iface, err := idl.Load("../../testdata/wire/alltypes.if", []string{"../../testdata/wire/types.if"}, idl.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ifaces = append(ifaces, iface)
	}
	if len(ifaces) == 0 {
		t.Skip("no interfaces")
	}
	compileC(t, ifaces, "")
}

// ctest's doc comments hold a comment's end, an opener and a trigraph (see
// c/tests/ctest.if): in the header each comment must still end where
// chanosc ends it, at the end of its line, and hold no opener or trigraph
// (-Wcomment, -Wtrigraphs).
func TestDocCommentsClosed(t *testing.T) {
	h := string(generate(t, ctestAST())[0].Data)
	for i, l := range strings.Split(h, "\n") {
		if strings.Count(l, "/*") > 1 || strings.Count(l, "*/") > 1 ||
			strings.Contains(l, "*/") && !strings.HasSuffix(l, "*/") || strings.Contains(l, "??") {
			t.Errorf("ctest.h:%d: %s", i+1, l)
		}
	}
	for _, want := range []string{`/* red ends a C comment: *\/ here. */`, `/\* nested *\/`, `?\?/`} {
		if !strings.Contains(h, want) {
			t.Errorf("ctest.h lacks %q", want)
		}
	}
}
