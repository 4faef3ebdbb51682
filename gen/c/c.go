// Package c is the C back end of chanosc. For an interface NAME it writes
// NAME.h and NAME.c: a struct per message, rpc call and rpc reply, an
// encoder and a decoder for each, and an interface-wide decoder into a
// tagged union. The generated code uses the wire section of libchanos's
// chanos.h. docs/codegen-c.md describes the mapping and the API.
//
// Import it as cgen where the name c would be confusing.
package c

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/chanos/chanos/gen"
	"github.com/chanos/chanos/idl"
)

// Backend generates C. Its zero value is ready to use.
type Backend struct{}

// New returns a C back end.
func New() *Backend { return &Backend{} }

var _ gen.Backend = (*Backend)(nil)

// Generate returns NAME.h and NAME.c for iface. It fails, with an error
// that starts with FILE:LINE:COL, if two IDL names map to the same C name
// or if iface uses a construct the C mapping cannot express.
func (*Backend) Generate(iface *idl.Interface) ([]gen.File, error) {
	g, err := newGenerator(iface)
	if err != nil {
		return nil, err
	}
	return []gen.File{
		{Name: iface.Name + ".h", Data: []byte(g.header())},
		{Name: iface.Name + ".c", Data: []byte(g.source())},
	}, nil
}

// Frame kinds.
const (
	kindMessage = "message"
	kindCall    = "call"
	kindReply   = "reply"
)

// frame is one kind of frame the interface defines: a message, or the call
// or reply of an rpc. Each gets a C struct and an encoder and decoder.
type frame struct {
	msg     *idl.Message
	kind    string
	base    string // "ping", "get_call": the C name without the prefix
	cname   string // "pingpong_ping"
	member  string // the member of the tagged union
	args    []*idl.Arg
	maxSize uint64 // largest frame, header included
	maxCaps uint64
}

func (f *frame) kindMacro() string {
	switch f.kind {
	case kindCall:
		return "CHANOS_KIND_CALL"
	case kindReply:
		return "CHANOS_KIND_REPLY"
	}
	return "CHANOS_KIND_MESSAGE"
}

type generator struct {
	iface  *idl.Interface
	pfx    string // prefix of lower-case names: the interface name
	upfx   string // prefix of macros
	frames []*frame
	types  []*idl.TypeDecl        // declaration order, dependencies first
	reach  map[*idl.TypeDecl]bool // structs reachable from a frame
	hasRPC bool
	file   *scope
	// tnames are the types' names in generated code (gen.TypeNames).
	tnames map[*idl.TypeDecl]string
}

func newGenerator(iface *idl.Interface) (*generator, error) {
	g := &generator{
		iface:  iface,
		pfx:    iface.Name,
		upfx:   upper(iface.Name),
		reach:  map[*idl.TypeDecl]bool{},
		file:   newScope(),
		tnames: gen.TypeNames(iface),
	}
	if strings.EqualFold(iface.Name, "chanos") {
		return nil, errorf(iface.Pos, "interface name %s is reserved for libchanos in C", iface.Name)
	}
	if err := g.sortTypes(); err != nil {
		return nil, err
	}
	for _, m := range iface.Messages {
		if m.RPC {
			g.hasRPC = true
			g.frames = append(g.frames,
				g.newFrame(m, kindCall, m.Name+"_call", m.In()),
				g.newFrame(m, kindReply, m.Name+"_reply", m.Out()))
		} else {
			g.frames = append(g.frames, g.newFrame(m, kindMessage, m.Name, m.Args))
		}
	}
	for _, f := range g.frames {
		for _, a := range f.args {
			g.markReachable(a.Type)
		}
	}
	if err := g.checkTypes(); err != nil {
		return nil, err
	}
	if err := g.checkFrames(); err != nil {
		return nil, err
	}
	if err := g.claimBinding(); err != nil {
		return nil, err
	}
	if err := g.claimStubs(); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *generator) newFrame(m *idl.Message, kind, base string, args []*idl.Arg) *frame {
	f := &frame{msg: m, kind: kind, base: base, cname: FrameName(g.iface, m, kind), args: args}
	f.member = UnionMember(m, kind)
	f.maxSize, f.maxCaps = idl.FrameMax(args)
	return f
}

// sortTypes orders the type declarations so that each follows the ones it
// uses by value, keeping declaration order otherwise.
func (g *generator) sortTypes() error {
	const (
		visiting = 1
		done     = 2
	)
	state := map[*idl.TypeDecl]int{}
	var visit func(d *idl.TypeDecl) error
	visit = func(d *idl.TypeDecl) error {
		switch state[d] {
		case visiting:
			return errorf(d.Pos, "type %s contains itself", d.Name)
		case done:
			return nil
		}
		state[d] = visiting
		var deps []*idl.TypeRef
		if d.Elem != nil {
			deps = append(deps, d.Elem)
		}
		for _, f := range d.Fields {
			deps = append(deps, f.Type)
		}
		for _, t := range deps {
			if t.Decl != nil {
				if err := visit(t.Decl); err != nil {
					return err
				}
			}
		}
		state[d] = done
		g.types = append(g.types, d)
		return nil
	}
	for _, d := range g.iface.Types {
		if err := visit(d); err != nil {
			return err
		}
	}
	return nil
}

