package wiretest

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"

	"github.com/chanos/chanos/idl"
	"github.com/chanos/chanos/internal/testkit/wiretest/alltypes"
	"github.com/chanos/chanos/wire"
)

// vectorFile is the format of testdata/wire/*.json (testdata/wire/README.md).
type vectorFile struct {
	Interface   string   `json:"interface"`
	Includes    []string `json:"includes"`
	Vectors     []vector `json:"vectors"`
	Malformed   []vector `json:"malformed"`
	DecodeOnly  []vector `json:"decode_only"`
	Unencodable []vector `json:"unencodable"`
}

type vector struct {
	Name    string                     `json:"name"`
	Message string                     `json:"message"`
	Kind    string                     `json:"kind"`
	NCaps   int                        `json:"ncaps"`
	Fields  map[string]json.RawMessage `json:"fields"`
	Hex     string                     `json:"hex"`
	Error   string                     `json:"error"`
}

// placeholder is the capability the harness passes beside a frame: each
// is distinct, so that a swapped capability shows.
type placeholder struct{ id int }

func (*placeholder) Close() error { return nil }

func placeholders(n int) []wire.Cap {
	caps := make([]wire.Cap, n)
	for i := range caps {
		caps[i] = &placeholder{id: i}
	}
	return caps
}

// suite is a vector file with the checked interface it tests.
type suite struct {
	file  vectorFile
	iface *idl.Interface
	msgs  map[string]*idl.Message
}

const vectorDir = "../../../testdata/wire"

func loadSuite(t testing.TB, name string) *suite {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(vectorDir, name))
	if err != nil {
		t.Fatal(err)
	}
	s := &suite{msgs: map[string]*idl.Message{}}
	if err := json.Unmarshal(data, &s.file); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var incs []string
	for _, inc := range s.file.Includes {
		incs = append(incs, filepath.Join(vectorDir, inc))
	}
	s.iface, err = idl.Load(filepath.Join(vectorDir, s.file.Interface), incs, idl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s.iface.Messages {
		s.msgs[m.Name] = m
	}
	return s
}

var kinds = map[string]wire.Kind{"message": wire.KindMessage, "call": wire.KindCall, "reply": wire.KindReply}

// build returns the zero message of v's message and kind, and the IDL
// arguments of that frame in field order.
func (s *suite) build(v vector) (alltypes.Msg, []*idl.Arg, error) {
	m := s.msgs[v.Message]
	if m == nil {
		return nil, nil, fmt.Errorf("no message %q", v.Message)
	}
	msg := alltypes.New(m.Number, kinds[v.Kind])
	if msg == nil {
		return nil, nil, fmt.Errorf("no %s of %s", v.Kind, v.Message)
	}
	args := m.In()
	if v.Kind == "reply" {
		args = m.Out()
	}
	return msg, args, nil
}

// fill sets the fields of msg (a pointer to a generated struct) from v's
// JSON fields. The Go fields follow the IDL arguments in order.
func fill(msg any, args []*idl.Arg, fields map[string]json.RawMessage, caps []wire.Cap) error {
	sv := reflect.ValueOf(msg).Elem()
	if sv.NumField() != len(args) {
		return fmt.Errorf("%T has %d fields, the IDL %d arguments", msg, sv.NumField(), len(args))
	}
	if len(fields) != len(args) {
		return fmt.Errorf("vector has %d fields, the IDL %d arguments", len(fields), len(args))
	}
	for i, a := range args {
		raw, ok := fields[a.Name]
		if !ok {
			return fmt.Errorf("vector lacks argument %s", a.Name)
		}
		var err error
		if a.Shape == idl.ShapeDynArray {
			err = setList(sv.Field(i), a.Type, raw, caps)
		} else {
			err = setValue(sv.Field(i), a.Type, raw, caps)
		}
		if err != nil {
			return fmt.Errorf("argument %s: %w", a.Name, err)
		}
	}
	return nil
}

