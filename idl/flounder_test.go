package idl

import (
	"testing"
)

// The rules that let chanosc read what Flounder reads, the way
// Barrelfish's build runs it: -i platform.if -i arch.if -i types.if
// before every interface.

func TestBuiltinAliasIsIgnored(t *testing.T) {
	arch := Source{Name: "arch.if", Data: []byte("alias errval uint64;\nalias cycles uint64;\n")}
	types := Source{Name: "types.if", Data: []byte("alias iref uint32;\nalias coreid uint8;\nalias int int32;\n")}
	iface, err := compile(t, "t.if", `interface t {
		alias errval uint64;
		message m(errval e, iref r, coreid c, cycles n);
	};`, arch, types)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range iface.Types {
		names = append(names, d.Name)
	}
	if len(names) != 2 || names[0] != "cycles" || names[1] != "coreid" {
		t.Errorf("types = %v, want [cycles coreid]: aliases of builtins declare nothing", names)
	}
	args := iface.Messages[0].Args
	if args[0].Type.Builtin != Errval || args[1].Type.Builtin != Iref {
		t.Errorf("errval, iref resolve to %v, %v; want the builtins", args[0].Type.Builtin, args[1].Type.Builtin)
	}
}

func TestIdenticalRepeats(t *testing.T) {
	types := Source{Name: "types.if", Data: []byte(`
		alias coreid uint8;
		typedef struct { coreid core; uint32 n; } loc;
		typedef enum { a, b } ab;
		typedef uint8 mac[6];
		typedef int32 num;
	`)}
	iface, err := compile(t, "t.if", `interface t {
		alias coreid uint8;
		typedef struct { coreid core; uint32 n; } loc;
		typedef enum { a, b } ab;
		typedef uint8 mac[6];
		typedef int num;          // int is int32
		typedef loc loc2;
		typedef loc loc2;         // repeated within one file
		message m(loc l, ab x, mac y, num z, loc2 w);
	};`, types)
	if err != nil {
		t.Fatal(err)
	}
	if len(iface.Types) != 6 {
		t.Fatalf("got %d types, want 6", len(iface.Types))
	}
	for _, d := range iface.Types[:5] {
		if !d.Included {
			t.Errorf("type %s: the include's declaration should count, it came first", d.Name)
		}
	}
	if d := iface.Messages[0].Args[0].Type.Decl; d == nil || d.Pos.File != "types.if" {
		t.Errorf("loc resolves to %+v, want the include's", d)
	}
}

func TestDifferentRepeats(t *testing.T) {
	types := Source{Name: "types.if", Data: []byte("alias coreid uint8;\ntypedef struct { uint8 a; } s;\ntypedef enum { x, y } e;\ntypedef uint8 arr[4];\n")}
	for _, tc := range []struct{ name, decl, want string }{
		{"alias", "alias coreid uint16;", "t.if:1:21: type coreid is declared again with a different definition (first declared at types.if:1:7)"},
		{"kind", "typedef uint8 coreid;", "t.if:1:29: type coreid is declared again with a different definition (first declared at types.if:1:7)"},
		{"field", "typedef struct { uint8 b; } s;", "first declared at types.if:2:29"},
		{"field type", "typedef struct { uint16 a; } s;", "type s is declared again"},
		{"enumerators", "typedef enum { x, z } e;", "type e is declared again"},
		{"length", "typedef uint8 arr[5];", "type arr is declared again"},
		{"builtin struct", "typedef struct { uint8 a; } errval;", "t.if:1:43: struct errval redeclares a builtin type"},
		{"builtin enum", "typedef enum { q } iref;", "enum iref redeclares a builtin type"},
		{"builtin typedef", "typedef uint64 errval;", "typedef errval redeclares a builtin type"},
		{"builtin alias of a type", "alias errval coreid;", "alias errval: coreid is not a builtin type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compile(t, "t.if", "interface t { "+tc.decl+" message m(); };", types)
			wantErr(t, err, tc.want)
		})
	}
}

