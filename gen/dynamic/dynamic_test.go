package dynamic

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"

	"github.com/chanos/chanos/idl"
	"github.com/chanos/chanos/internal/testkit/wirevectors"
	"github.com/chanos/chanos/wire"
)

// vector is a frame of testdata/wire/alltypes.json: the frames generated
// code makes and takes, which the dynamic codec must make and take the
// same.
type vector = wirevectors.Vector

func load(t *testing.T) (*idl.Interface, *wirevectors.File) {
	t.Helper()
	iface, err := idl.Load("../../testdata/wire/alltypes.if", []string{"../../testdata/wire/types.if"}, idl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := wirevectors.Read("../../testdata/wire/alltypes.json")
	if err != nil {
		t.Fatal(err)
	}
	return iface, f
}

// frameOf returns the frame of v's message and kind, and false for one
// with capabilities, which the codec does not take.
func frameOf(t *testing.T, iface *idl.Interface, v vector) (*Frame, bool) {
	t.Helper()
	f, err := Call(iface, v.Message, v.Fields)
	if err != nil {
		t.Fatalf("%s: %v", v.Name, err)
	}
	switch v.Kind {
	case "reply":
		f.Kind = wire.KindReply
	case "call":
		f.Kind = wire.KindCall
	}
	for _, a := range f.args() {
		if a.Type.Cap() != idl.CapAny || isCap(a.Type) {
			return nil, false
		}
	}
	return f, v.NCaps == 0
}

// isCap reports whether t is, or holds, a capability.
func isCap(t *idl.TypeRef) bool {
	b, decl := t.Underlying()
	if decl == nil {
		return b.IsCap()
	}
	switch decl.Kind {
	case idl.DeclArray:
		return isCap(decl.Elem)
	case idl.DeclStruct:
		for _, f := range decl.Fields {
			if isCap(f.Type) {
				return true
			}
		}
	}
	return false
}

// Every vector without capabilities encodes from its fields to its bytes,
// and decodes to values that encode to the same bytes again.
func TestVectors(t *testing.T) {
	iface, vf := load(t)
	ran := 0
	for _, v := range vf.Vectors {
		f, ok := frameOf(t, iface, v)
		if !ok {
			continue
		}
		ran++
		var buf wire.Buffer
		if err := f.Encode(&buf); err != nil || hex.EncodeToString(buf.B) != v.Hex {
			t.Errorf("%s: Encode = %x, %v; want %s", v.Name, buf.B, err, v.Hex)
			continue
		}
		back := &Frame{Iface: iface, Msg: f.Msg, Kind: f.Kind}
		if err := back.Decode(buf.B, nil); err != nil {
			t.Errorf("%s: Decode: %v", v.Name, err)
			continue
		}
		// Through JSON, as a tool prints and reads them.
		j, err := json.Marshal(back.Values)
		if err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.UseNumber()
		if err := dec.Decode(&back.Values); err != nil {
			t.Fatalf("%s: %v", v.Name, err)
		}
		var again wire.Buffer
		if err := back.Encode(&again); err != nil || !bytes.Equal(again.B, buf.B) {
			t.Errorf("%s: decoded as %s, which encodes to %x, %v; want %s", v.Name, j, again.B, err, v.Hex)
		}
	}
	if ran < 50 {
		t.Errorf("only %d vectors ran", ran)
	}
	for _, v := range vf.DecodeOnly {
		f, ok := frameOf(t, iface, v)
		if !ok {
			continue
		}
		b, _ := hex.DecodeString(v.Hex)
		if err := f.Decode(b, nil); err != nil {
			t.Errorf("%s: Decode = %v", v.Name, err)
		}
	}
	for _, v := range vf.Unencodable {
		f, ok := frameOf(t, iface, v)
		if !ok {
			continue
		}
		var buf wire.Buffer
		err := f.Encode(&buf)
		if wire.Code(err) != v.Error || len(buf.B) != 0 {
			t.Errorf("%s: Encode = %v (%d bytes left), want %s", v.Name, err, len(buf.B), v.Error)
		}
	}
	for _, v := range vf.Malformed {
		if v.Message == "" {
			continue
		}
		f, ok := frameOf(t, iface, v)
		if !ok {
			continue
		}
		b, _ := hex.DecodeString(v.Hex)
		if err := f.Decode(b, nil); wire.Code(err) == "" {
			t.Errorf("%s: Decode = %v, want %s", v.Name, err, v.Error)
		}
	}
}

// Values that do not fit their types are refused with ErrValue, naming
// the argument, and leave the buffer as it was.
func TestBadValues(t *testing.T) {
	iface, _ := load(t)
	for _, tc := range []struct {
		msg    string
		fields map[string]any
	}{
		{"uints", map[string]any{"u8": json.Number("256")}},
		{"uints", map[string]any{"u8": "x"}},
		{"uints", map[string]any{"nope": 1}},
		{"sints", map[string]any{"i8": json.Number("-129")}},
		{"enums", map[string]any{"c": "purple"}},
		{"strings", map[string]any{"short": 7}},
		{"arrays", map[string]any{"pts": "not an array"}},
		{"arrays", map[string]any{"pts": []any{map[string]any{"z": 1}}}},
	} {
		f, err := Call(iface, tc.msg, tc.fields)
		if err != nil {
			t.Fatal(err)
		}
		buf := wire.Buffer{B: []byte("keep")}
		if err := f.Encode(&buf); !errors.Is(err, ErrValue) || string(buf.B) != "keep" {
			t.Errorf("%s %v: Encode = %v, buffer %q; want ErrValue and the buffer kept", tc.msg, tc.fields, err, buf.B)
		}
	}
	if _, err := Call(iface, "no_such", nil); err == nil {
		t.Error("Call of an unknown message succeeded")
	}
}

// Message finds a one-way message by its number, for decoding what a
// peer sends, and refuses an rpc's number and one the interface lacks.
func TestMessage(t *testing.T) {
	iface, _ := load(t)
	for _, m := range iface.Messages {
		f, err := Message(iface, m.Number)
		switch {
		case m.RPC && err == nil:
			t.Errorf("Message(%d) found rpc %s", m.Number, m.Name)
		case !m.RPC && (err != nil || f.Msg != m || f.Kind != wire.KindMessage):
			t.Errorf("Message(%d) = %v, %v; want message %s", m.Number, f, err, m.Name)
		}
	}
	if _, err := Message(iface, uint16(len(iface.Messages)+1)); err == nil {
		t.Error("Message of a number past the interface's found one")
	}
}
