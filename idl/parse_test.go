package idl

import (
	"errors"
	"strings"
	"testing"
)

const everything = `/* A file that uses every construct of the language. */
interface everything "Every construct, once" {
    alias word uint64;                       // alias of a builtin
    typedef uint32 handle;                   // plain typedef
    typedef handle handle2;                  // typedef of a typedef
    typedef enum { red, green, blue, } color; // trailing comma allowed
    typedef struct {
        uint8 a;
        color c;
        handle2 h;
    } inner;
    typedef inner inners[3];                 // fixed array of structs
    typedef struct { inner i; inners many; bool flag; } outer;
    typedef uint8 mac[6];

    message empty();
    @trace(level=3, sink=stderr)
    @hint(x=0x10)
    message scalars(uint8 a, uint16 b, uint32 c, uint64 d, uintptr e, int8 f,
                    int16 g, int32 h, int i, int64 j, intptr k, size l, char m,
                    bool n, iref o, cap p, give_away_cap q, errval r, word s);
    message shapes(String name[256], uint8 data[data_len, 4096], outer o,
                   color cs[ncs, 8], cap fds[nfds, 4], mac addr);
    rpc get(in String key[64], out String value[1024], out errval err);
    rpc noout(in uint32 x);
    rpc onlyout(out uint32 y);
};
`

func compile(t *testing.T, name, src string, includes ...Source) (*Interface, error) {
	t.Helper()
	return Compile(Source{Name: name, Data: []byte(src)}, includes, Options{})
}

func TestEverything(t *testing.T) {
	iface, err := compile(t, "dir/everything.if", everything)
	if err != nil {
		t.Fatal(err)
	}
	if iface.Name != "everything" || iface.Description != "Every construct, once" {
		t.Errorf("name/description = %q/%q", iface.Name, iface.Description)
	}
	if len(iface.Types) != 8 {
		t.Fatalf("got %d types, want 8", len(iface.Types))
	}
	wantMsgs := []string{"empty", "scalars", "shapes", "get", "noout", "onlyout"}
	for i, m := range iface.Messages {
		if m.Name != wantMsgs[i] || m.Number != uint16(i+1) {
			t.Errorf("message %d = %s #%d", i, m.Name, m.Number)
		}
	}
	scalars := iface.Messages[1]
	if len(scalars.Annotations) != 2 {
		t.Fatalf("annotations = %d", len(scalars.Annotations))
	}
	a := scalars.Annotations[0]
	if a.Name != "trace" || a.Params[0].Key != "level" || !a.Params[0].IsInt || a.Params[0].Int != 3 ||
		a.Params[1].Value != "stderr" || a.Params[1].IsInt {
		t.Errorf("annotation trace = %+v %+v %+v", a, a.Params[0], a.Params[1])
	}
	if h := scalars.Lookup("hint"); h == nil || h.Params[0].Int != 16 {
		t.Errorf("annotation hint = %+v", h)
	}
	if b, _ := scalars.Args[8].Type.Underlying(); b != Int32 {
		t.Errorf("int resolves to %v", b)
	}
	if b, _ := scalars.Args[18].Type.Underlying(); b != Uint64 {
		t.Errorf("alias word resolves to %v", b)
	}
	shapes := iface.Messages[2]
	if s := shapes.Args[0]; s.Shape != ShapeString || s.Max != 256 {
		t.Errorf("name = %+v", s)
	}
	if d := shapes.Args[1]; d.Shape != ShapeDynArray || d.LenName != "data_len" || d.Max != 4096 {
		t.Errorf("data = %+v", d)
	}
	if n, ok := shapes.Args[2].Type.FixedSize(); !ok || n != (1+4+4)*4+1 {
		t.Errorf("outer size = %d %v", n, ok)
	}
	get := iface.Messages[3]
	if !get.RPC || len(get.In()) != 1 || len(get.Out()) != 2 || get.Out()[1].Dir != DirOut {
		t.Errorf("get in/out = %v/%v", get.In(), get.Out())
	}
	// scalars: 16 + 1+2+4+8+8+1+2+4+4+8+8+8+1+1+32+4+4+8+8 = 132
	if n := MaxFrameSizeOf(scalars.Args); n != 132 {
		t.Errorf("max frame of scalars = %d, want 132", n)
	}
	if n := iface.MaxFrameSize(); n != 16+4+256+4+4096+37+4+32+4+16+6 {
		t.Errorf("interface max frame = %d", n)
	}
}

func TestIncludes(t *testing.T) {
	inc := Source{Name: "types.if", Data: []byte(`interface types { typedef struct { uint32 x; uint32 y; } point; };`)}
	bare := Source{Name: "bare.if", Data: []byte(`typedef enum { on, off } state;`)}
	iface, err := compile(t, "geo.if", `interface geo { message move(point to, state s); };`, inc, bare)
	if err != nil {
		t.Fatal(err)
	}
	if len(iface.Types) != 2 || !iface.Types[0].Included || !iface.Types[1].Included {
		t.Errorf("types = %+v", iface.Types)
	}
	_, err = compile(t, "geo.if", `interface geo { message m(uint8 a); };`,
		Source{Name: "bad.if", Data: []byte(`interface bad { message no(); };`)})
	wantErr(t, err, "bad.if:1:25: include file declares message no; include files may hold only type declarations")
}

