// Package idl is the front end of chanosc: it lexes, parses and checks
// interface files in chanos IDL, a Flounder-compatible language, and hands
// the back ends a resolved abstract syntax tree.
//
// The tree is complete: every type reference is resolved, every message has
// its wire number, and every name has been checked for clashes. Back ends
// never need to report a language error of their own, except for names that
// collide only after a back end's own case conversion.
package idl

import "fmt"

// Pos is a position in an interface file. Line and Col count from 1; Col
// counts bytes.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string {
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Interface is one checked interface file.
type Interface struct {
	Pos         Pos
	Name        string
	Description string // "" when the file gives none
	// Doc is the doc comment of the interface, "" for none; so for every
	// Doc below. Its lines are separated by \n, without comment markers,
	// with no blank line at either end, and hold no control character but
	// the tab nor any byte that is not UTF-8 (docs/idl.md, "Doc
	// comments"). Comments do not change the fingerprint.
	Doc string
	// Types holds every type declaration in declaration order: those of the
	// include files first (Included is set on them), then the file's own.
	Types []*TypeDecl
	// Messages holds messages and rpcs in declaration order. Their wire
	// numbers are 1, 2, 3, ... in that order.
	Messages []*Message
}

// TypeDeclKind says which form a type declaration takes.
type TypeDeclKind int

const (
	// DeclAlias is `alias NEW builtin;`.
	DeclAlias TypeDeclKind = iota + 1
	// DeclTypedef is `typedef T NAME;`: a new name for an existing type.
	DeclTypedef
	// DeclStruct is `typedef struct { T f; ... } NAME;`.
	DeclStruct
	// DeclEnum is `typedef enum { A, B } NAME;`.
	DeclEnum
	// DeclArray is `typedef T NAME[N];`, a fixed-size array.
	DeclArray
)

func (k TypeDeclKind) String() string {
	switch k {
	case DeclAlias:
		return "alias"
	case DeclTypedef:
		return "typedef"
	case DeclStruct:
		return "struct"
	case DeclEnum:
		return "enum"
	case DeclArray:
		return "array"
	}
	return fmt.Sprintf("TypeDeclKind(%d)", int(k))
}

// TypeDecl is a named type declaration.
type TypeDecl struct {
	Pos      Pos
	Name     string
	Kind     TypeDeclKind
	Included bool // declared in an include file (chanosc -i)
	Doc      string

	// Elem is the aliased type (DeclAlias, DeclTypedef) or the element
	// type (DeclArray). Nil for structs and enums.
	Elem *TypeRef
	// Len is the element count of a DeclArray.
	Len uint32
	// Fields are the members of a DeclStruct, in declaration order.
	Fields []*Field
	// Enumerators are the members of a DeclEnum; their values are 0, 1, 2,
	// ... in declaration order.
	Enumerators []*Enumerator
}

// Field is a member of a struct.
type Field struct {
	Pos  Pos
	Name string
	Doc  string
	Type *TypeRef
	// Max is the bound of a String field (`String name[MAX];`), else 0.
	Max uint32
}

// Enumerator is one member of an enum.
type Enumerator struct {
	Pos   Pos
	Name  string
	Value uint32
	Doc   string
}

// Builtin is one of the language's built-in types.
type Builtin int

// The built-in types. NotBuiltin marks a reference to a declared type.
const (
	NotBuiltin Builtin = iota
	Uint8
	Uint16
	Uint32
	Uint64
	Uintptr
	Int8
	Int16
	Int32 // also spelled `int`
	Int64
	Intptr
	Size
	Char
	Bool
	String
	Iref
	Cap
	GiveAwayCap
	Errval
)

var builtinNames = [...]string{
	NotBuiltin:  "",
	Uint8:       "uint8",
	Uint16:      "uint16",
	Uint32:      "uint32",
	Uint64:      "uint64",
	Uintptr:     "uintptr",
	Int8:        "int8",
	Int16:       "int16",
	Int32:       "int32",
	Int64:       "int64",
	Intptr:      "intptr",
	Size:        "size",
	Char:        "char",
	Bool:        "bool",
	String:      "String",
	Iref:        "iref",
	Cap:         "cap",
	GiveAwayCap: "give_away_cap",
	Errval:      "errval",
}

