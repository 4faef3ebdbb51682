// Package dynamic is the back end that generates nothing: it encodes and
// decodes the frames of an interface from its checked IDL at run time,
// with values as encoding/json gives and takes them, for tools that know
// an interface only by its file (`chanos call`). Its frames are byte for
// byte those of generated code (docs/wire.md).
//
// Values: integers are json.Number or Go integers (a negative value for a
// signed type); bool is bool; a String is string; an enum is its IDL name
// (or its number); a struct is a map from field names; an array is a
// []any; an array of uint8 or char is also a string of its bytes, or
// {"base64": "..."}; an iref is {"machine", "export", "token" (32 hex
// digits)}. A value left out is the type's zero. Decoding gives the same
// forms: integers as uint64 or int64, arrays of uint8 or char as a string
// when they are UTF-8, else {"base64": ...}. Capabilities cannot be given
// or taken this way.
package dynamic

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/chanos/chanos/idl"
	"github.com/chanos/chanos/wire"
)

// ErrValue is matched by every refusal of a value that does not fit its
// IDL type (a wrong JSON type, a number out of range, an unknown name).
var ErrValue = errors.New("dynamic: value does not fit its type")

// Frame is a message, rpc call or rpc reply of an interface, as a
// wire.Message: Encode encodes Values, Decode sets them.
type Frame struct {
	Iface  *idl.Interface
	Msg    *idl.Message
	Kind   wire.Kind // wire.KindMessage, KindCall or KindReply
	Values map[string]any
}

// Call returns the frame of a call of rpc (or, for a message, the
// message) named name of iface, with values as its arguments.
func Call(iface *idl.Interface, name string, values map[string]any) (*Frame, error) {
	for _, m := range iface.Messages {
		if m.Name == name {
			kind := wire.KindMessage
			if m.RPC {
				kind = wire.KindCall
			}
			return &Frame{Iface: iface, Msg: m, Kind: kind, Values: values}, nil
		}
	}
	return nil, fmt.Errorf("dynamic: %s has no message or rpc %q", iface.Name, name)
}

// Message returns an empty frame of the one-way message numbered num of
// iface, for Decode: what a peer sends on its own.
func Message(iface *idl.Interface, num uint16) (*Frame, error) {
	for _, m := range iface.Messages {
		if m.Number == num && !m.RPC {
			return &Frame{Iface: iface, Msg: m, Kind: wire.KindMessage}, nil
		}
	}
	return nil, fmt.Errorf("dynamic: %s has no message number %d", iface.Name, num)
}

// Reply returns an empty reply frame of f, an rpc call, for Decode.
func (f *Frame) Reply() *Frame {
	return &Frame{Iface: f.Iface, Msg: f.Msg, Kind: wire.KindReply}
}

// MsgNumber implements wire.Message.
func (f *Frame) MsgNumber() uint16 { return f.Msg.Number }

// MsgKind implements wire.Message.
func (f *Frame) MsgKind() wire.Kind { return f.Kind }

// MsgName implements wire.Message: "iface.msg".
func (f *Frame) MsgName() string { return f.Iface.Name + "." + f.Msg.Name }

// args returns the arguments f's kind carries.
func (f *Frame) args() []*idl.Arg {
	if f.Kind == wire.KindReply {
		return f.Msg.Out()
	}
	return f.Msg.In()
}

func (f *Frame) label() string {
	switch f.Kind {
	case wire.KindCall:
		return f.MsgName() + " call"
	case wire.KindReply:
		return f.MsgName() + " reply"
	}
	return f.MsgName()
}

// Encode implements wire.Message. A value that does not fit its type
// fails with an error matching ErrValue; one over a bound, with the wire's.
func (f *Frame) Encode(buf *wire.Buffer) error {
	args := f.args()
	known := map[string]bool{}
	for _, a := range args {
		known[a.Name] = true
	}
	for name := range f.Values {
		if !known[name] {
			return fmt.Errorf("%w: %s has no argument %q", ErrValue, f.label(), name)
		}
	}
	start, ncaps := len(buf.B), len(buf.Caps)
	var e wire.Encoder
	e.Begin(buf, f.label(), f.Msg.Number, f.Kind, 0)
	for _, a := range args {
		if err := encodeArg(&e, a, f.Values[a.Name]); err != nil {
			// Begin appended a header and more: buf is given back as
			// it was, as Encode promises.
			buf.B, buf.Caps = buf.B[:start], buf.Caps[:ncaps]
			return fmt.Errorf("%s: %w", f.label(), err)
		}
	}
	return e.Finish()
}

