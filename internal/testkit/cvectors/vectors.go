package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"

	cgen "github.com/chanos/chanos/gen/c"
	"github.com/chanos/chanos/idl"
	"github.com/chanos/chanos/internal/testkit/wirevectors"
)

// vectorFile and vector are the vector files' (wirevectors).
type (
	vectorFile = wirevectors.File
	vector     = wirevectors.Vector
)

func readVectors(path string) (*vectorFile, error) { return wirevectors.Read(path) }

// errorMacros maps the error codes of docs/wire.md to libchanos's.
var errorMacros = map[string]string{
	"truncated":       "CHANOS_ERR_TRUNCATED",
	"size":            "CHANOS_ERR_SIZE",
	"trailing":        "CHANOS_ERR_TRAILING",
	"unknown_message": "CHANOS_ERR_UNKNOWN_MESSAGE",
	"header":          "CHANOS_ERR_HEADER",
	"bound":           "CHANOS_ERR_BOUND",
	"enum":            "CHANOS_ERR_ENUM",
	"bool":            "CHANOS_ERR_BOOL",
	"cap":             "CHANOS_ERR_CAP",
	"nul":             "CHANOS_ERR_NUL",
}

// frameRef is a frame kind of a message, as a vector names it.
type frameRef struct {
	msg  *idl.Message
	kind string
}

// args returns the arguments that a frame carries.
func (f frameRef) args() []*idl.Arg {
	switch f.kind {
	case cgen.KindReply:
		return f.msg.Out()
	default:
		return f.msg.In()
	}
}

// lookup resolves a vector's message and kind.
func lookup(iface *idl.Interface, v *vector) (frameRef, error) {
	for _, m := range iface.Messages {
		if m.Name != v.Message {
			continue
		}
		switch {
		case !m.RPC && v.Kind == cgen.KindMessage,
			m.RPC && (v.Kind == cgen.KindCall || v.Kind == cgen.KindReply):
			return frameRef{m, v.Kind}, nil
		}
		return frameRef{}, fmt.Errorf("vector %s: %s has no frame of kind %q", v.Name, m.Name, v.Kind)
	}
	return frameRef{}, fmt.Errorf("vector %s: no message %q in interface %s", v.Name, v.Message, iface.Name)
}

// Values.

// integer parses a JSON integer: a number, or a decimal string for values
// beyond 2^53.
func integer(v any) (*big.Int, error) {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	default:
		return nil, fmt.Errorf("want an integer, got %T %v", v, v)
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return nil, fmt.Errorf("bad integer %q", s)
	}
	return n, nil
}

// intRange returns the range of a builtin integer type.
func intRange(b idl.Builtin) (lo, hi *big.Int) {
	bits := uint(8 * b.WireSize())
	one := big.NewInt(1)
	switch b {
	case idl.Int8, idl.Int16, idl.Int32, idl.Int64, idl.Intptr:
		hi = new(big.Int).Sub(new(big.Int).Lsh(one, bits-1), one)
		lo = new(big.Int).Neg(new(big.Int).Lsh(one, bits-1))
	default:
		lo = big.NewInt(0)
		hi = new(big.Int).Sub(new(big.Int).Lsh(one, bits), one)
	}
	return lo, hi
}

// intLiteral formats n as a C constant that any integer type can compare
// with or be assigned from without a warning.
func intLiteral(n *big.Int) string {
	minInt64 := new(big.Int).Neg(new(big.Int).Lsh(big.NewInt(1), 63))
	switch {
	case n.IsInt64() && n.Int64() >= -(1<<31-1) && n.Int64() <= 1<<31-1:
		return n.String()
	case n.Cmp(minInt64) == 0:
		return "INT64_MIN"
	case n.Sign() < 0:
		return "INT64_C(" + n.String() + ")"
	}
	return "UINT64_C(" + n.String() + ")"
}

// cString formats bytes as a C string literal. Everything but letters,
// digits and spaces is an octal escape, so no trigraph, quote or greedy
// hex escape can bite.
func cString(b []byte) string {
	var s strings.Builder
	s.WriteByte('"')
	for _, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == ' ', c == '_':
			s.WriteByte(c)
		default:
			fmt.Fprintf(&s, "\\%03o", c)
		}
	}
	s.WriteByte('"')
	return s.String()
}

// byteList parses a JSON list of byte values; signed elements (int8) are
// stored as their two's complement byte.
func byteList(v any, elem idl.Builtin) ([]byte, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("want a list, got %T", v)
	}
	lo, hi := intRange(elem)
	if elem == idl.Char {
		lo, hi = big.NewInt(0), big.NewInt(255)
	}
	out := make([]byte, 0, len(list))
	for _, e := range list {
		n, err := integer(e)
		if err != nil {
			return nil, err
		}
		if n.Cmp(lo) < 0 || n.Cmp(hi) > 0 {
			return nil, fmt.Errorf("%v out of range for %s", n, elem)
		}
		out = append(out, byte(n.Int64()))
	}
	return out, nil
}

func parseHex(s string) ([]byte, error) {
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("bad hex: %v", err)
	}
	return b, nil
}
