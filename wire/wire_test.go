package wire

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := Header{Size: 24, Msg: 0x1234, Flags: FlagCall, NCaps: 2, CallID: 0xdeadbeef, TimeoutUS: 99}
	b := AppendHeader([]byte("x"), h)[1:]
	b = append(b, make([]byte, 8)...)
	got, err := ParseHeader(b)
	if err != nil || got != h {
		t.Fatalf("ParseHeader = %+v, %v; want %+v", got, err, h)
	}
	SetCallID(b, 5)
	SetTimeout(b, 6)
	if got, _ := ParseHeader(b); got.CallID != 5 || got.TimeoutUS != 6 {
		t.Errorf("after SetCallID/SetTimeout: %+v", got)
	}
}

func TestParseHeaderErrors(t *testing.T) {
	if _, err := ParseHeader(make([]byte, 15)); !errors.Is(err, ErrTruncated) || !errors.Is(err, ErrMalformed) {
		t.Errorf("15 bytes: %v", err)
	}
	b := AppendHeader(nil, Header{Size: 17, Msg: 1})
	if _, err := ParseHeader(b); !errors.Is(err, ErrSize) {
		t.Errorf("size 17 in 16 bytes: %v", err)
	}
}

func TestKinds(t *testing.T) {
	for _, tc := range []struct {
		h    Header
		want Kind
		bad  bool
	}{
		{h: Header{}, want: KindMessage},
		{h: Header{CallID: 1}, bad: true},
		{h: Header{TimeoutUS: 1}, bad: true},
		{h: Header{Flags: FlagCall, CallID: 1, TimeoutUS: 1}, want: KindCall},
		{h: Header{Flags: FlagReply, CallID: 1}, want: KindReply},
		{h: Header{Flags: FlagReply, TimeoutUS: 1}, bad: true},
		{h: Header{Flags: FlagReply | FlagError, CallID: 1}, want: KindErrorReply},
		{h: Header{Flags: FlagCancel, CallID: 1}, want: KindCancel},
		{h: Header{Flags: FlagCall | FlagReply}, bad: true},
		{h: Header{Flags: 0x10}, bad: true},
	} {
		k, err := tc.h.Kind()
		if tc.bad {
			if !errors.Is(err, ErrHeader) {
				t.Errorf("%+v: Kind = %v, %v; want ErrHeader", tc.h, k, err)
			}
			continue
		}
		if err != nil || k != tc.want || k.Flags() != tc.h.Flags {
			t.Errorf("%+v: Kind = %v, %v; want %v", tc.h, k, err, tc.want)
		}
	}
	if KindErrorReply.String() != "error reply" || Kind(9).String() != "Kind(9)" {
		t.Error("Kind.String")
	}
}