func setList(v reflect.Value, elem *idl.TypeRef, raw json.RawMessage, caps []wire.Cap) error {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return err
	}
	if len(list) == 0 {
		v.SetZero() // decoders give nil for an empty array
		return nil
	}
	v.Set(reflect.MakeSlice(v.Type(), len(list), len(list)))
	for i, r := range list {
		if err := setValue(v.Index(i), elem, r, caps); err != nil {
			return fmt.Errorf("[%d]: %w", i, err)
		}
	}
	return nil
}

func setValue(v reflect.Value, t *idl.TypeRef, raw json.RawMessage, caps []wire.Cap) error {
	b, d := t.Underlying()
	if d != nil {
		switch d.Kind {
		case idl.DeclEnum:
			var name string
			if json.Unmarshal(raw, &name) == nil {
				for _, e := range d.Enumerators {
					if e.Name == name {
						v.SetUint(uint64(e.Value))
						return nil
					}
				}
				return fmt.Errorf("no enumerator %q", name)
			}
			n, err := parseUint(raw)
			v.SetUint(n) // a raw value, for unencodable vectors
			return err
		case idl.DeclStruct:
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(raw, &obj); err != nil {
				return err
			}
			if len(obj) != len(d.Fields) {
				return fmt.Errorf("struct %s: %d fields given, %d declared", d.Name, len(obj), len(d.Fields))
			}
			for i, f := range d.Fields {
				r, ok := obj[f.Name]
				if !ok {
					return fmt.Errorf("struct %s: no field %s", d.Name, f.Name)
				}
				if err := setValue(v.Field(i), f.Type, r, caps); err != nil {
					return fmt.Errorf(".%s: %w", f.Name, err)
				}
			}
			return nil
		case idl.DeclArray:
			var list []json.RawMessage
			if err := json.Unmarshal(raw, &list); err != nil {
				return err
			}
			if len(list) != v.Len() {
				return fmt.Errorf("array %s: %d elements given, %d declared", d.Name, len(list), v.Len())
			}
			for i, r := range list {
				if err := setValue(v.Index(i), d.Elem, r, caps); err != nil {
					return fmt.Errorf("[%d]: %w", i, err)
				}
			}
			return nil
		}
		return fmt.Errorf("unexpected declaration kind %v", d.Kind)
	}
	switch b {
	case idl.Bool:
		var x bool
		if err := json.Unmarshal(raw, &x); err != nil {
			return err
		}
		v.SetBool(x)
	case idl.String:
		var x string
		if err := json.Unmarshal(raw, &x); err != nil {
			return err
		}
		v.SetString(x)
	case idl.Iref:
		var x struct {
			Machine json.RawMessage `json:"machine"`
			Export  json.RawMessage `json:"export"`
			Token   string          `json:"token"`
		}
		if err := json.Unmarshal(raw, &x); err != nil {
			return err
		}
		var r wire.Iref
		var err1, err2 error
		r.Machine, err1 = parseUint(x.Machine)
		r.Export, err2 = parseUint(x.Export)
		tok, err3 := hex.DecodeString(x.Token)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		if len(tok) != len(r.Token) {
			return fmt.Errorf("iref token of %d bytes", len(tok))
		}
		copy(r.Token[:], tok)
		v.Set(reflect.ValueOf(r).Convert(v.Type()))
	case idl.Cap, idl.GiveAwayCap:
		n, err := parseUint(raw)
		if err != nil {
			return err
		}
		if n >= uint64(len(caps)) {
			return fmt.Errorf("capability %d of %d", n, len(caps))
		}
		v.Set(reflect.ValueOf(caps[n]))
	case idl.Int8, idl.Int16, idl.Int32, idl.Int64, idl.Intptr:
		n, err := parseInt(raw)
		if err != nil {
			return err
		}
		v.SetInt(n)
	default:
		n, err := parseUint(raw)
		if err != nil {
			return err
		}
		v.SetUint(n)
	}
	return nil
}