func wantErr(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", want)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error %v does not match ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error\n%v\ndoes not contain\n%s", err, want)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"name mismatch", `interface other { };`, "t.if:1:11: interface other is in file t.if; the name must equal"},
		{"no interface", `typedef uint8 x;`, `t.if:1:1: expected "interface NAME { ... };"`},
		{"unterminated comment", "interface t { /* x", "t.if:1:15: comment not terminated"},
		{"unterminated string", `interface t "abc`, "t.if:1:13: string not terminated"},
		{"bad char", "interface t { $ };", "t.if:1:15: unexpected character '$'"},
		{"bad byte", "interface t { \xff };", "t.if:1:15: unexpected byte 0xff"},
		{"bad number", "interface t { message m(String s[0x]); };", `t.if:1:34: malformed number "0x"`},
		{"bad octal", "interface t { message m(String s[0o8]); };", `t.if:1:34: malformed number "0o8"`},
		{"bad decimal", "interface t { message m(String s[12ab]); };", `t.if:1:34: malformed number "12ab"`},
		{"huge number", "interface t { message m(String s[99999999999999999999]); };", "does not fit in 64 bits"},
		{"missing semicolon", "interface t { message m() };", `t.if:1:27: expected ";" after the message, found "}"`},
		{"missing close", "interface t { message m();", `t.if:1:27: interface "t" is not closed`},
		{"junk after", "interface t { }; x", `t.if:1:18: unexpected identifier "x" after the end`},
		{"typedef after message", "interface t { message m(); typedef uint8 x; };", "t.if:1:28: type declarations must come before the first message"},
		{"keyword as name", "interface t { message rpc(); };", `t.if:1:23: expected message name, found keyword "rpc"`},
		{"undeclared", "interface t { message m(foo a); };", "t.if:1:25: undeclared type foo"},
		{"string hint", "interface t { message m(string s[4]); };", "undeclared type string (did you mean String?)"},
		{"case hint", "interface t { typedef uint8 Thing; message m(thing a); };", "undeclared type thing (did you mean Thing?)"},
		{"duplicate message", "interface t { message m(); message m(); };", "t.if:1:36: duplicate message m (first declared at t.if:1:23)"},
		{"duplicate type", "interface t { typedef uint8 a; typedef uint16 a; };", "t.if:1:47: type a is declared again with a different definition (first declared at t.if:1:29)"},
		{"builtin redeclared", "interface t { typedef uint8 uint16; };", "t.if:1:29: typedef uint16 redeclares a builtin type"},
		{"duplicate arg", "interface t { message m(uint8 a, uint16 a); };", "t.if:1:41: argument a of message m clashes with the name declared at t.if:1:31"},
		{"duplicate enum", "interface t { typedef enum { a, b, a } e; };", "t.if:1:36: duplicate enumerator a in enum e"},
		{"duplicate field", "interface t { typedef struct { uint8 a; uint8 a; } s; };", "t.if:1:47: duplicate field a in struct s"},
		{"length clash", "interface t { message m(uint8 n, uint8 d[n, 4]); };", "length name n of message m clashes"},
		{"length clash rpc", "interface t { rpc r(in uint8 d[n, 4], out uint8 n); };", "clashes"},
		{"length twice", "interface t { message m(uint8 d[n, 4], uint8 e[n, 4]); };", "length name n of message m clashes"},
		{"missing bound", "interface t { message m(String s); };", "t.if:1:32: String argument s needs a bound: String s[MAX]"},
		{"zero bound", "interface t { message m(String s[0]); };", "t.if:1:34: argument s has bound 0"},
		{"zero array bound", "interface t { message m(uint8 d[n, 0]); };", "argument d has bound 0"},
		{"zero array len", "interface t { typedef uint8 a[0]; };", "array a has length 0"},
		{"array without len", "interface t { message m(uint8 d[4]); };", "argument d: a dynamic array needs a length name: uint8 d[LEN, 4]"},
		{"string array", "interface t { message m(String d[n, 4]); };", "arrays of String are not supported"},
		{"string in struct", "interface t { typedef struct { String s; } x; };", "String is only allowed as a message argument"},
		{"typedef cycle", "interface t { typedef a b; typedef b a; };", "t.if:1:25: type b is defined in terms of itself (b -> a -> b)"},
		{"self cycle", "interface t { typedef struct { uint8 x; s y; } s; };", "type s is defined in terms of itself (s -> s)"},
		{"array cycle", "interface t { typedef arr arr2; typedef arr2 arr[2]; };", "defined in terms of itself"},
		{"alias non builtin", "interface t { typedef uint8 x; alias y x; };", "alias y: x is not a builtin type"},
		{"rpc without dir", "interface t { rpc r(uint8 a); };", "argument a of rpc r needs a direction"},
		{"message with dir", "interface t { message m(in uint8 a); };", "only rpc arguments have one"},
		{"empty struct", "interface t { typedef struct { } s; };", "struct s has no fields"},
		{"struct array field", "interface t { typedef struct { uint8 a[4]; } s; };", "declare the array as a type first"},
		{"struct string array field", "interface t { typedef struct { String a[4]; } s; };", "struct field a: arrays of String are not supported"},
		{"frame too big", "interface t { message m(uint8 a[n, 4000000000], uint8 b[k, 4000000000]); };", "more than a frame can hold"},
		{"type too big", "interface t { typedef uint64 a[4294967295]; };", "type a takes 34359738360 bytes on the wire"},
		{"nested too big", "interface t { typedef uint64 a[4294967295]; typedef a b[4294967295]; };", "an unbounded number of bytes"},
		{"too many caps", "interface t { message m(cap c[n, 256]); };", "can carry 256 capabilities"},
		{"unknown cap kind", "interface t { message m(cap(socket) c); };", `t.if:1:25: unknown capability kind "socket": the kinds are file, event, endpoint`},
		{"kind on a non cap", "interface t { message m(uint8(file) c); };", "t.if:1:25: uint8 takes no kind in parentheses: only cap and give_away_cap do"},
		{"kind on a declared type", "interface t { typedef uint8 x; message m(x(file) c); };", "x takes no kind in parentheses"},
		{"unclosed kind", "interface t { message m(cap(file c); };", `to close the capability kind`},
		{"dup annotation key", "interface t { @a(k=1, k=2) message m(); };", "duplicate key k in annotation @a"},
		{"annotation without message", "interface t { @a(k=1) };", "expected message or rpc after the annotation"},
		{"bad escape", `interface t "\q" { };`, `unknown escape \q`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := compile(t, "t.if", tc.src)
			wantErr(t, err, tc.want)
		})
	}
}