func TestTimeouts(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want uint32
	}{
		{-time.Second, 1}, {0, 1}, {time.Nanosecond, 1}, {time.Microsecond, 1},
		{1500 * time.Nanosecond, 2}, {time.Second, 1e6}, {100 * time.Hour, NoDeadline},
	} {
		if got := TimeoutUS(tc.d); got != tc.want {
			t.Errorf("TimeoutUS(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	if d, ok := Timeout(0); ok || d != 0 {
		t.Error("Timeout(0)")
	}
	if _, ok := Timeout(NoDeadline); ok {
		t.Error("Timeout(NoDeadline)")
	}
	if d, ok := Timeout(7); !ok || d != 7*time.Microsecond {
		t.Error("Timeout(7)")
	}
}

func TestCodes(t *testing.T) {
	for _, name := range []string{"truncated", "size", "trailing", "unknown_message", "header", "bound", "enum", "bool", "cap", "nul"} {
		c := CodeError(name)
		if c == nil || !errors.Is(c, ErrMalformed) || Code(c) != name {
			t.Errorf("code %s: %v", name, c)
		}
		wrapped := &Error{Err: c, Message: "m"}
		if !errors.Is(wrapped, c) || Code(wrapped) != name {
			t.Errorf("*Error of %s does not match it", name)
		}
	}
	if CodeError("nope") != nil || Code(errors.New("x")) != "" {
		t.Error("unknown codes")
	}
	e := &Error{Err: ErrBound, Message: "alltypes.strings", Field: "name", Offset: 20, Detail: "string length 300 exceeds bound 256"}
	if got, want := e.Error(), "wire: alltypes.strings: field name: string length 300 exceeds bound 256 at offset 20"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := (&Error{Err: ErrTrailing, Offset: 3}).Error(); got != "wire: trailing at offset 3" {
		t.Errorf("Error() = %q", got)
	}
}

// testMsg is a hand-written message of the shape chanosc generates:
// a uint32, a String[8], a dynamic array of structs holding a bool and a
// cap.
type testMsg struct {
	N     uint32
	S     string
	Items []testItem
}

type testItem struct {
	B bool
	C Cap
}

func (it *testItem) encode(e *Encoder) {
	e.Bool(it.B)
	e.Cap("c", it.C)
}

func (it *testItem) decode(d *Decoder) {
	it.B = d.Bool("b")
	it.C = d.Cap("c")
}

func (m *testMsg) Encode(buf *Buffer) error {
	var e Encoder
	e.Begin(buf, "t.msg", 3, KindMessage, 12)
	e.Uint32(m.N)
	e.String("s", m.S, 8)
	if e.Count("items", len(m.Items), 3) {
		for i := range m.Items {
			e.Enter()
			m.Items[i].encode(&e)
			e.LeaveIndex("items", i)
		}
	}
	return e.Finish()
}

func (m *testMsg) Decode(frame []byte, caps []Cap) error {
	*m = testMsg{}
	var d Decoder
	d.Begin(frame, caps, "t.msg", 3, KindMessage)
	m.N = d.Uint32("n")
	m.S = d.String("s", 8)
	if n := d.Count("items", 3, 5); n > 0 {
		m.Items = make([]testItem, n)
		for i := range m.Items {
			d.Enter()
			m.Items[i].decode(&d)
			d.LeaveIndex("items", i)
		}
	}
	if err := d.Finish(); err != nil {
		*m = testMsg{}
		return err
	}
	return nil
}

func TestEncodeDecode(t *testing.T) {
	f0, f1 := os.Stdin, os.Stdout
	in := testMsg{N: 5, S: "hey", Items: []testItem{{true, f0}, {false, f1}}}
	buf := Buffer{B: []byte("ab")}
	if err := in.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	want := []byte("ab\x29\x00\x00\x00\x03\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00" +
		"\x05\x00\x00\x00" + "\x03\x00\x00\x00hey" + "\x02\x00\x00\x00" +
		"\x01\x00\x00\x00\x00" + "\x00\x01\x00\x00\x00")
	if !bytes.Equal(buf.B, want) {
		t.Fatalf("encoded\n%q\nwant\n%q", buf.B, want)
	}
	if len(buf.Caps) != 2 || buf.Caps[0] != f0 || buf.Caps[1] != f1 || len(buf.GiveAway) != 2 {
		t.Fatalf("caps %v %v", buf.Caps, buf.GiveAway)
	}
	var out testMsg
	if err := out.Decode(buf.B[2:], buf.Caps); err != nil {
		t.Fatal(err)
	}
	if out.N != 5 || out.S != "hey" || len(out.Items) != 2 || !out.Items[0].B || out.Items[1].C != f1 {
		t.Errorf("decoded %+v", out)
	}
	buf.Reset()
	if len(buf.B) != 0 || len(buf.Caps) != 0 || len(buf.GiveAway) != 0 {
		t.Error("Reset")
	}
}

func TestEncodeErrors(t *testing.T) {
	for _, tc := range []struct {
		m     testMsg
		code  error
		field string
	}{
		{testMsg{S: "123456789"}, ErrBound, "s"},
		{testMsg{S: "a\x00"}, ErrNUL, "s"},
		{testMsg{Items: make([]testItem, 4)}, ErrBound, "items"},
		{testMsg{Items: []testItem{{C: os.Stdin}, {}}}, ErrCap, "items[1].c"},
	} {
		buf := Buffer{B: []byte("keep"), Caps: []Cap{os.Stderr}, GiveAway: []bool{true}}
		err := tc.m.Encode(&buf)
		var we *Error
		if !errors.Is(err, tc.code) || !errors.As(err, &we) || we.Field != tc.field || !we.Encoding {
			t.Errorf("Encode(%+v) = %#v; want %v in field %s, an encoding fault", tc.m, err, tc.code, tc.field)
		}
		if string(buf.B) != "keep" || len(buf.Caps) != 1 || len(buf.GiveAway) != 1 {
			t.Errorf("failed Encode changed the buffer: %q %v", buf.B, buf.Caps)
		}
	}
}

func TestTooManyCaps(t *testing.T) {
	var buf Buffer
	var e Encoder
	e.Begin(&buf, "t.caps", 1, KindMessage, 0)
	for range MaxCaps + 1 {
		e.Cap("c", os.Stdin)
	}
	if err := e.Finish(); !errors.Is(err, ErrCap) || len(buf.B) != 0 || len(buf.Caps) != 0 {
		t.Errorf("256 caps: %v, %d bytes, %d caps left", err, len(buf.B), len(buf.Caps))
	}
}

func frameOf(t *testing.T, m testMsg) ([]byte, []Cap) {
	t.Helper()
	var buf Buffer
	if err := m.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.B, buf.Caps
}

func TestDecodeErrors(t *testing.T) {
	good, caps := frameOf(t, testMsg{N: 1, S: "ab", Items: []testItem{{true, os.Stdin}, {false, os.Stdout}}})
	patch := func(off int, b ...byte) []byte {
		f := bytes.Clone(good)
		copy(f[off:], b)
		return f
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		caps  []Cap
		code  error
		field string
		off   int
	}{
		{"short header", good[:10], caps, ErrTruncated, "", 0},
		{"size", patch(0, 99), caps, ErrSize, "", 0},
		{"msg", patch(4, 4), caps, ErrUnknownMessage, "", 4},
		{"flags", patch(6, FlagReply), caps, ErrHeader, "", 6},
		{"reserved flags", patch(6, 0x80), caps, ErrHeader, "", 6},
		{"call id", patch(8, 1), caps, ErrHeader, "", 8},
		{"timeout", patch(12, 1), caps, ErrHeader, "", 12},
		{"ncaps", good, caps[:1], ErrCap, "", 7},
		{"bound", patch(20, 9), caps, ErrBound, "s", 20},
		{"nul", patch(24, 0), caps, ErrNUL, "s", 20},
		{"count bound", patch(26, 4), caps, ErrBound, "items", 26},
		{"bool", patch(30, 2), caps, ErrBool, "items[0].b", 30},
		{"cap index", patch(36, 0), caps, ErrCap, "items[1].c", 36},
		{"truncated count", append(patch(0, 31), good[16:31]...)[:31], caps, ErrTruncated, "items[1].b", 35 - 4},
	} {
		var m testMsg
		err := m.Decode(tc.frame, tc.caps)
		var we *Error
		if !errors.Is(err, tc.code) || !errors.As(err, &we) || we.Encoding {
			t.Errorf("%s: Decode = %#v, want %v, not an encoding fault", tc.name, err, tc.code)
			continue
		}
		if tc.name != "truncated count" && (we.Field != tc.field || we.Offset != tc.off) {
			t.Errorf("%s: error at field %q offset %d, want %q %d (%v)", tc.name, we.Field, we.Offset, tc.field, tc.off, err)
		}
		if m.N != 0 || m.S != "" || m.Items != nil {
			t.Errorf("%s: failed Decode left %+v", tc.name, m)
		}
		if !strings.HasPrefix(err.Error(), "wire: t.msg: ") {
			t.Errorf("%s: %q", tc.name, err)
		}
	}
	// Trailing bytes, and caps the body does not use.
	var m testMsg
	long := append(bytes.Clone(good), 0)
	PutUint32(long, uint32(len(long)))
	if err := m.Decode(long, caps); !errors.Is(err, ErrTrailing) {
		t.Errorf("trailing: %v", err)
	}
	noItems, _ := frameOf(t, testMsg{})
	noItems[7] = 1
	if err := m.Decode(noItems, caps[:1]); !errors.Is(err, ErrCap) {
		t.Errorf("unused cap: %v", err)
	}
}

func TestFixed(t *testing.T) {
	var buf Buffer
	b := AppendFixed(&buf, 1, KindReply, 8)
	PutUint32(b, 7)
	PutUint32(b[4:], 258)
	body, ok := FixedBody(buf.B, nil, 1, KindReply, 8)
	if !ok || Uint32(body) != 7 || Uint32(body[4:]) != 258 {
		t.Fatalf("FixedBody = %x, %v", body, ok)
	}
	if msg, ok := PeekMsg(buf.B); !ok || msg != 1 {
		t.Errorf("PeekMsg = %d, %v", msg, ok)
	}
	if _, ok := PeekMsg(buf.B[:HeaderSize-1]); ok {
		t.Error("PeekMsg of a frame shorter than a header")
	}
	SetCallID(buf.B, 3)
	if _, ok := FixedBody(buf.B, nil, 1, KindReply, 8); !ok {
		t.Error("a reply may have a call id")
	}
	for _, tc := range []struct {
		frame []byte
		caps  []Cap
		msg   uint16
		kind  Kind
		size  int
	}{
		{buf.B, nil, 2, KindReply, 8},
		{buf.B, nil, 1, KindCall, 8},
		{buf.B, nil, 1, KindReply, 7},
		{buf.B[:20], nil, 1, KindReply, 4},
		{buf.B, []Cap{os.Stdin}, 1, KindReply, 8},
	} {
		if _, ok := FixedBody(tc.frame, tc.caps, tc.msg, tc.kind, tc.size); ok {
			t.Errorf("FixedBody accepted %x as %d %v of %d", tc.frame, tc.msg, tc.kind, tc.size)
		}
	}
	r := Iref{Machine: 1, Export: 2, Token: [16]byte{3}}
	var ib [IrefSize]byte
	PutIref(ib[:], r)
	if GetIref(ib[:]) != r || r.IsZero() || !(Iref{}).IsZero() {
		t.Error("iref")
	}
}

func TestStatusAndCancel(t *testing.T) {
	var buf Buffer
	st := Status{Code: 0x2a, Detail: "no such key"}
	if err := AppendErrorReply(&buf, 4, st); err != nil {
		t.Fatal(err)
	}
	SetCallID(buf.B, 77)
	h, got, err := ParseErrorReply(buf.B)
	if err != nil || got != st || h.CallID != 77 || h.Msg != 4 {
		t.Fatalf("ParseErrorReply = %+v, %+v, %v", h, got, err)
	}
	if got.String() != "error 0x2a: no such key" {
		t.Errorf("Status.String = %q", got.String())
	}
	for _, bad := range []Status{{Code: 0}, {Code: 1, Detail: strings.Repeat("x", MaxStatusDetail+1)}, {Code: 1, Detail: "\x00"}} {
		var b Buffer
		if err := AppendErrorReply(&b, 1, bad); err == nil || len(b.B) != 0 {
			t.Errorf("AppendErrorReply(%.20q) = %v", bad.Detail, err)
		}
	}
	if _, _, err := ParseErrorReply(buf.B[:20]); !errors.Is(err, ErrSize) {
		t.Errorf("short error reply: %v", err)
	}
	buf.Reset()
	AppendCancel(&buf, 4, 9)
	h, err = ParseCancel(buf.B)
	if err != nil || h.CallID != 9 || h.Msg != 4 {
		t.Errorf("ParseCancel = %+v, %v", h, err)
	}
	long := append(bytes.Clone(buf.B), 1)
	PutUint32(long, uint32(len(long)))
	if _, err := ParseCancel(long); !errors.Is(err, ErrTrailing) {
		t.Errorf("cancel with a body: %v", err)
	}
	if _, _, err := ParseErrorReply(buf.B); !errors.Is(err, ErrHeader) {
		t.Errorf("cancel as error reply: %v", err)
	}
}

func TestNoAllocs(t *testing.T) {
	in := testMsg{N: 1}
	var buf Buffer
	var out testMsg
	allocs := testing.AllocsPerRun(100, func() {
		buf.Reset()
		if err := in.Encode(&buf); err != nil {
			t.Fatal(err)
		}
		if err := out.Decode(buf.B, nil); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("encode+decode without strings or arrays: %v allocations", allocs)
	}
}