// markReachable records the structs whose values t may contain; they get
// encode and decode helpers.
func (g *generator) markReachable(t *idl.TypeRef) {
	for t.Decl != nil {
		d := t.Decl
		switch d.Kind {
		case idl.DeclAlias, idl.DeclTypedef, idl.DeclArray:
			t = d.Elem
			continue
		case idl.DeclStruct:
			if !g.reach[d] {
				g.reach[d] = true
				for _, f := range d.Fields {
					g.markReachable(f.Type)
				}
			}
		}
		return
	}
}

// checkTypes claims the C names of the type declarations and rejects what
// C cannot express.
func (g *generator) checkTypes() error {
	for _, d := range g.types {
		what := "type " + d.Name
		if err := g.file.add(g.typeName(d), d.Pos, what); err != nil {
			return err
		}
		switch d.Kind {
		case idl.DeclAlias, idl.DeclTypedef, idl.DeclArray:
			if isString(d.Elem) {
				return errorf(d.Pos, "type %s: String can only be an argument or a struct field", d.Name)
			}
		case idl.DeclEnum:
			if len(d.Enumerators) == 0 {
				return errorf(d.Pos, "enum %s has no enumerators", d.Name)
			}
			for _, e := range d.Enumerators {
				if err := g.file.add(g.enumerator(d, e), e.Pos, "enumerator "+e.Name+" of "+d.Name); err != nil {
					return err
				}
			}
		case idl.DeclStruct:
			members := newScope()
			for _, f := range d.Fields {
				if err := members.add(Member(f.Name), f.Pos, "field "+f.Name+" of "+d.Name); err != nil {
					return err
				}
				if isString(f.Type) {
					if err := g.file.add(g.fieldBound(d, f), f.Pos, "the bound of field "+f.Name+" of "+d.Name); err != nil {
						return err
					}
				}
			}
			if g.reach[d] {
				for _, fn := range []string{"enc_" + g.tname(d), "dec_" + g.tname(d)} {
					if err := g.file.add(fn, d.Pos, "the helper "+fn+" of "+d.Name); err != nil {
						return err
					}
				}
			}
		default:
			return errorf(d.Pos, "type %s: unknown declaration kind %v", d.Name, d.Kind)
		}
	}
	return nil
}

