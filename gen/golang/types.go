package golang

import (
	"fmt"
	"strings"

	"github.com/chanos/chanos/idl"
)

// builtinGo is the Go type of each builtin.
var builtinGo = map[idl.Builtin]string{
	idl.Uint8: "uint8", idl.Uint16: "uint16", idl.Uint32: "uint32", idl.Uint64: "uint64",
	idl.Int8: "int8", idl.Int16: "int16", idl.Int32: "int32", idl.Int64: "int64",
	idl.Uintptr: "uint64", idl.Intptr: "int64", idl.Size: "uint64",
	idl.Char: "byte", idl.Bool: "bool", idl.String: "string",
	idl.Iref: "wire.Iref", idl.Cap: "wire.Cap", idl.GiveAwayCap: "wire.Cap",
	idl.Errval: "wire.Errval",
}

// wireOp is how a scalar builtin is written and read: the Encoder and
// Decoder method, the Go type it takes and returns, and whether it takes
// the field name when encoding.
type wireOp struct {
	method   string
	goType   string
	encField bool
}

var wireOps = map[idl.Builtin]wireOp{
	idl.Uint8: {"Uint8", "uint8", false}, idl.Int8: {"Uint8", "uint8", false}, idl.Char: {"Uint8", "uint8", false},
	idl.Uint16: {"Uint16", "uint16", false}, idl.Int16: {"Uint16", "uint16", false},
	idl.Uint32: {"Uint32", "uint32", false}, idl.Int32: {"Uint32", "uint32", false},
	idl.Uint64: {"Uint64", "uint64", false}, idl.Int64: {"Uint64", "uint64", false},
	idl.Uintptr: {"Uint64", "uint64", false}, idl.Intptr: {"Uint64", "uint64", false},
	idl.Size: {"Uint64", "uint64", false}, idl.Errval: {"Uint64", "uint64", false},
	idl.Bool: {"Bool", "bool", false}, idl.Iref: {"Iref", "wire.Iref", false},
	idl.Cap: {"Cap", "wire.Cap", true}, idl.GiveAwayCap: {"GiveAwayCap", "wire.Cap", true},
}

// capGo is the Go type of each capability kind, and the function that
// converts a received wire.Cap to it (wire.CapAs).
var capGo = map[idl.CapKind]struct{ goType, conv string }{
	idl.CapFile:     {"*os.File", "wire.FileOf"},
	idl.CapEvent:    {"*chanos.Event", "chanos.EventFromCap"},
	idl.CapEndpoint: {"*chanos.Endpoint", "chanos.EndpointFromCap"},
}

// goType returns the Go spelling of t.
func (g *generator) goType(t *idl.TypeRef) string {
	if t.Decl != nil {
		return g.types[t.Decl].name
	}
	if t.CapKind != idl.CapAny {
		return capGo[t.CapKind].goType
	}
	return builtinGo[t.Builtin]
}

// usesFiles reports whether a type of the interface is a cap(file), whose
// Go type needs package os.
func (g *generator) usesFiles() bool {
	found := false
	visit := func(t *idl.TypeRef) {
		if t != nil && t.CapKind == idl.CapFile {
			found = true
		}
	}
	for _, d := range g.iface.Types {
		visit(d.Elem)
		for _, f := range d.Fields {
			visit(f.Type)
		}
	}
	for _, m := range g.iface.Messages {
		for _, a := range m.Args {
			visit(a.Type)
		}
	}
	return found
}

// elemType returns the Go spelling of an array element type: byte for
// uint8 and char, so that byte arrays read as such.
func (g *generator) elemType(t *idl.TypeRef) string {
	if isByte(t) {
		return "byte"
	}
	return g.goType(t)
}

// identical returns the builtin whose Go type is identical to t's: t is the
// builtin, or a chain of aliases (and typedefs of declared types, which are
// Go aliases too) leading to it. It returns NotBuiltin if t's Go type is a
// defined type.
func identical(t *idl.TypeRef) idl.Builtin {
	for ref := t; ; {
		d := ref.Decl
		switch {
		case d == nil:
			return ref.Builtin
		case d.Kind == idl.DeclAlias, d.Kind == idl.DeclTypedef && d.Elem.Decl != nil:
			ref = d.Elem
		default:
			return idl.NotBuiltin
		}
	}
}

