// Package golang is the Go back end of chanosc: it turns a checked
// interface into one Go package, named after the interface, that holds the
// interface's types, a struct per message and per rpc call and reply, their
// encoders and decoders (package wire), a client stub and a server
// dispatcher (package chanos). docs/codegen-go.md describes the mapping.
package golang

import (
	"bytes"
	"fmt"
	"go/format"
	"go/token"
	"path/filepath"
	"strings"

	"github.com/chanos/chanos/gen"
	"github.com/chanos/chanos/idl"
)

// Backend is the Go back end. The zero Backend is ready to use.
type Backend struct {
	// MessagesOnly leaves out the client stub, the server interface and
	// the connection plumbing, so the package imports only wire. It is for
	// protocols that package chanos itself speaks (the monitor protocol),
	// which could not import chanos without an import cycle.
	MessagesOnly bool
}

// New returns the Go back end.
func New() *Backend { return &Backend{} }

// Generate returns the Go package of iface as a single file named after the
// package. Names that collide once converted to Go are reported as an
// idl.ErrorList, one FILE:LINE:COL error per collision.
func (b *Backend) Generate(iface *idl.Interface) ([]gen.File, error) {
	if iface == nil {
		return nil, fmt.Errorf("golang: nil interface")
	}
	g := &generator{iface: iface, types: map[*idl.TypeDecl]*typeInfo{}, messagesOnly: b.MessagesOnly}
	g.name()
	if len(g.errs) > 0 {
		return nil, g.errs
	}
	if err := g.validate(); err != nil {
		return nil, err
	}
	g.file()
	src, err := format.Source(g.out.Bytes())
	if err != nil {
		// A bug in the generator, not in the interface: say so, with the
		// source, which is what a bug report needs.
		return nil, fmt.Errorf("golang: generated code for %s does not parse (a chanosc bug): %w\n%s", iface.Name, err, g.out.Bytes())
	}
	return []gen.File{{Name: g.pkg + ".go", Data: src}}, nil
}

// generator holds the state of one Generate call.
type generator struct {
	iface        *idl.Interface
	messagesOnly bool
	pkg          string
	errs         idl.ErrorList
	types        map[*idl.TypeDecl]*typeInfo
	msgs         []*msgInfo
	out          bytes.Buffer
}

// typeInfo is the Go side of a type declaration.
type typeInfo struct {
	decl   *idl.TypeDecl
	name   string   // Go type name
	fields []string // Go field names of a struct
	consts []string // Go constant names of an enum's enumerators
}

// msgInfo is the Go side of a message or rpc.
type msgInfo struct {
	msg    *idl.Message
	name   string // Go name: the message type, and the Server and Client method
	number string // message number constant: MsgPing
	args   []*argInfo
	frames []*frameInfo // a message's frame, or an rpc's call and reply
	// appendName is the Append stub of an rpc whose reply is plain
	// arguments and one dynamic array of bytes, which it appends to the
	// caller's slice; "" for other rpcs and messages.
	appendName string
}

// argInfo is the Go side of an argument.
type argInfo struct {
	arg   *idl.Arg
	field string // field name in the message, call or reply struct
	param string // parameter name in the stub and the Server method
	bound string // bound constant of a String or dynamic array, else ""
}

// frameInfo is a message, rpc call or rpc reply: one Go struct type.
type frameInfo struct {
	m       *msgInfo
	typ     string // Go type name
	kind    string // "message", "call" or "reply"
	errName string // name in errors: "kv.put", "kv.get call"
	args    []*argInfo
}

