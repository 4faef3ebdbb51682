package idl

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Limits of the wire format that the checker enforces on declarations.
const (
	// MaxFrameSize is the largest frame the wire format can describe: the
	// header's size field is a u32.
	MaxFrameSize = 1<<32 - 1
	// MaxCaps is the most capabilities one frame can carry (ncaps is a u8).
	MaxCaps = 255
	// MaxMessages is the most messages and rpcs an interface can declare
	// (the message number is a u16 and 0 is reserved).
	MaxMessages = 1<<16 - 1
	// HeaderSize is the size of the frame header (docs/wire.md).
	HeaderSize = 16
	// maxSourceSize bounds the input, so that a runaway file is an error
	// rather than an out-of-memory.
	maxSourceSize = 16 << 20
)

// Options adjusts the checks.
type Options struct {
	// AllowNameMismatch turns off the rule that an interface's name must
	// equal its file's base name without the .if extension.
	AllowNameMismatch bool
}

// Source is an interface file's name and content.
type Source struct {
	Name string
	Data []byte
}

// Load reads, parses and checks the interface file at path, with the type
// declarations of the include files (chanosc -i) made visible to it.
// Errors about the files' content are an ErrorList, which matches
// ErrInvalid; failures to read a file are returned as they are.
func Load(path string, includes []string, opts Options) (*Interface, error) {
	main, err := ReadSource(path)
	if err != nil {
		return nil, err
	}
	return LoadIncluding(main, includes, opts)
}

// LoadIncluding is Load of an interface already in memory, main, with
// the include files at the paths includes.
func LoadIncluding(main Source, includes []string, opts Options) (*Interface, error) {
	var incs []Source
	for _, p := range includes {
		s, err := ReadSource(p)
		if err != nil {
			return nil, err
		}
		incs = append(incs, s)
	}
	return Compile(main, incs, opts)
}

// ReadSource reads the interface file at path, refusing one larger than
// interface files may be (an *Error).
func ReadSource(path string) (Source, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Source{}, err
	}
	if st.Size() > maxSourceSize {
		return Source{}, &Error{Pos: Pos{File: path, Line: 1, Col: 1},
			Msg: fmt.Sprintf("file is %d bytes; interface files are limited to %d", st.Size(), maxSourceSize)}
	}
	data, err := os.ReadFile(path)
	return Source{Name: path, Data: data}, err
}

// Compile parses and checks an interface from memory. It never panics,
// whatever the input; all problems come back as an ErrorList.
func Compile(main Source, includes []Source, opts Options) (*Interface, error) {
	errs := &errorSink{}
	c := &checker{errs: errs, opts: opts, types: map[string]*TypeDecl{}}
	iface := &Interface{}
	for _, inc := range includes {
		f := c.parse(inc)
		if f == nil {
			continue
		}
		for _, m := range f.messages {
			errs.errorf(m.Pos, "include file declares %s %s; include files may hold only type declarations", kindWord(m), m.Name)
		}
		for _, d := range f.types {
			d.Included = true
		}
		iface.Types = append(iface.Types, f.types...)
	}
	f := c.parse(main)
	if f == nil {
		return nil, errs.err()
	}
	if !f.hasInterface {
		errs.errorf(Pos{File: main.Name, Line: 1, Col: 1}, "expected \"interface NAME { ... };\"")
		return nil, errs.err()
	}
	iface.Pos, iface.Name, iface.Description, iface.Doc = f.namePos, f.name, f.description, f.doc
	iface.Types = append(iface.Types, f.types...)
	iface.Messages = f.messages
	c.check(iface)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return iface, nil
}

func kindWord(m *Message) string {
	if m.RPC {
		return "rpc"
	}
	return "message"
}

type checker struct {
	errs  *errorSink
	opts  Options
	types map[string]*TypeDecl
}

func (c *checker) parse(src Source) *syntaxFile {
	if len(src.Data) > maxSourceSize {
		c.errs.errorf(Pos{File: src.Name, Line: 1, Col: 1}, "file is %d bytes; interface files are limited to %d", len(src.Data), maxSourceSize)
		return nil
	}
	f := parseFile(src.Name, src.Data, c.errs)
	if f == nil {
		return nil
	}
	if f.hasInterface && !c.opts.AllowNameMismatch {
		base := strings.TrimSuffix(filepath.Base(src.Name), ".if")
		if f.name != base {
			c.errs.errorf(f.namePos, "interface %s is in file %s; the name must equal the file's base name %q (chanosc -no-name-check turns this off)",
				f.name, filepath.Base(src.Name), base)
		}
	}
	return f
}