// Decode implements wire.Message: it sets Values to the frame's
// arguments.
func (f *Frame) Decode(frame []byte, caps []wire.Cap) error {
	var d wire.Decoder
	d.Begin(frame, caps, f.label(), f.Msg.Number, f.Kind)
	vals := map[string]any{}
	for _, a := range f.args() {
		if d.Failed() {
			break
		}
		vals[a.Name] = decodeArg(&d, a)
	}
	if err := d.Finish(); err != nil {
		return err
	}
	f.Values = vals
	return nil
}

func encodeArg(e *wire.Encoder, a *idl.Arg, v any) error {
	switch a.Shape {
	case idl.ShapeString:
		s, err := stringOf(v, a.Name)
		if err != nil {
			return err
		}
		e.String(a.Name, s, a.Max)
		return nil
	case idl.ShapeDynArray:
		if isBytes(a.Type) {
			b, err := bytesOf(v, a.Name)
			if err != nil {
				return err
			}
			e.Bytes(a.Name, b, a.Max)
			return nil
		}
		list, err := listOf(v, a.Name)
		if err != nil {
			return err
		}
		if !e.Count(a.Name, len(list), a.Max) {
			return nil // the encoder has the error
		}
		for i, x := range list {
			e.Enter()
			err := encodeValue(e, a.Type, 0, x, "")
			e.LeaveIndex(a.Name, i)
			if err != nil {
				return fmt.Errorf("%s[%d]: %w", a.Name, i, err)
			}
		}
		return nil
	}
	return encodeValue(e, a.Type, a.Max, v, a.Name)
}

// encodeValue encodes v as a value of type t; max bounds a String field.
func encodeValue(e *wire.Encoder, t *idl.TypeRef, max uint32, v any, field string) error {
	b, decl := t.Underlying()
	if decl == nil {
		return encodeBuiltin(e, b, max, v, field)
	}
	switch decl.Kind {
	case idl.DeclEnum:
		n := uint32(len(decl.Enumerators))
		x, err := enumOf(decl, v, field)
		if err != nil {
			return err
		}
		e.Enum(field, x, n)
	case idl.DeclArray:
		if isBytes(decl.Elem) {
			bs, err := bytesOf(v, field)
			if err != nil {
				return err
			}
			if v != nil && len(bs) != int(decl.Len) {
				return fmt.Errorf("%w: %s: %d bytes for an array of %d", ErrValue, field, len(bs), decl.Len)
			}
			e.Raw(append(bs, make([]byte, int(decl.Len)-len(bs))...))
			return nil
		}
		list, err := listOf(v, field)
		if err != nil {
			return err
		}
		if v != nil && len(list) != int(decl.Len) {
			return fmt.Errorf("%w: %s: %d elements for an array of %d", ErrValue, field, len(list), decl.Len)
		}
		for i := range int(decl.Len) {
			var x any
			if i < len(list) {
				x = list[i]
			}
			e.Enter()
			err := encodeValue(e, decl.Elem, 0, x, "")
			e.LeaveIndex(field, i)
			if err != nil {
				return fmt.Errorf("%s[%d]: %w", field, i, err)
			}
		}
	case idl.DeclStruct:
		m, err := mapOf(v, field)
		if err != nil {
			return err
		}
		known := map[string]bool{}
		for _, f := range decl.Fields {
			known[f.Name] = true
		}
		for k := range m {
			if !known[k] {
				return fmt.Errorf("%w: %s: the struct %s has no field %q", ErrValue, field, decl.Name, k)
			}
		}
		e.Enter()
		defer e.Leave(field)
		for _, f := range decl.Fields {
			if err := encodeValue(e, f.Type, f.Max, m[f.Name], f.Name); err != nil {
				return fmt.Errorf("%s.%w", field, err)
			}
		}
	default:
		return fmt.Errorf("%w: %s: a %v", ErrValue, field, decl.Kind)
	}
	return nil
}