// name assigns the Go names, reporting collisions.
func (g *generator) name() {
	iface := g.iface
	g.pkg = strings.ToLower(strings.ReplaceAll(iface.Name, "_", ""))
	if token.IsKeyword(g.pkg) {
		g.pkg += "_"
	}
	if !token.IsIdentifier(g.pkg) {
		g.errs = append(g.errs, &idl.Error{Pos: iface.Pos,
			Msg: fmt.Sprintf("interface %s has no Go package name: %q is not an identifier", iface.Name, g.pkg)})
		return
	}
	pkg := newScope("package "+g.pkg, &g.errs)
	typeNames := gen.TypeNames(iface)
	for _, d := range iface.Types {
		base := exported(typeNames[d])
		ti := &typeInfo{decl: d, name: escape(base, packageNames)}
		g.types[d] = ti
		pkg.claim(ti.name, d.Pos, fmt.Sprintf("%s %s", d.Kind, d.Name))
		switch d.Kind {
		case idl.DeclEnum:
			for _, e := range d.Enumerators {
				c := escape(base+exported(e.Name), packageNames)
				ti.consts = append(ti.consts, c)
				pkg.claim(c, e.Pos, fmt.Sprintf("enumerator %s of %s", e.Name, d.Name))
			}
		case idl.DeclStruct:
			fields := newScope("struct "+d.Name, &g.errs)
			for _, f := range d.Fields {
				n := exported(f.Name)
				ti.fields = append(ti.fields, n)
				fields.claim(n, f.Pos, "field "+f.Name)
			}
		}
	}
	methods := newScope("Client methods", &g.errs)
	for name := range clientMethods {
		methods.claim(name, iface.Pos, "the method "+name+" of Client")
	}
	for _, m := range iface.Messages {
		base := exported(m.Name)
		mi := &msgInfo{msg: m, name: escape(base, packageNames, clientMethods), number: "Msg" + base}
		g.msgs = append(g.msgs, mi)
		kw := "message"
		if m.RPC {
			kw = "rpc"
		}
		pkg.claim(mi.number, m.Pos, fmt.Sprintf("the number constant of %s %s", kw, m.Name))
		// Message arguments are fields only; rpc arguments are parameters
		// of the stub and of the Server method too.
		params := newScope(kw+" "+m.Name+" parameters", &g.errs)
		for _, a := range m.Args {
			ai := &argInfo{arg: a, field: escape(exported(a.Name), messageMethods),
				param: escape(unexported(a.Name), predeclared, localNames)}
			if a.Shape != idl.ShapeScalar {
				ai.bound = "Max" + base + exported(a.Name) + "Len"
				pkg.claim(ai.bound, a.Pos, fmt.Sprintf("the bound constant of argument %s of %s", a.Name, m.Name))
			}
			if m.RPC {
				params.claim(ai.param, a.Pos, "argument "+a.Name)
			}
			mi.args = append(mi.args, ai)
		}
		if !m.RPC {
			pkg.claim(mi.name, m.Pos, "message "+m.Name)
			mi.frames = []*frameInfo{{m: mi, typ: mi.name, kind: "message", errName: iface.Name + "." + m.Name, args: mi.args}}
		} else {
			call := &frameInfo{m: mi, typ: escape(base+"Call", packageNames), kind: "call", errName: iface.Name + "." + m.Name + " call"}
			reply := &frameInfo{m: mi, typ: escape(base+"Reply", packageNames), kind: "reply", errName: iface.Name + "." + m.Name + " reply"}
			pkg.claim(call.typ, m.Pos, fmt.Sprintf("the call type of rpc %s", m.Name))
			pkg.claim(reply.typ, m.Pos, fmt.Sprintf("the reply type of rpc %s", m.Name))
			for _, ai := range mi.args {
				if ai.arg.Dir == idl.DirOut {
					reply.args = append(reply.args, ai)
				} else {
					call.args = append(call.args, ai)
				}
			}
			mi.frames = []*frameInfo{call, reply}
			methods.claim(mi.name, m.Pos, "the stub of rpc "+m.Name)
			if _, _, ok := tailFrame(reply.args); ok && !g.messagesOnly {
				mi.appendName = mi.name + "Append"
				methods.claim(mi.appendName, m.Pos, "the Append stub of rpc "+m.Name)
			}
		}
		for _, f := range mi.frames {
			fields := newScope(f.kind+" "+m.Name, &g.errs)
			for _, ai := range f.args {
				fields.claim(ai.field, ai.arg.Pos, "argument "+ai.arg.Name)
			}
		}
	}
	sortErrors(g.errs)
}

// validate rejects what the checker should already have rejected, so that
// a front-end bug gives an error rather than broken Go.
func (g *generator) validate() error {
	var errs idl.ErrorList
	bad := func(pos idl.Pos, format string, args ...any) {
		errs = append(errs, &idl.Error{Pos: pos, Msg: fmt.Sprintf(format, args...)})
	}
	checkRef := func(t *idl.TypeRef, where string) bool {
		if t == nil {
			bad(g.iface.Pos, "%s: missing type", where)
			return false
		}
		if t.Decl == nil && (t.Builtin <= idl.NotBuiltin || t.Builtin > idl.Errval) {
			bad(t.Pos, "%s: unresolved type %s", where, t.Name)
			return false
		}
		if t.Decl != nil && g.types[t.Decl] == nil {
			bad(t.Pos, "%s: type %s is not declared in the interface", where, t.Name)
			return false
		}
		if k := t.CapKind; g.messagesOnly && (k == idl.CapEvent || k == idl.CapEndpoint) {
			bad(t.Pos, "%s: %s(%s) is a type of package chanos, which a messages-only package cannot import", where, t.Name, k)
			return false
		}
		return true
	}
	for _, d := range g.iface.Types {
		switch d.Kind {
		case idl.DeclAlias, idl.DeclTypedef, idl.DeclArray:
			if !checkRef(d.Elem, d.Name) {
				continue
			}
			if d.Kind == idl.DeclArray && isString(d.Elem) {
				bad(d.Pos, "array %s: arrays of String are not supported", d.Name)
			}
		case idl.DeclStruct:
			for _, f := range d.Fields {
				if checkRef(f.Type, d.Name) && isString(f.Type) {
					bad(f.Pos, "struct %s: String fields are not supported", d.Name)
				}
			}
		case idl.DeclEnum:
		default:
			bad(d.Pos, "type %s has unknown kind %v", d.Name, d.Kind)
		}
	}
	for _, m := range g.iface.Messages {
		for _, a := range m.Args {
			if !checkRef(a.Type, m.Name) {
				continue
			}
			if (a.Shape == idl.ShapeString) != isString(a.Type) {
				bad(a.Pos, "argument %s: String arguments, and only they, take the form String %s[MAX]", a.Name, a.Name)
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

func isString(t *idl.TypeRef) bool {
	b, d := t.Underlying()
	return d == nil && b == idl.String
}

func sortErrors(l idl.ErrorList) {
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && less(l[j].Pos, l[j-1].Pos); j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
}

func less(a, b idl.Pos) bool {
	if a.File != b.File {
		return a.File < b.File
	}
	if a.Line != b.Line {
		return a.Line < b.Line
	}
	return a.Col < b.Col
}

// source returns the base name of the interface's file, for comments.
func (g *generator) source() string {
	if g.iface.Pos.File == "" {
		return g.iface.Name + ".if"
	}
	return filepath.Base(g.iface.Pos.File)
}

// p writes one line of Go source (format-style), followed by a newline.
func (g *generator) p(format string, args ...any) {
	fmt.Fprintf(&g.out, format, args...)
	g.out.WriteByte('\n')
}