func (c *checker) check(iface *Interface) {
	iface.Types = c.declareTypes(iface.Types)
	for _, d := range iface.Types {
		c.resolveDecl(d)
	}
	if c.findCycles(iface.Types) {
		// Everything below follows type chains; with a cycle it would not end.
		return
	}
	for _, d := range iface.Types {
		c.checkDecl(d)
	}
	c.checkMessages(iface.Messages)
}

// declareTypes enters the type declarations into the checker's scope and
// returns those that declare something. As in Flounder, whose build
// includes the same type files before every interface, two declarations
// of a name that say the same thing declare it once (the first counts),
// and an alias that names a builtin is ignored: a builtin's name always
// means the builtin (alias errval uint64; alias iref uint32;).
func (c *checker) declareTypes(types []*TypeDecl) []*TypeDecl {
	kept := types[:0:0]
	for _, d := range types {
		if _, ok := LookupBuiltin(d.Name); ok {
			if d.Kind != DeclAlias {
				c.errs.errorf(d.Pos, "%s %s redeclares a builtin type (only an alias of a builtin, which changes nothing, may name one)", d.Kind, d.Name)
			} else if _, ok := LookupBuiltin(d.Elem.Name); !ok {
				c.errs.errorf(d.Elem.Pos, "alias %s: %s is not a builtin type", d.Name, d.Elem.Name)
			}
			continue
		}
		if prev, ok := c.types[d.Name]; ok {
			if !sameDecl(prev, d) {
				c.errs.errorf(d.Pos, "type %s is declared again with a different definition (first declared at %s); only identical repeats are allowed", d.Name, prev.Pos)
			}
			continue
		}
		c.types[d.Name] = d
		kept = append(kept, d)
	}
	return kept
}

// sameDecl reports whether two declarations of one name say the same
// thing: the same form, and the same types, lengths, fields and
// enumerators, spelled alike (int and int32 are alike). Their names
// resolve in one scope, so the same spelling means the same type.
func sameDecl(a, b *TypeDecl) bool {
	if a.Kind != b.Kind || a.Len != b.Len || !sameRef(a.Elem, b.Elem) ||
		len(a.Fields) != len(b.Fields) || len(a.Enumerators) != len(b.Enumerators) {
		return false
	}
	for i, f := range a.Fields {
		if f.Name != b.Fields[i].Name || !sameRef(f.Type, b.Fields[i].Type) {
			return false
		}
	}
	for i, e := range a.Enumerators {
		if e.Name != b.Enumerators[i].Name {
			return false
		}
	}
	return true
}

func sameRef(a, b *TypeRef) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, xok := LookupBuiltin(a.Name)
	y, yok := LookupBuiltin(b.Name)
	if xok || yok {
		return x == y
	}
	return a.Name == b.Name
}

// resolve binds a type reference to a builtin or declaration; false if the
// type is undeclared (reported).
func (c *checker) resolve(t *TypeRef) bool {
	if t.Decl != nil || t.Builtin != NotBuiltin {
		return true
	}
	if b, ok := LookupBuiltin(t.Name); ok {
		t.Builtin = b
		return c.capKind(t)
	}
	if t.KindName != "" {
		c.errs.errorf(t.Pos, "%s takes no kind in parentheses: only cap and give_away_cap do (%s)", t.Name, kindList())
		return false
	}
	if d, ok := c.types[t.Name]; ok {
		t.Decl = d
		return true
	}
	hint := ""
	for _, cand := range append(builtinNames[1:], "int") {
		if strings.EqualFold(cand, t.Name) {
			hint = fmt.Sprintf(" (did you mean %s?)", cand)
		}
	}
	if hint == "" {
		names := make([]string, 0, len(c.types))
		for name := range c.types {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if strings.EqualFold(name, t.Name) {
				hint = fmt.Sprintf(" (did you mean %s?)", name)
				break
			}
		}
	}
	c.errs.errorf(t.Pos, "undeclared type %s%s", t.Name, hint)
	return false
}

func (c *checker) resolveDecl(d *TypeDecl) {
	switch d.Kind {
	case DeclAlias:
		if c.resolve(d.Elem) && d.Elem.Builtin == NotBuiltin {
			c.errs.errorf(d.Elem.Pos, "alias %s: %s is not a builtin type (use typedef to rename a declared type)", d.Name, d.Elem.Name)
		}
	case DeclTypedef, DeclArray:
		c.resolve(d.Elem)
	case DeclStruct:
		for _, f := range d.Fields {
			c.resolve(f.Type)
		}
	}
}