func encodeBuiltin(e *wire.Encoder, b idl.Builtin, max uint32, v any, field string) error {
	switch b {
	case idl.Bool:
		x, ok := v.(bool)
		if !ok && v != nil {
			return fmt.Errorf("%w: %s: %v is not a bool", ErrValue, field, v)
		}
		e.Bool(x)
	case idl.String:
		s, err := stringOf(v, field)
		if err != nil {
			return err
		}
		e.String(field, s, max)
	case idl.Char:
		if s, ok := v.(string); ok {
			if len(s) != 1 {
				return fmt.Errorf("%w: %s: %q is not one byte", ErrValue, field, s)
			}
			e.Uint8(s[0])
			return nil
		}
		fallthrough
	case idl.Uint8, idl.Uint16, idl.Uint32, idl.Uint64, idl.Uintptr, idl.Size,
		idl.Int8, idl.Int16, idl.Int32, idl.Int64, idl.Intptr, idl.Errval:
		x, err := intOf(b, v, field)
		if err != nil {
			return err
		}
		switch b.WireSize() {
		case 1:
			e.Uint8(uint8(x))
		case 2:
			e.Uint16(uint16(x))
		case 4:
			e.Uint32(uint32(x))
		default:
			e.Uint64(x)
		}
	case idl.Iref:
		r, err := irefOf(v, field)
		if err != nil {
			return err
		}
		e.Iref(r)
	default:
		return fmt.Errorf("%w: %s: a %s cannot be given as a value", ErrValue, field, b)
	}
	return nil
}

func decodeArg(d *wire.Decoder, a *idl.Arg) any {
	switch a.Shape {
	case idl.ShapeString:
		return d.String(a.Name, a.Max)
	case idl.ShapeDynArray:
		if isBytes(a.Type) {
			return bytesValue(d.Bytes(a.Name, a.Max))
		}
		n := d.Count(a.Name, a.Max, minSize(a.Type))
		list := make([]any, 0, n)
		for i := 0; i < n && !d.Failed(); i++ {
			d.Enter()
			list = append(list, decodeValue(d, a.Type, 0, ""))
			d.LeaveIndex(a.Name, i)
		}
		return list
	}
	return decodeValue(d, a.Type, a.Max, a.Name)
}

func decodeValue(d *wire.Decoder, t *idl.TypeRef, max uint32, field string) any {
	b, decl := t.Underlying()
	if decl == nil {
		return decodeBuiltin(d, b, max, field)
	}
	switch decl.Kind {
	case idl.DeclEnum:
		x := d.Enum(field, uint32(len(decl.Enumerators)))
		if int(x) < len(decl.Enumerators) {
			return decl.Enumerators[x].Name
		}
		return x
	case idl.DeclArray:
		if isBytes(decl.Elem) {
			bs := make([]byte, decl.Len)
			d.Raw(field, bs)
			return bytesValue(bs)
		}
		list := make([]any, 0, decl.Len)
		for i := 0; i < int(decl.Len) && !d.Failed(); i++ {
			d.Enter()
			list = append(list, decodeValue(d, decl.Elem, 0, ""))
			d.LeaveIndex(field, i)
		}
		return list
	case idl.DeclStruct:
		m := map[string]any{}
		d.Enter()
		for _, f := range decl.Fields {
			m[f.Name] = decodeValue(d, f.Type, f.Max, f.Name)
		}
		d.Leave(field)
		return m
	}
	return nil
}

func decodeBuiltin(d *wire.Decoder, b idl.Builtin, max uint32, field string) any {
	switch b {
	case idl.Bool:
		return d.Bool(field)
	case idl.String:
		return d.String(field, max)
	case idl.Iref:
		r := d.Iref(field)
		return map[string]any{"machine": r.Machine, "export": r.Export, "token": hex.EncodeToString(r.Token[:])}
	case idl.Cap, idl.GiveAwayCap:
		c := d.Cap(field)
		if c != nil {
			c.Close() // a tool has no use for it
		}
		return "(capability)"
	}
	var u uint64
	switch b.WireSize() {
	case 1:
		u = uint64(d.Uint8(field))
	case 2:
		u = uint64(d.Uint16(field))
	case 4:
		u = uint64(d.Uint32(field))
	default:
		u = d.Uint64(field)
	}
	if bits, signed := intBits(b); signed {
		return int64(u<<(64-bits)) >> (64 - bits) // sign-extended
	}
	return u
}

// intBits returns the width of integer type b and whether it is signed.
func intBits(b idl.Builtin) (uint, bool) {
	bits := uint(8 * b.WireSize())
	switch b {
	case idl.Int8, idl.Int16, idl.Int32, idl.Int64, idl.Intptr:
		return bits, true
	}
	return bits, false
}