// parseUint reads a JSON number, or a decimal string for values past 2^53.
func parseUint(raw json.RawMessage) (uint64, error) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	return strconv.ParseUint(s, 10, 64)
}

func parseInt(raw json.RawMessage) (int64, error) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	return strconv.ParseInt(s, 10, 64)
}

// unencodableCaps is how many placeholder capabilities unencodable
// vectors, which give no ncaps, get to refer to.
const unencodableCaps = 32

func TestVectors(t *testing.T) {
	s := loadSuite(t, "alltypes.json")
	if len(s.file.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range s.file.Vectors {
		t.Run(v.Name, func(t *testing.T) { s.checkGood(t, v, true) })
	}
	for _, v := range s.file.DecodeOnly {
		t.Run(v.Name, func(t *testing.T) { s.checkGood(t, v, false) })
	}
}

// checkGood encodes v's fields and compares with its hex (if encode), and
// decodes its hex, typed and with the package-level Decode, and compares
// with its fields.
func (s *suite) checkGood(t *testing.T, v vector, encode bool) {
	frame, err := hex.DecodeString(v.Hex)
	if err != nil {
		t.Fatal(err)
	}
	caps := placeholders(v.NCaps)
	want, args, err := s.build(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := fill(want, args, v.Fields, caps); err != nil {
		t.Fatal(err)
	}
	if encode {
		var buf wire.Buffer
		buf.B = append(buf.B, "prefix"...) // Encode appends
		if err := want.Encode(&buf); err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if got := buf.B[len("prefix"):]; !bytes.Equal(got, frame) {
			t.Errorf("Encode:\n got %x\nwant %x", got, frame)
		}
		if !reflect.DeepEqual(buf.Caps, caps) && (len(buf.Caps) != 0 || len(caps) != 0) {
			t.Errorf("Encode: capabilities %v, want %v", buf.Caps, caps)
		}
		if len(buf.GiveAway) != len(buf.Caps) {
			t.Errorf("Encode: %d GiveAway flags for %d capabilities", len(buf.GiveAway), len(buf.Caps))
		}
	}
	got := reflect.New(reflect.TypeOf(want).Elem()).Interface().(alltypes.Msg)
	if err := got.Decode(frame, caps); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decode:\n got %+v\nwant %+v", got, want)
	}
	any, err := alltypes.Decode(frame, caps)
	if err != nil {
		t.Fatalf("package Decode: %v", err)
	}
	if !reflect.DeepEqual(any, want) {
		t.Errorf("package Decode:\n got %#v\nwant %#v", any, want)
	}
}

func TestMalformed(t *testing.T) {
	s := loadSuite(t, "alltypes.json")
	if len(s.file.Malformed) == 0 {
		t.Fatal("no malformed vectors")
	}
	for _, v := range s.file.Malformed {
		t.Run(v.Name, func(t *testing.T) {
			frame, err := hex.DecodeString(v.Hex)
			if err != nil {
				t.Fatal(err)
			}
			code := wire.CodeError(v.Error)
			if code == nil {
				t.Fatalf("unknown error code %q", v.Error)
			}
			caps := placeholders(v.NCaps)
			if v.Message == "" {
				m, err := alltypes.Decode(frame, caps)
				if !errors.Is(err, code) || !errors.Is(err, wire.ErrMalformed) || m != nil {
					t.Fatalf("package Decode = %v, %v; want an error matching %v", m, err, code)
				}
				return
			}
			m, _, err := s.build(v)
			if err != nil {
				t.Fatal(err)
			}
			err = m.Decode(frame, caps)
			if !errors.Is(err, code) || !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("Decode = %v; want an error matching %v", err, code)
			}
			if zero := reflect.New(reflect.TypeOf(m).Elem()).Interface(); !reflect.DeepEqual(m, zero) {
				t.Errorf("Decode failed but left %+v", m)
			}
			t.Log(err) // the detailed message, for reading with -v
		})
	}
}