// findCycles reports each type declared in terms of itself; true if any.
func (c *checker) findCycles(types []*TypeDecl) bool {
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[*TypeDecl]int{}
	found := false
	var path []*TypeDecl
	var visit func(d *TypeDecl)
	visit = func(d *TypeDecl) {
		switch state[d] {
		case done:
			return
		case visiting:
			// The cycle is the part of path from d onwards.
			i := len(path) - 1
			for i > 0 && path[i] != d {
				i--
			}
			names := make([]string, 0, len(path)-i+1)
			for _, p := range path[i:] {
				names = append(names, p.Name)
			}
			names = append(names, d.Name)
			c.errs.errorf(d.Pos, "type %s is defined in terms of itself (%s)", d.Name, strings.Join(names, " -> "))
			found = true
			return
		}
		state[d] = visiting
		path = append(path, d)
		for _, ref := range declRefs(d) {
			if ref.Decl != nil {
				visit(ref.Decl)
			}
		}
		path = path[:len(path)-1]
		state[d] = done
	}
	for _, d := range types {
		visit(d)
	}
	return found
}

// declRefs returns the type references a declaration is built from.
func declRefs(d *TypeDecl) []*TypeRef {
	switch d.Kind {
	case DeclAlias, DeclTypedef, DeclArray:
		if d.Elem != nil {
			return []*TypeRef{d.Elem}
		}
	case DeclStruct:
		refs := make([]*TypeRef, len(d.Fields))
		for i, f := range d.Fields {
			refs[i] = f.Type
		}
		return refs
	}
	return nil
}

// capKind resolves the kind written after a builtin (`cap(file)`); false
// if it is unknown or the builtin takes none (reported).
func (c *checker) capKind(t *TypeRef) bool {
	if t.KindName == "" {
		return true
	}
	if !t.Builtin.IsCap() {
		c.errs.errorf(t.Pos, "%s takes no kind in parentheses: only cap and give_away_cap do (%s)", t.Name, kindList())
		return false
	}
	k, ok := LookupCapKind(t.KindName)
	if !ok {
		c.errs.errorf(t.Pos, "unknown capability kind %q: the kinds are %s", t.KindName, kindList())
		return false
	}
	t.CapKind = k
	return true
}

// kindList names the capability kinds, for errors.
func kindList() string { return "file, event, endpoint" }

// resolved reports whether t and everything it is built from resolved.
func resolved(t *TypeRef) bool {
	if t.Builtin != NotBuiltin {
		return true
	}
	if t.Decl == nil {
		return false
	}
	for _, r := range declRefs(t.Decl) {
		if !resolved(r) {
			return false
		}
	}
	return true
}

func isString(t *TypeRef) bool {
	b, d := t.Underlying()
	return d == nil && b == String
}

func (c *checker) checkDecl(d *TypeDecl) {
	switch d.Kind {
	case DeclStruct:
		if len(d.Fields) == 0 {
			c.errs.errorf(d.Pos, "struct %s has no fields", d.Name)
		}
		seen := map[string]*Field{}
		for _, f := range d.Fields {
			if prev, ok := seen[f.Name]; ok {
				c.errs.errorf(f.Pos, "duplicate field %s in struct %s (first at %s)", f.Name, d.Name, prev.Pos)
			}
			seen[f.Name] = f
			if resolved(f.Type) && isString(f.Type) {
				c.errs.errorf(f.Type.Pos, "struct %s, field %s: String is only allowed as a message argument (String name[MAX])", d.Name, f.Name)
			}
		}
	case DeclEnum:
		seen := map[string]*Enumerator{}
		for _, e := range d.Enumerators {
			if prev, ok := seen[e.Name]; ok {
				c.errs.errorf(e.Pos, "duplicate enumerator %s in enum %s (first at %s)", e.Name, d.Name, prev.Pos)
			}
			seen[e.Name] = e
		}
	case DeclArray:
		if resolved(d.Elem) && isString(d.Elem) {
			c.errs.errorf(d.Elem.Pos, "array %s: arrays of String are not supported", d.Name)
		}
	}
	if d.Kind != DeclEnum && allResolved(d) {
		if n := d.MaxWireSize(); n > MaxFrameSize {
			c.errs.errorf(d.Pos, "type %s takes %s on the wire, more than a frame can hold (%d bytes)", d.Name, sizeWords(n), uint64(MaxFrameSize))
		}
	}
}

func allResolved(d *TypeDecl) bool {
	for _, r := range declRefs(d) {
		if !resolved(r) {
			return false
		}
	}
	return true
}

func sizeWords(n uint64) string {
	if n >= satMax {
		return "an unbounded number of bytes"
	}
	return fmt.Sprintf("%d bytes", n)
}