// intOf returns v as the bits of an integer of type b.
func intOf(b idl.Builtin, v any, field string) (uint64, error) {
	if v == nil {
		return 0, nil
	}
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	case float64:
		if x != math.Trunc(x) {
			return 0, fmt.Errorf("%w: %s: %v is not an integer", ErrValue, field, x)
		}
		s = strconv.FormatFloat(x, 'f', -1, 64)
	case int:
		s = strconv.Itoa(x)
	case int64:
		s = strconv.FormatInt(x, 10)
	case uint64:
		s = strconv.FormatUint(x, 10)
	default:
		return 0, fmt.Errorf("%w: %s: %v is not a number", ErrValue, field, v)
	}
	bits, signed := intBits(b)
	if signed {
		n, err := strconv.ParseInt(s, 0, int(bits))
		if err != nil {
			return 0, fmt.Errorf("%w: %s: %q is not a %s", ErrValue, field, s, b)
		}
		return uint64(n), nil
	}
	n, err := strconv.ParseUint(s, 0, int(bits))
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %q is not a %s", ErrValue, field, s, b)
	}
	return n, nil
}

func enumOf(decl *idl.TypeDecl, v any, field string) (uint32, error) {
	if v == nil {
		return 0, nil
	}
	if s, ok := v.(string); ok {
		for i, en := range decl.Enumerators {
			if en.Name == s {
				return uint32(i), nil
			}
		}
		names := make([]string, len(decl.Enumerators))
		for i, en := range decl.Enumerators {
			names[i] = en.Name
		}
		sort.Strings(names)
		return 0, fmt.Errorf("%w: %s: %q is not a value of %s (%v)", ErrValue, field, s, decl.Name, names)
	}
	n, err := intOf(idl.Uint32, v, field)
	return uint32(n), err
}

func stringOf(v any, field string) (string, error) {
	if v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: %s: %v is not a string", ErrValue, field, v)
	}
	return s, nil
}

func listOf(v any, field string) ([]any, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s: %v is not an array", ErrValue, field, v)
	}
	return l, nil
}

func mapOf(v any, field string) (map[string]any, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s: %v is not an object", ErrValue, field, v)
	}
	return m, nil
}

// isBytes reports whether t is uint8 or char: its arrays are bytes.
func isBytes(t *idl.TypeRef) bool {
	b, decl := t.Underlying()
	return decl == nil && (b == idl.Uint8 || b == idl.Char)
}

// bytesOf returns v, a string, {"base64": ...} or an array of numbers, as
// bytes.
func bytesOf(v any, field string) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []byte(x), nil
	case map[string]any:
		if s, ok := x["base64"].(string); ok && len(x) == 1 {
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrValue, field, err)
			}
			return b, nil
		}
	case []any:
		b := make([]byte, len(x))
		for i, e := range x {
			n, err := intOf(idl.Uint8, e, fmt.Sprintf("%s[%d]", field, i))
			if err != nil {
				return nil, err
			}
			b[i] = byte(n)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: %s: %v is not bytes (a string, an array of numbers or {\"base64\": ...})", ErrValue, field, v)
}

// bytesValue is b as a decoded value: a string if it is UTF-8.
func bytesValue(b []byte) any {
	if utf8.Valid(b) {
		return string(b)
	}
	return map[string]any{"base64": base64.StdEncoding.EncodeToString(b)}
}

func irefOf(v any, field string) (wire.Iref, error) {
	var r wire.Iref
	if v == nil {
		return r, nil
	}
	m, err := mapOf(v, field)
	if err != nil {
		return r, err
	}
	if r.Machine, err = intOf(idl.Uint64, m["machine"], field+".machine"); err != nil {
		return r, err
	}
	if r.Export, err = intOf(idl.Uint64, m["export"], field+".export"); err != nil {
		return r, err
	}
	if t, ok := m["token"].(string); ok {
		b, err := hex.DecodeString(t)
		if err != nil || len(b) != len(r.Token) {
			return r, fmt.Errorf("%w: %s.token: %d hex digits wanted", ErrValue, field, 2*len(r.Token))
		}
		copy(r.Token[:], b)
	}
	return r, nil
}

// minSize is the fewest bytes a value of t takes on the wire.
func minSize(t *idl.TypeRef) int {
	if n, ok := t.FixedSize(); ok {
		return n
	}
	b, decl := t.Underlying()
	if decl == nil {
		if b == idl.String {
			return 4
		}
		return b.WireSize()
	}
	switch decl.Kind {
	case idl.DeclArray:
		return int(decl.Len) * minSize(decl.Elem)
	case idl.DeclStruct:
		n := 0
		for _, f := range decl.Fields {
			n += minSize(f.Type)
		}
		return n
	}
	return 4
}