func TestFlounderKeywordsAsNames(t *testing.T) {
	iface, err := compile(t, "t.if", `interface t {
		typedef struct { uint32 typedef; uint8 enum; } struct;
		typedef enum { alias, struct } enum;
		alias alias uint16;
		typedef struct typedef;
		typedef struct structs[2];
		message struct(uint32 typedef);
		message enum(enum struct, alias enum, typedef alias, structs s);
		rpc typedef(in struct struct, out uint8 alias[enum, 4]);
	};`)
	if err != nil {
		t.Fatal(err)
	}
	if len(iface.Types) != 5 || iface.Types[0].Kind != DeclStruct || iface.Types[1].Kind != DeclEnum ||
		iface.Types[3].Kind != DeclTypedef || iface.Types[3].Elem.Decl != iface.Types[0] ||
		iface.Types[4].Kind != DeclArray {
		t.Errorf("types = %+v", iface.Types)
	}
	for _, src := range []string{
		"interface t { message in(); };",
		"interface t { message m(uint8 out); };",
		"interface t { typedef uint8 interface; };",
		"interface t { alias rpc uint8; };",
		"interface t { typedef enum { message } e; };",
	} {
		if _, err := compile(t, "t.if", src); err == nil {
			t.Errorf("%s: accepted a reserved word as a name", src)
		}
	}
}

func TestFlounderLexer(t *testing.T) {
	_, err := compile(t, "t.if", `/* a /* nested */ comment, // and a line comment inside */
interface t "tab\there, \"quoted\", \65\x42\o103, \^A\NUL\SOH\SO\DEL\&1, gap\
      \end, \1234" {
	typedef uint8 a[010];    /* ten: a leading 0 is decimal, as in Parsec */
	typedef uint8 b[0o17];   /* octal */
	typedef uint8 c[0X1f];   /* hexadecimal */
	typedef uint8 z[0];
	message m(String s[007], a x, b y, c w);
};`)
	if err == nil || len(err.(ErrorList)) != 1 {
		t.Fatalf("want one error (z's length 0), got %v", err)
	}
	wantErr(t, err, "t.if:7:18: array z has length 0")
	iface, err := compile(t, "t.if", `/* a /* nested */ comment, // and a line comment inside */
interface t "tab\there, \"quoted\", \65\x42\o103, \^A\NUL\SOH\SO\DEL\&1, gap\
      \end, \1234" {
	typedef uint8 a[010];
	typedef uint8 b[0o17];
	typedef uint8 c[0X1f];
	message m(String s[007], a x, b y, c w);
};`)
	if err != nil {
		t.Fatal(err)
	}
	want := "tab\there, \"quoted\", ABC, \x01\x00\x01\x0e\x7f1, gapend, \u04d2"
	if iface.Description != want {
		t.Errorf("description = %q, want %q", iface.Description, want)
	}
	if l := []uint32{iface.Types[0].Len, iface.Types[1].Len, iface.Types[2].Len}; l[0] != 10 || l[1] != 15 || l[2] != 31 {
		t.Errorf("lengths = %v, want [10 15 31]", l)
	}
	if m := iface.Messages[0].Args[0].Max; m != 7 {
		t.Errorf("bound = %d, want 7", m)
	}
	for _, tc := range []struct{ src, want string }{
		{"/* a /* b */\ninterface t {};", "t.if:1:1: comment not terminated"},
		{`interface t "\q" {};`, `t.if:1:14: unknown escape \q`},
		{`interface t "\x" {};`, `t.if:1:14: character code in escape \x is not a character`},
		{`interface t "\1114112" {};`, `character code in escape \1114112 is not a character`},
		{`interface t "\^a" {};`, `t.if:1:14: escape \^ needs a control letter`},
		{"interface t \"a\\  b\" {};", "t.if:1:15: string gap not closed"},
		{"interface t \"a\nb\" {};", "t.if:1:13: string not terminated"},
	} {
		_, err := compile(t, "t.if", tc.src)
		wantErr(t, err, tc.want)
	}
}