func (g *generator) checkFrames() error {
	add := func(name string, pos idl.Pos, what string) error {
		return g.file.add(name, pos, what)
	}
	var errs []error
	union := newScope()
	for _, m := range g.iface.Messages {
		kind := "message "
		if m.RPC {
			kind = "rpc "
		}
		errs = append(errs, add(g.msgNumber(m), m.Pos, "the number of "+kind+m.Name))
		for _, a := range m.Args {
			if a.Shape != idl.ShapeScalar {
				errs = append(errs, add(g.argBound(m, a), a.Pos, "the bound of argument "+a.Name+" of "+m.Name))
			}
			errs = append(errs, checkArg(a))
		}
	}
	for _, f := range g.frames {
		what := f.kind + " " + f.msg.Name
		if f.kind != kindMessage {
			what = "rpc " + f.msg.Name + " (" + f.kind + ")"
		}
		errs = append(errs,
			add(f.cname, f.msg.Pos, what),
			add(f.cname+"_encode", f.msg.Pos, "the encoder of "+what),
			add(f.cname+"_decode", f.msg.Pos, "the decoder of "+what),
			add(f.cname+"_decode_fault", f.msg.Pos, "the decoder with faults of "+what),
			add(upper(f.cname)+"_MAX_FRAME_SIZE", f.msg.Pos, "the frame size of "+what),
			union.add(f.member, f.msg.Pos, "the member for "+what+" of union "+g.pfx+"_msg"))
		if len(f.args) > 0 {
			errs = append(errs,
				add("enc_"+f.base, f.msg.Pos, "the body encoder of "+what),
				add("dec_"+f.base, f.msg.Pos, "the body decoder of "+what))
		}
		members := newScope()
		for _, a := range f.args {
			if a.Shape == idl.ShapeDynArray && !bytesView(a.Type) {
				errs = append(errs, members.add(Member(a.LenName), a.Pos, "length "+a.LenName+" of argument "+a.Name))
			}
			errs = append(errs, members.add(Member(a.Name), a.Pos, "argument "+a.Name+" of "+f.msg.Name))
		}
	}
	pos := g.iface.Pos
	errs = append(errs,
		add(g.pfx+"_msg", pos, "the tagged union of interface "+g.iface.Name),
		add(g.pfx+"_decode", pos, "the decoder of interface "+g.iface.Name),
		add(g.pfx+"_decode_fault", pos, "the decoder with faults of interface "+g.iface.Name),
		add(g.pfx+"_encode", pos, "the encoder of interface "+g.iface.Name),
		add(g.upfx+"_MAX_FRAME_SIZE", pos, "the frame size of interface "+g.iface.Name),
		add(g.upfx+"_MAX_CAPS", pos, "the capability count of interface "+g.iface.Name))
	// Report the first error in generation order: the same every time.
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// checkArg rejects argument shapes the C mapping cannot express; the front
// end is expected to have rejected them already.
func checkArg(a *idl.Arg) error {
	switch a.Shape {
	case idl.ShapeScalar:
		if isString(a.Type) {
			return errorf(a.Pos, "argument %s: String needs a bound, as in String %s[MAX]", a.Name, a.Name)
		}
	case idl.ShapeString:
		if !isString(a.Type) {
			return errorf(a.Pos, "argument %s: only String takes a string bound", a.Name)
		}
	case idl.ShapeDynArray:
		if _, ok := a.Type.FixedSize(); !ok {
			return errorf(a.Pos, "argument %s: array elements must have a fixed size", a.Name)
		}
	default:
		return errorf(a.Pos, "argument %s: unknown shape %d", a.Name, a.Shape)
	}
	return nil
}

// Names.

func (g *generator) typeName(d *idl.TypeDecl) string { return g.pfx + "_" + g.tname(d) }

// tname is the name of type d in generated code, without the prefix: its
// IDL name, or that name with _t appended where a message claims it
// (gen.TypeNames).
func (g *generator) tname(d *idl.TypeDecl) string {
	if g.tnames == nil {
		g.tnames = gen.TypeNames(g.iface)
	}
	if n, ok := g.tnames[d]; ok {
		return n
	}
	return d.Name
}

func (g *generator) enumerator(d *idl.TypeDecl, e *idl.Enumerator) string {
	return Enumerator(g.iface, d, e)
}

func (g *generator) fieldBound(d *idl.TypeDecl, f *idl.Field) string {
	return g.upfx + "_" + upper(g.tname(d)) + "_" + upper(f.Name) + "_MAX"
}

func (g *generator) argBound(m *idl.Message, a *idl.Arg) string {
	return g.upfx + "_" + upper(m.Name) + "_" + upper(a.Name) + "_MAX"
}

func (g *generator) msgNumber(m *idl.Message) string { return MessageNumber(g.iface, m) }

// ctype returns the C type that holds a value of t.
func (g *generator) ctype(t *idl.TypeRef) string {
	if t.Decl == nil {
		return builtinC[t.Builtin]
	}
	switch t.Decl.Kind {
	case idl.DeclStruct:
		return "struct " + g.typeName(t.Decl)
	case idl.DeclEnum:
		return "enum " + g.typeName(t.Decl)
	}
	return g.typeName(t.Decl)
}

var builtinC = map[idl.Builtin]string{
	idl.Uint8:       "uint8_t",
	idl.Uint16:      "uint16_t",
	idl.Uint32:      "uint32_t",
	idl.Uint64:      "uint64_t",
	idl.Uintptr:     "uint64_t",
	idl.Int8:        "int8_t",
	idl.Int16:       "int16_t",
	idl.Int32:       "int32_t",
	idl.Int64:       "int64_t",
	idl.Intptr:      "int64_t",
	idl.Size:        "uint64_t",
	idl.Char:        "char",
	idl.Bool:        "bool",
	idl.String:      "struct chanos_str",
	idl.Iref:        "struct chanos_iref",
	idl.Cap:         "int",
	idl.GiveAwayCap: "int",
	idl.Errval:      "uint64_t",
}

// Type predicates.

func isString(t *idl.TypeRef) bool {
	b, d := t.Underlying()
	return d == nil && b == idl.String
}

// isByte reports whether t is a 1-byte type that needs no validation, so
// that arrays of it are copied as bytes.
func isByte(t *idl.TypeRef) bool {
	b, d := t.Underlying()
	return d == nil && (b == idl.Uint8 || b == idl.Int8 || b == idl.Char)
}

// bytesView reports whether a dynamic array of t is a chanos_bytes view.
func bytesView(t *idl.TypeRef) bool { return isByte(t) }

// literal formats an unsigned constant for a macro: a plain int when it
// fits, else with the suffix or macro its size needs.
func literal(v uint64) string {
	switch {
	case v <= 1<<31-1:
		return fmt.Sprint(v)
	case v <= 1<<32-1:
		return fmt.Sprintf("%du", v)
	}
	return fmt.Sprintf("UINT64_C(%d)", v)
}

// argSignature renders an argument as IDL, for comments.
func argSignature(a *idl.Arg) string {
	s := a.Type.Name + " " + a.Name
	if a.Type.KindName != "" {
		s = a.Type.Name + "(" + a.Type.KindName + ") " + a.Name
	}
	if a.Dir != idl.DirNone {
		s = a.Dir.String() + " " + s
	}
	switch a.Shape {
	case idl.ShapeString:
		s += fmt.Sprintf("[%d]", a.Max)
	case idl.ShapeDynArray:
		s += fmt.Sprintf("[%s, %d]", a.LenName, a.Max)
	}
	return s
}

func baseName(p idl.Pos) string { return filepath.Base(p.File) }