// isByte reports whether t's Go type is byte: uint8 or char, possibly
// through aliases.
func isByte(t *idl.TypeRef) bool {
	b := identical(t)
	return b == idl.Uint8 || b == idl.Char
}

// sameGo reports whether the Go type of t is identical to goType, one of
// the types wireOps take.
func sameGo(t *idl.TypeRef, goType string) bool {
	b := identical(t)
	if b == idl.NotBuiltin {
		return false
	}
	s := builtinGo[b]
	if s == "byte" {
		s = "uint8"
	}
	return s == goType
}

// declDef returns the Go definition of a declared type: what follows
// "type NAME".
func (g *generator) declDef(d *idl.TypeDecl) string {
	switch d.Kind {
	case idl.DeclAlias:
		return "= " + g.goType(d.Elem)
	case idl.DeclTypedef:
		if d.Elem.Decl != nil {
			return "= " + g.goType(d.Elem)
		}
		return g.goType(d.Elem)
	case idl.DeclEnum:
		return "uint32"
	case idl.DeclArray:
		return fmt.Sprintf("[%d]%s", d.Len, g.elemType(d.Elem))
	}
	return "struct"
}

// zero returns the zero value of t in Go.
func (g *generator) zero(t *idl.TypeRef, shape idl.Shape) string {
	if shape == idl.ShapeDynArray {
		return "nil"
	}
	b, d := t.Underlying()
	if d != nil {
		if d.Kind == idl.DeclEnum {
			return "0"
		}
		return g.goType(t) + "{}"
	}
	switch b {
	case idl.Bool:
		return "false"
	case idl.String:
		return `""`
	case idl.Cap, idl.GiveAwayCap:
		return "nil"
	case idl.Iref:
		return g.goType(t) + "{}"
	}
	return "0"
}

// argType returns the Go type of an argument.
func (g *generator) argType(a *idl.Arg) string {
	if a.Shape == idl.ShapeDynArray {
		return "[]" + g.elemType(a.Type)
	}
	return g.goType(a.Type)
}

// composite reports whether values of t are encoded by a method of their
// own: structs and fixed arrays.
func composite(t *idl.TypeRef) bool {
	_, d := t.Underlying()
	return d != nil && d.Kind != idl.DeclEnum
}

// checked reports whether decoding a value of t can fail for a reason other
// than truncation (enum, bool, cap), or encoding it can fail (enum, cap);
// array elements of such types get their index in error paths.
func checked(t *idl.TypeRef, decode bool) bool {
	b, d := t.Underlying()
	if d != nil {
		return true
	}
	return b.IsCap() || (decode && b == idl.Bool)
}

// plain reports whether values of t need no checks on the wire: integers,
// chars, errvals and irefs. Frames made only of those (and of fixed arrays
// of integers) get the fast path of wire.AppendFixed and wire.FixedBody.
func plain(t *idl.TypeRef) bool {
	b, d := t.Underlying()
	if d != nil {
		if d.Kind != idl.DeclArray {
			return false
		}
		eb, ed := d.Elem.Underlying()
		return ed == nil && eb != idl.Iref && plainBuiltin(eb)
	}
	return plainBuiltin(b)
}

func plainBuiltin(b idl.Builtin) bool {
	switch b {
	case idl.Bool, idl.String, idl.Cap, idl.GiveAwayCap, idl.NotBuiltin:
		return false
	}
	return true
}

// fastFrame reports whether a frame's arguments are all plain scalars, and
// returns the body size.
func fastFrame(args []*argInfo) (int, bool) {
	size := 0
	for _, a := range args {
		if a.arg.Shape != idl.ShapeScalar || !plain(a.arg.Type) {
			return 0, false
		}
		n, _ := a.arg.Type.FixedSize()
		size += n
	}
	return size, true
}

