package idl

import (
	"fmt"
	"strings"
)

// Format returns an interface file that declares iface on its own: its
// description, doc comments, annotations and messages as checked, and
// every type a message needs, those of include files too, before the
// first message. Compiled with no include file (and the name check off,
// as the file has no name of its own), it gives an interface of the same
// name, messages and Fingerprint. It is what a domain answers when asked
// for the interface of one of its exports (docs/reflection.md), so that a
// caller such as `chanos call` needs no copy of the .if.
//
// The output depends on the checked tree only, never on the layout of the
// files it came from: two compilations of one interface format alike.
func (iface *Interface) Format() string {
	var f formatter
	if iface.Doc != "" {
		f.doc("", iface.Doc)
	}
	f.printf("interface %s", iface.Name)
	if iface.Description != "" {
		f.printf(" %s", quoteDescription(iface.Description))
	}
	f.printf(" {\n")
	needed := neededTypes(iface)
	written := false
	for _, d := range iface.Types {
		if !needed[d] {
			continue
		}
		f.typeDecl(d)
		written = true
	}
	for i, m := range iface.Messages {
		if i > 0 || written {
			f.printf("\n")
		}
		f.message(m)
	}
	f.printf("};\n")
	return f.b.String()
}

// neededTypes returns the declarations Format writes: the file's own, and
// those of include files that a message or another written declaration
// refers to, through any depth of references.
func neededTypes(iface *Interface) map[*TypeDecl]bool {
	needed := map[*TypeDecl]bool{}
	var visit func(t *TypeRef)
	visit = func(t *TypeRef) {
		if t == nil || t.Decl == nil || needed[t.Decl] {
			return
		}
		needed[t.Decl] = true
		for _, r := range declRefs(t.Decl) {
			visit(r)
		}
	}
	for _, d := range iface.Types {
		if !d.Included {
			visit(&TypeRef{Decl: d})
		}
	}
	for _, m := range iface.Messages {
		for _, a := range m.Args {
			visit(a.Type)
		}
	}
	return needed
}

type formatter struct{ b strings.Builder }

func (f *formatter) printf(format string, args ...any) { fmt.Fprintf(&f.b, format, args...) }

// doc writes a doc comment as line comments, each line after indent.
func (f *formatter) doc(indent, doc string) {
	for _, l := range strings.Split(doc, "\n") {
		if l == "" {
			f.printf("%s//\n", indent)
			continue
		}
		f.printf("%s// %s\n", indent, l)
	}
}

// list writes items a line each, after the doc of each, separated by
// commas: an enum's members, or a message's arguments.
func (f *formatter) list(items, docs []string) {
	for i, item := range items {
		if docs[i] != "" {
			f.doc("\t\t", docs[i])
		}
		sep := ","
		if i == len(items)-1 {
			sep = ""
		}
		f.printf("\t\t%s%s\n", item, sep)
	}
}

func (f *formatter) typeDecl(d *TypeDecl) {
	if d.Doc != "" {
		f.doc("\t", d.Doc)
	}
	switch d.Kind {
	case DeclAlias:
		f.printf("\talias %s %s;\n", d.Name, typeName(d.Elem))
	case DeclTypedef:
		f.printf("\ttypedef %s %s;\n", typeName(d.Elem), d.Name)
	case DeclArray:
		f.printf("\ttypedef %s %s[%d];\n", typeName(d.Elem), d.Name, d.Len)
	case DeclEnum:
		f.printf("\ttypedef enum {\n")
		names, docs := make([]string, len(d.Enumerators)), make([]string, len(d.Enumerators))
		for i, e := range d.Enumerators {
			names[i], docs[i] = e.Name, e.Doc
		}
		f.list(names, docs)
		f.printf("\t} %s;\n", d.Name)
	case DeclStruct:
		f.printf("\ttypedef struct {\n")
		for _, fl := range d.Fields {
			if fl.Doc != "" {
				f.doc("\t\t", fl.Doc)
			}
			f.printf("\t\t%s %s;\n", typeName(fl.Type), fl.Name)
		}
		f.printf("\t} %s;\n", d.Name)
	}
}

func (f *formatter) message(m *Message) {
	if m.Doc != "" {
		f.doc("\t", m.Doc)
	}
	for _, a := range m.Annotations {
		f.printf("\t@%s(", a.Name)
		for i, p := range a.Params {
			if i > 0 {
				f.printf(", ")
			}
			f.printf("%s=%s", p.Key, p.Value)
		}
		f.printf(")\n")
	}
	kind := "message"
	if m.RPC {
		kind = "rpc"
	}
	args := make([]string, len(m.Args))
	oneLine := true
	width := len(kind) + len(m.Name) + 10
	for i, a := range m.Args {
		args[i] = argText(a)
		width += len(args[i]) + 2
		oneLine = oneLine && a.Doc == ""
	}
	if oneLine && width <= 80 {
		f.printf("\t%s %s(%s);\n", kind, m.Name, strings.Join(args, ", "))
		return
	}
	f.printf("\t%s %s(\n", kind, m.Name)
	docs := make([]string, len(m.Args))
	for i, a := range m.Args {
		docs[i] = a.Doc
	}
	f.list(args, docs)
	f.printf("\t);\n")
}

// argText is an argument as the IDL spells it.
func argText(a *Arg) string {
	var b strings.Builder
	if d := a.Dir.String(); d != "" {
		b.WriteString(d)
		b.WriteByte(' ')
	}
	fmt.Fprintf(&b, "%s %s", typeName(a.Type), a.Name)
	switch a.Shape {
	case ShapeString:
		fmt.Fprintf(&b, "[%d]", a.Max)
	case ShapeDynArray:
		fmt.Fprintf(&b, "[%s, %d]", a.LenName, a.Max)
	}
	return b.String()
}

// typeName is a use of a type: the declaration's name, or the builtin's
// own (int32 where the file says int), and a capability's kind.
func typeName(t *TypeRef) string {
	name := t.Builtin.String()
	if t.Decl != nil {
		name = t.Decl.Name
	}
	if t.KindName != "" {
		return fmt.Sprintf("%s(%s)", name, t.KindName)
	}
	return name
}

// quoteDescription writes s as the IDL's string literal: printable bytes
// as they are, a quote and a backslash escaped, other control bytes as
// decimal escapes (followed by the empty escape \& where a digit comes
// next, which would otherwise continue the number).
func quoteDescription(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\%d", c)
			if i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
				b.WriteString("\\&")
			}
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