func (b Builtin) String() string {
	if b >= 0 && int(b) < len(builtinNames) {
		return builtinNames[b]
	}
	return fmt.Sprintf("Builtin(%d)", int(b))
}

// LookupBuiltin returns the builtin spelled name, accepting `int` for
// int32, and false if name is not a builtin.
func LookupBuiltin(name string) (Builtin, bool) {
	if name == "int" {
		return Int32, true
	}
	for b, n := range builtinNames {
		if b != int(NotBuiltin) && n == name {
			return Builtin(b), true
		}
	}
	return NotBuiltin, false
}

// WireSize is the number of bytes a builtin takes on the wire, or 0 for
// String, whose size varies. See docs/wire.md.
func (b Builtin) WireSize() int {
	switch b {
	case Uint8, Int8, Char, Bool:
		return 1
	case Uint16, Int16:
		return 2
	case Uint32, Int32, Cap, GiveAwayCap:
		return 4
	case Uint64, Int64, Uintptr, Intptr, Size, Errval:
		return 8
	case Iref:
		return IrefWireSize
	}
	return 0
}

// IsCap reports whether b is cap or give_away_cap.
func (b Builtin) IsCap() bool { return b == Cap || b == GiveAwayCap }

// CapKind is what a capability carries, when its type says so:
// `cap(file)`, `give_away_cap(event)`, `give_away_cap(endpoint)`. The wire
// is the same for every kind (a descriptor beside the frame); back ends
// give each kind a type of its own, and the receiver's decoding checks
// that what came is of that kind. CapAny, a plain `cap`, is any
// descriptor, as in Flounder.
type CapKind int

// The capability kinds.
const (
	CapAny      CapKind = iota
	CapFile             // any file descriptor, as a file (Go *os.File)
	CapEvent            // an Event: an eventfd or timerfd (Go *chanos.Event)
	CapEndpoint         // an end of a fresh connection (Go *chanos.Endpoint)
)

var capKindNames = [...]string{CapAny: "", CapFile: "file", CapEvent: "event", CapEndpoint: "endpoint"}

func (k CapKind) String() string {
	if k >= 0 && int(k) < len(capKindNames) {
		return capKindNames[k]
	}
	return fmt.Sprintf("CapKind(%d)", int(k))
}

// LookupCapKind returns the kind spelled name, and false if there is none.
func LookupCapKind(name string) (CapKind, bool) {
	for k, n := range capKindNames {
		if k != int(CapAny) && n == name {
			return CapKind(k), true
		}
	}
	return CapAny, false
}

// IrefWireSize is the encoded size of an iref: machine id (8 bytes),
// export id (8 bytes) and token (16 bytes).
const IrefWireSize = 32

// TypeRef is a use of a type, resolved by the checker.
type TypeRef struct {
	Pos  Pos
	Name string // as written in the file ("int" stays "int")
	// Builtin is set when Name is a builtin; Decl is nil then.
	Builtin Builtin
	// Decl is the declaration Name refers to; nil for builtins.
	Decl *TypeDecl
	// KindName is the kind written after cap or give_away_cap
	// (`cap(file)`), "" for none; CapKind is what the checker resolved it
	// to.
	KindName string
	CapKind  CapKind
}

// Cap follows aliases and plain typedefs of t to a builtin, and returns
// the capability kind written there: CapAny for a cap without one, or for
// a type that is no cap.
func (t *TypeRef) Cap() CapKind {
	for ref := t; ; {
		if ref.Decl == nil {
			return ref.CapKind
		}
		if d := ref.Decl; d.Kind == DeclAlias || d.Kind == DeclTypedef {
			ref = d.Elem
			continue
		}
		return CapAny
	}
}

// Underlying follows aliases and plain typedefs until it reaches a builtin,
// a struct, an enum or a fixed array, and returns that. Exactly one of the
// results is meaningful: b when decl is nil, else decl (whose Kind is then
// DeclStruct, DeclEnum or DeclArray). The checker guarantees termination.
func (t *TypeRef) Underlying() (b Builtin, decl *TypeDecl) {
	for ref := t; ; {
		if ref.Decl == nil {
			return ref.Builtin, nil
		}
		switch ref.Decl.Kind {
		case DeclAlias, DeclTypedef:
			ref = ref.Decl.Elem
		default:
			return NotBuiltin, ref.Decl
		}
	}
}