// tailFrame reports whether a frame's arguments are plain scalars and
// one dynamic array of bytes, and returns the array's index and the body
// size without its bytes (the plain arguments and the array's count).
func tailFrame(args []*argInfo) (tail, size int, ok bool) {
	tail = -1
	for i, a := range args {
		switch {
		case a.arg.Shape == idl.ShapeDynArray && isByte(a.arg.Type) && tail < 0:
			tail = i
			size += 4
		case a.arg.Shape == idl.ShapeScalar && plain(a.arg.Type):
			n, _ := a.arg.Type.FixedSize()
			size += n
		default:
			return 0, 0, false
		}
	}
	return tail, size, tail >= 0
}

// minSize returns the smallest body of a frame: its fixed-size arguments,
// and the length or count of each String and dynamic array.
func minSize(args []*argInfo) int {
	size := 0
	for _, a := range args {
		if a.arg.Shape != idl.ShapeScalar {
			size += 4
			continue
		}
		n, _ := a.arg.Type.FixedSize()
		size += n
	}
	return size
}

// idlRef renders a type reference as written.
func idlRef(t *idl.TypeRef) string {
	if t.KindName != "" {
		return t.Name + "(" + t.KindName + ")"
	}
	if t.Name != "" {
		return t.Name
	}
	if t.Decl != nil {
		return t.Decl.Name
	}
	return t.Builtin.String()
}

// idlArg renders an argument as written in the IDL.
func idlArg(a *idl.Arg) string {
	var b strings.Builder
	if a.Dir != idl.DirNone {
		b.WriteString(a.Dir.String() + " ")
	}
	b.WriteString(idlRef(a.Type) + " " + a.Name)
	switch a.Shape {
	case idl.ShapeString:
		fmt.Fprintf(&b, "[%d]", a.Max)
	case idl.ShapeDynArray:
		fmt.Fprintf(&b, "[%s, %d]", a.LenName, a.Max)
	}
	return b.String()
}

// idlDecl renders a type declaration as IDL source lines.
func idlDecl(d *idl.TypeDecl) []string {
	switch d.Kind {
	case idl.DeclAlias:
		return []string{fmt.Sprintf("alias %s %s;", d.Name, idlRef(d.Elem))}
	case idl.DeclTypedef:
		return []string{fmt.Sprintf("typedef %s %s;", idlRef(d.Elem), d.Name)}
	case idl.DeclArray:
		return []string{fmt.Sprintf("typedef %s %s[%d];", idlRef(d.Elem), d.Name, d.Len)}
	case idl.DeclEnum:
		names := make([]string, len(d.Enumerators))
		for i, e := range d.Enumerators {
			names[i] = e.Name
		}
		return []string{fmt.Sprintf("typedef enum { %s } %s;", strings.Join(names, ", "), d.Name)}
	}
	lines := []string{"typedef struct {"}
	for _, f := range d.Fields {
		lines = append(lines, fmt.Sprintf("\t%s %s;", idlRef(f.Type), f.Name))
	}
	return append(lines, fmt.Sprintf("} %s;", d.Name))
}

// idlMessage renders a message or rpc declaration, annotations included,
// as IDL source lines.
func idlMessage(m *idl.Message) []string {
	var lines []string
	for _, a := range m.Annotations {
		params := make([]string, len(a.Params))
		for i, p := range a.Params {
			params[i] = p.Key + "=" + p.Value
		}
		lines = append(lines, fmt.Sprintf("@%s(%s)", a.Name, strings.Join(params, ", ")))
	}
	kw := "message"
	if m.RPC {
		kw = "rpc"
	}
	args := make([]string, len(m.Args))
	for i, a := range m.Args {
		args[i] = idlArg(a)
	}
	one := fmt.Sprintf("%s %s(%s);", kw, m.Name, strings.Join(args, ", "))
	if len(one) <= 72 {
		return append(lines, one)
	}
	lines = append(lines, fmt.Sprintf("%s %s(", kw, m.Name))
	for i, a := range args {
		sep := ","
		if i == len(args)-1 {
			sep = ");"
		}
		lines = append(lines, "\t"+a+sep)
	}
	return lines
}