func TestUnencodable(t *testing.T) {
	s := loadSuite(t, "alltypes.json")
	for _, v := range s.file.Unencodable {
		t.Run(v.Name, func(t *testing.T) {
			code := wire.CodeError(v.Error)
			if code == nil {
				t.Fatalf("unknown error code %q", v.Error)
			}
			m, args, err := s.build(v)
			if err != nil {
				t.Fatal(err)
			}
			if err := fill(m, args, v.Fields, placeholders(unencodableCaps)); err != nil {
				t.Fatal(err)
			}
			buf := wire.Buffer{B: []byte("prefix")}
			err = m.Encode(&buf)
			if !errors.Is(err, code) {
				t.Fatalf("Encode = %v; want an error matching %v", err, code)
			}
			if string(buf.B) != "prefix" || len(buf.Caps) != 0 {
				t.Errorf("failed Encode left %q and %d capabilities in the buffer", buf.B, len(buf.Caps))
			}
			t.Log(err)
		})
	}
}

// TestMutations decodes random mutations of the good vectors: decoding must
// never panic, a failure must match ErrMalformed, and a frame that decodes
// must encode back to the same bytes (the encoding is canonical), apart from
// call_id and timeout_us, which encoders leave 0.
func TestMutations(t *testing.T) {
	s := loadSuite(t, "alltypes.json")
	rng := rand.New(rand.NewPCG(1, 2))
	n := 200
	if testing.Short() {
		n = 20
	}
	for _, v := range s.file.Vectors {
		good, _ := hex.DecodeString(v.Hex)
		for range n {
			frame := mutate(rng, good)
			caps := placeholders(v.NCaps)
			if rng.IntN(8) == 0 {
				caps = placeholders(rng.IntN(4))
			}
			checkDecode(t, frame, caps)
		}
	}
}

// checkDecode is the property TestMutations and the fuzz target check.
func checkDecode(t *testing.T, frame []byte, caps []wire.Cap) {
	t.Helper()
	m, err := alltypes.Decode(frame, caps)
	if err != nil {
		if !errors.Is(err, wire.ErrMalformed) || wire.Code(err) == "" {
			t.Fatalf("Decode(%x) = %v, which is no wire code", frame, err)
		}
		return
	}
	var buf wire.Buffer
	if err := m.Encode(&buf); err != nil {
		t.Fatalf("Decode(%x) gave %+v, which does not encode: %v", frame, m, err)
	}
	want := bytes.Clone(frame)
	wire.SetCallID(want, 0)
	wire.SetTimeout(want, 0)
	if !bytes.Equal(buf.B, want) {
		t.Fatalf("Decode(%x) gave %+v, which encodes as %x", frame, m, buf.B)
	}
	if len(buf.Caps) != len(caps) {
		t.Fatalf("Decode(%x) took %d capabilities, encodes %d", frame, len(caps), len(buf.Caps))
	}
}

// mutate returns a copy of b with a few random changes: flipped bits, set
// bytes, truncation, extension, or a patched size.
func mutate(rng *rand.Rand, b []byte) []byte {
	out := bytes.Clone(b)
	for range 1 + rng.IntN(3) {
		switch rng.IntN(6) {
		case 0:
			if len(out) > 0 {
				i := rng.IntN(len(out))
				out[i] ^= 1 << rng.IntN(8)
			}
		case 1:
			if len(out) > 0 {
				out[rng.IntN(len(out))] = byte(rng.IntN(256))
			}
		case 2:
			if len(out) > 0 {
				out = out[:rng.IntN(len(out))]
			}
		case 3:
			out = append(out, byte(rng.IntN(256)))
		case 4:
			if len(out) >= wire.HeaderSize {
				wire.PutUint32(out, uint32(len(out)))
			}
		case 5:
			if len(out) >= wire.HeaderSize+4 {
				i := wire.HeaderSize + rng.IntN(len(out)-wire.HeaderSize-3)
				wire.PutUint32(out[i:], uint32(rng.IntN(600)))
			}
		}
	}
	return out
}