// TestCapKinds: cap and give_away_cap take a kind, through aliases too;
// the kind is part of the fingerprint, a plain cap's fingerprint is as it
// was.
func TestCapKinds(t *testing.T) {
	iface, err := compile(t, "t.if", `interface t {
		alias fd give_away_cap(file);
		message m(fd f, cap(event) e, give_away_cap(endpoint) p, cap c, cap(file) fs[n, 4]);
	};`)
	if err != nil {
		t.Fatal(err)
	}
	want := []CapKind{CapFile, CapEvent, CapEndpoint, CapAny, CapFile}
	for i, a := range iface.Messages[0].Args {
		if got := a.Type.Cap(); got != want[i] {
			t.Errorf("argument %s: kind %v, want %v", a.Name, got, want[i])
		}
	}
	typed, err := compile(t, "t.if", "interface t { message m(cap(file) c); };")
	if err != nil {
		t.Fatal(err)
	}
	plain, err := compile(t, "t.if", "interface t { message m(cap c); };")
	if err != nil {
		t.Fatal(err)
	}
	if typed.Fingerprint() == plain.Fingerprint() {
		t.Error("cap(file) and cap have the same fingerprint")
	}
	if !strings.Contains(plain.Canonical(), "\targ c cap\n") || !strings.Contains(typed.Canonical(), "\targ c cap(file)\n") {
		t.Errorf("canonical forms:\n%s\n%s", plain.Canonical(), typed.Canonical())
	}
}

func TestErrorsAreAllReported(t *testing.T) {
	_, err := compile(t, "t.if", "interface t { message m(foo a, String s, uint8 d[n, 0]); message m(); };")
	var list ErrorList
	if !errors.As(err, &list) || len(list) != 4 {
		t.Fatalf("got %v, want 4 errors", err)
	}
	for i := 1; i < len(list); i++ {
		if list[i].Pos.Col < list[i-1].Pos.Col {
			t.Errorf("errors not sorted: %v", err)
		}
	}
}

func TestNameCheckOff(t *testing.T) {
	if _, err := Compile(Source{Name: "x.if", Data: []byte("interface y {};")}, nil, Options{AllowNameMismatch: true}); err != nil {
		t.Fatal(err)
	}
}

// A file that starts with a UTF-8 byte order mark compiles as without
// it, positions counted from after the mark; a mark anywhere else is
// still an unexpected byte.
func TestByteOrderMark(t *testing.T) {
	iface, err := compile(t, "bom.if", "\xef\xbb\xbfinterface bom { message m(uint8 x); };")
	if err != nil {
		t.Fatal(err)
	}
	if iface.Pos.Col != 11 || iface.Messages[0].Pos.Col != 25 {
		t.Errorf("positions %v and %v, want columns 11 and 25", iface.Pos, iface.Messages[0].Pos)
	}
	if _, err := compile(t, "bom.if", "interface bom {\xef\xbb\xbf message m(); };"); err == nil || !strings.Contains(err.Error(), "bom.if:1:16") {
		t.Errorf("a byte order mark inside the file: %v, want an error at 1:16", err)
	}
}