func (c *checker) checkMessages(msgs []*Message) {
	if len(msgs) > MaxMessages {
		c.errs.errorf(msgs[MaxMessages].Pos, "too many messages: an interface holds at most %d messages and rpcs", MaxMessages)
	}
	seen := map[string]*Message{}
	for i, m := range msgs {
		m.Number = uint16(i + 1)
		if prev, ok := seen[m.Name]; ok {
			c.errs.errorf(m.Pos, "duplicate message %s (first declared at %s)", m.Name, prev.Pos)
		}
		seen[m.Name] = m
		c.checkAnnotations(m)
		c.checkArgs(m)
	}
}

func (c *checker) checkAnnotations(m *Message) {
	for _, a := range m.Annotations {
		keys := map[string]*AnnotationParam{}
		for _, p := range a.Params {
			if prev, ok := keys[p.Key]; ok {
				c.errs.errorf(p.Pos, "duplicate key %s in annotation @%s (first at %s)", p.Key, a.Name, prev.Pos)
			}
			keys[p.Key] = p
		}
	}
}

func (c *checker) checkArgs(m *Message) {
	names := map[string]Pos{}
	claim := func(name string, pos Pos, what string) {
		if prev, ok := names[name]; ok {
			c.errs.errorf(pos, "%s %s of %s %s clashes with the name declared at %s", what, name, kindWord(m), m.Name, prev)
			return
		}
		names[name] = pos
	}
	for _, a := range m.Args {
		claim(a.Name, a.Pos, "argument")
	}
	for _, a := range m.Args {
		if a.Shape == ShapeDynArray {
			claim(a.LenName, a.Pos, "length name")
		}
		switch {
		case m.RPC && a.Dir == DirNone:
			c.errs.errorf(a.Pos, "argument %s of rpc %s needs a direction: in or out", a.Name, m.Name)
		case !m.RPC && a.Dir != DirNone:
			c.errs.errorf(a.Pos, "argument %s of message %s has direction %s; only rpc arguments have one", a.Name, m.Name, a.Dir)
		}
		if !c.resolve(a.Type) || !resolved(a.Type) {
			continue
		}
		str := isString(a.Type)
		switch a.Shape {
		case ShapeScalar:
			if str {
				c.errs.errorf(a.Pos, "String argument %s needs a bound: String %s[MAX]", a.Name, a.Name)
			}
		case ShapeString:
			if !str {
				c.errs.errorf(a.Pos, "argument %s: a dynamic array needs a length name: %s %s[LEN, %d]", a.Name, a.Type.Name, a.Name, a.Max)
			}
		case ShapeDynArray:
			if str {
				c.errs.errorf(a.Pos, "argument %s: arrays of String are not supported", a.Name)
			}
		}
	}
	if m.RPC {
		c.checkFrame(m, "call of rpc", m.In())
		c.checkFrame(m, "reply of rpc", m.Out())
	} else {
		c.checkFrame(m, "message", m.Args)
	}
}

// checkFrame rejects argument lists whose largest frame would not fit the
// wire format's size field or capability count.
func (c *checker) checkFrame(m *Message, what string, args []*Arg) {
	for _, a := range args {
		if !resolved(a.Type) {
			return
		}
	}
	size, caps := FrameMax(args)
	if size > MaxFrameSize {
		c.errs.errorf(m.Pos, "the %s %s can take %s, more than a frame can hold (%d bytes)", what, m.Name, sizeWords(size), uint64(MaxFrameSize))
	}
	if caps > MaxCaps {
		c.errs.errorf(m.Pos, "the %s %s can carry %d capabilities, more than a frame can hold (%d)", what, m.Name, caps, MaxCaps)
	}
}

// MaxFrameSizeOf returns the largest frame the argument list can produce,
// header included (see FrameMax). It is only meaningful on a checked
// Interface.
func MaxFrameSizeOf(args []*Arg) uint64 {
	size, _ := FrameMax(args)
	return size
}

// MaxFrameSize returns the largest frame any message, call or reply of the
// interface can produce, header included; with rpcs, an error reply's
// status body counts too. Transports size their buffers from it.
func (iface *Interface) MaxFrameSize() uint64 {
	max := uint64(HeaderSize)
	for _, m := range iface.Messages {
		for _, args := range [][]*Arg{m.In(), m.Out()} {
			if n := MaxFrameSizeOf(args); n > max {
				max = n
			}
		}
		if m.RPC && max < StatusFrameSize {
			max = StatusFrameSize
		}
	}
	return max
}

// StatusFrameSize is the largest rpc error reply: header, u64 code and a
// String of at most MaxStatusDetail bytes (docs/wire.md).
const StatusFrameSize = HeaderSize + 8 + 4 + MaxStatusDetail

// MaxStatusDetail bounds the detail text of an rpc error reply.
const MaxStatusDetail = 1024