// FixedSize returns the wire size of the type and true if every value of it
// takes the same number of bytes; otherwise (a String somewhere inside) it
// returns 0 and false.
func (t *TypeRef) FixedSize() (int, bool) {
	b, decl := t.Underlying()
	if decl == nil {
		n := b.WireSize()
		return n, n > 0
	}
	return decl.FixedSize()
}

// FixedSize returns the wire size of a struct, enum or array declaration,
// and false if it contains a String.
func (d *TypeDecl) FixedSize() (int, bool) {
	switch d.Kind {
	case DeclAlias, DeclTypedef:
		return d.Elem.FixedSize()
	case DeclEnum:
		return 4, true
	case DeclArray:
		n, ok := d.Elem.FixedSize()
		return n * int(d.Len), ok
	case DeclStruct:
		total := 0
		for _, f := range d.Fields {
			n, ok := f.Type.FixedSize()
			if !ok {
				return 0, false
			}
			total += n
		}
		return total, true
	}
	return 0, false
}

// Direction is the direction of an rpc argument.
type Direction int

const (
	// DirNone marks an argument of a plain message.
	DirNone Direction = iota
	// DirIn marks an rpc argument sent by the caller.
	DirIn
	// DirOut marks an rpc argument sent back in the reply.
	DirOut
)

func (d Direction) String() string {
	switch d {
	case DirIn:
		return "in"
	case DirOut:
		return "out"
	}
	return ""
}

// Shape says how an argument is laid out.
type Shape int

const (
	// ShapeScalar is `T name`.
	ShapeScalar Shape = iota
	// ShapeString is `String name[MAX]`.
	ShapeString
	// ShapeDynArray is `T name[LEN, MAX]`: up to MAX elements, with the
	// element count named LEN.
	ShapeDynArray
)

// Arg is an argument of a message or rpc.
type Arg struct {
	Pos   Pos
	Dir   Direction
	Type  *TypeRef
	Name  string
	Doc   string
	Shape Shape
	// LenName is the name of the length of a ShapeDynArray.
	LenName string
	// Max is the bound of a ShapeString (bytes) or ShapeDynArray (elements).
	Max uint32
}

// Message is a `message` or an `rpc`.
type Message struct {
	Pos         Pos
	Name        string
	RPC         bool
	Number      uint16 // wire number, from 1, in declaration order
	Doc         string
	Annotations []*Annotation
	Args        []*Arg // all arguments in declaration order
}

// In returns the arguments the sender of the message (or the caller of the
// rpc) encodes, in declaration order.
func (m *Message) In() []*Arg {
	if !m.RPC {
		return m.Args
	}
	return m.filter(DirIn)
}

// Out returns the arguments of an rpc's reply, in declaration order; nil
// for plain messages.
func (m *Message) Out() []*Arg {
	if !m.RPC {
		return nil
	}
	return m.filter(DirOut)
}

func (m *Message) filter(d Direction) []*Arg {
	var out []*Arg
	for _, a := range m.Args {
		if a.Dir == d {
			out = append(out, a)
		}
	}
	return out
}

// Annotation is a back-end annotation, `@NAME(key=value, ...)`, placed
// before a message or rpc. The front end keeps annotations without
// interpreting them.
type Annotation struct {
	Pos    Pos
	Name   string
	Params []*AnnotationParam
}

// AnnotationParam is one `key=value` of an annotation. Value holds an
// identifier or a decimal/hex integer as written; IsInt tells which, and
// Int holds the integer's value.
type AnnotationParam struct {
	Pos   Pos
	Key   string
	Value string
	IsInt bool
	Int   uint64
}

// Lookup returns the annotation named name, or nil.
func (m *Message) Lookup(name string) *Annotation {
	for _, a := range m.Annotations {
		if a.Name == name {
			return a
		}
	}
	return nil
}
