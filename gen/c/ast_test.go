package c

import "github.com/chanos/chanos/idl"

// This file builds checked ASTs by hand, as the front end would, so that
// the back end can be tested on its own.

// builder hands out positions in one file, a line per call.
type builder struct {
	file string
	line int
}

func (b *builder) pos() idl.Pos {
	b.line++
	return idl.Pos{File: b.file, Line: b.line, Col: 1}
}

func builtin(k idl.Builtin) *idl.TypeRef {
	name := k.String()
	if k == idl.Int32 {
		name = "int"
	}
	return &idl.TypeRef{Name: name, Builtin: k}
}

func ref(d *idl.TypeDecl) *idl.TypeRef { return &idl.TypeRef{Name: d.Name, Decl: d} }

func (b *builder) alias(name string, elem *idl.TypeRef) *idl.TypeDecl {
	return &idl.TypeDecl{Pos: b.pos(), Name: name, Kind: idl.DeclAlias, Elem: elem}
}

func (b *builder) typedef(name string, elem *idl.TypeRef) *idl.TypeDecl {
	return &idl.TypeDecl{Pos: b.pos(), Name: name, Kind: idl.DeclTypedef, Elem: elem}
}

func (b *builder) array(name string, elem *idl.TypeRef, n uint32) *idl.TypeDecl {
	return &idl.TypeDecl{Pos: b.pos(), Name: name, Kind: idl.DeclArray, Elem: elem, Len: n}
}

func (b *builder) enum(name string, members ...string) *idl.TypeDecl {
	d := &idl.TypeDecl{Pos: b.pos(), Name: name, Kind: idl.DeclEnum}
	for i, m := range members {
		d.Enumerators = append(d.Enumerators, &idl.Enumerator{Pos: b.pos(), Name: m, Value: uint32(i)})
	}
	return d
}

func (b *builder) strct(name string, fields ...*idl.Field) *idl.TypeDecl {
	return &idl.TypeDecl{Pos: b.pos(), Name: name, Kind: idl.DeclStruct, Fields: fields}
}

func (b *builder) field(name string, t *idl.TypeRef) *idl.Field {
	return &idl.Field{Pos: b.pos(), Name: name, Type: t}
}

func (b *builder) strField(name string, max uint32) *idl.Field {
	return &idl.Field{Pos: b.pos(), Name: name, Type: builtin(idl.String), Max: max}
}

func (b *builder) arg(name string, t *idl.TypeRef) *idl.Arg {
	return &idl.Arg{Pos: b.pos(), Name: name, Type: t}
}

func (b *builder) str(name string, max uint32) *idl.Arg {
	return &idl.Arg{Pos: b.pos(), Name: name, Type: builtin(idl.String), Shape: idl.ShapeString, Max: max}
}

func (b *builder) dyn(name string, t *idl.TypeRef, lenName string, max uint32) *idl.Arg {
	return &idl.Arg{Pos: b.pos(), Name: name, Type: t, Shape: idl.ShapeDynArray, LenName: lenName, Max: max}
}

func in(a *idl.Arg) *idl.Arg  { a.Dir = idl.DirIn; return a }
func out(a *idl.Arg) *idl.Arg { a.Dir = idl.DirOut; return a }

func (b *builder) message(name string, args ...*idl.Arg) *idl.Message {
	return &idl.Message{Pos: b.pos(), Name: name, Args: args}
}

func (b *builder) rpc(name string, args ...*idl.Arg) *idl.Message {
	return &idl.Message{Pos: b.pos(), Name: name, RPC: true, Args: args}
}

// doc sets the doc comment of what it is given, and returns it.
func doc[T interface {
	*idl.TypeDecl | *idl.Field | *idl.Enumerator | *idl.Arg | *idl.Message
}](text string, x T) T {
	switch v := any(x).(type) {
	case *idl.TypeDecl:
		v.Doc = text
	case *idl.Field:
		v.Doc = text
	case *idl.Enumerator:
		v.Doc = text
	case *idl.Arg:
		v.Doc = text
	case *idl.Message:
		v.Doc = text
	}
	return x
}

func (b *builder) iface(name string, types []*idl.TypeDecl, msgs ...*idl.Message) *idl.Interface {
	for i, m := range msgs {
		m.Number = uint16(i + 1)
	}
	return &idl.Interface{Pos: idl.Pos{File: b.file, Line: 1, Col: 1}, Name: name, Types: types, Messages: msgs}
}

// pingpongAST is the interface of docs/wire.md's example.
func pingpongAST() *idl.Interface {
	b := &builder{file: "/somewhere/pingpong.if", line: 1}
	return b.iface("pingpong", nil,
		b.message("ping", b.arg("client_id", builtin(idl.Uint32)), b.arg("msg_id", builtin(idl.Uint32))),
		b.message("pong", b.arg("client_id", builtin(idl.Uint32)), b.arg("msg_id", builtin(idl.Uint32))),
		b.rpc("testrpc", in(b.arg("in", builtin(idl.Uint64))), out(b.arg("out", builtin(idl.Uint64)))),
	)
}

// ctestAST mirrors c/tests/ctest.if, which exercises every construct of
// the C mapping; c/tests/codegen_test.c tests the code generated from it.
// The two must stay in step.
func ctestAST() *idl.Interface {
	b := &builder{file: "/x/ctest.if", line: 1}
	color := doc("color is an enum whose members have doc comments.", b.enum("color", "red", "green", "blue"))
	for i, d := range []string{
		"red ends a C comment: */ here.",
		"green opens one: /* nested */ here.",
		"blue holds a trigraph, ??/ at the end of the line ??/",
	} {
		color.Enumerators[i].Doc = d
	}
	mac := b.array("mac", builtin(idl.Uint8), 6)
	handle := b.alias("handle", builtin(idl.Uint32))
	shade := b.typedef("shade", ref(color))
	vec := b.array("vec", builtin(idl.Int16), 3)
	mat := b.array("mat", ref(vec), 2)
	flags := b.array("flags", builtin(idl.Bool), 2)
	point := doc("point is documented in the style of Javadoc.", b.strct("point",
		doc("x is across.", b.field("x", builtin(idl.Int32))),
		b.field("y", builtin(idl.Int32)),
		b.field("c", ref(color))))
	rec := b.strct("rec",
		b.field("p", ref(point)),
		b.field("addr", ref(mac)),
		b.field("m", ref(mat)),
		b.field("f", ref(flags)),
		b.field("fd", builtin(idl.Cap)))
	pair := b.strct("pair", b.field("a", builtin(idl.Uint8)), b.field("b", builtin(idl.Uint64)))
	unused := b.strct("unused", b.field("z", builtin(idl.Uint16)))
	line := b.strct("line", b.field("from", ref(point)), b.field("to", ref(point)))
	types := []*idl.TypeDecl{color, mac, handle, shade, vec, mat, flags, point, rec, pair, unused, line}

	iface := b.iface("ctest", types,
		b.message("empty"),
		b.message("scalars",
			b.arg("u8", builtin(idl.Uint8)), b.arg("u16", builtin(idl.Uint16)),
			b.arg("u32", builtin(idl.Uint32)), b.arg("u64", builtin(idl.Uint64)),
			b.arg("i8", builtin(idl.Int8)), b.arg("i16", builtin(idl.Int16)),
			b.arg("i32", builtin(idl.Int32)), b.arg("i64", builtin(idl.Int64)),
			b.arg("up", builtin(idl.Uintptr)), b.arg("ip", builtin(idl.Intptr)),
			b.arg("sz", builtin(idl.Size)), b.arg("ch", builtin(idl.Char)),
			b.arg("flag", builtin(idl.Bool)), b.arg("err", builtin(idl.Errval)),
			b.arg("ref", builtin(idl.Iref)), b.arg("h", ref(handle)),
			b.arg("s", ref(shade))),
		doc("texts has a String, a byte array and a char array, each with a doc\ncomment.", b.message("texts",
			doc("name is at most 16 bytes.", b.str("name", 16)),
			doc("data is bytes.", b.dyn("data", builtin(idl.Uint8), "ndata", 8)),
			doc("chars are chars; this comment is long enough that it cannot stay\non one line.",
				b.dyn("chars", builtin(idl.Char), "nchars", 4)))),
		b.message("arrays",
			doc("vals is an array with a count, which its doc goes\nbefore.", b.dyn("vals", builtin(idl.Uint32), "nvals", 4)),
			b.dyn("bits", builtin(idl.Bool), "nbits", 3),
			b.dyn("colors", ref(color), "ncolors", 2),
			b.dyn("pairs", ref(pair), "npairs", 2),
			b.dyn("vecs", ref(vec), "nvecs", 2),
			b.arg("m", ref(mat)),
			b.arg("addr", ref(mac))),
		b.message("caps",
			b.arg("a", builtin(idl.Cap)),
			b.dyn("more", builtin(idl.GiveAwayCap), "nmore", 3),
			b.arg("r", ref(rec))),
		b.message("keywords",
			b.arg("register", builtin(idl.Int32)),
			b.dyn("default", builtin(idl.Uint16), "long", 2),
			b.arg("errno", builtin(idl.Uint8))),
		doc("lookup looks key up, at p.", b.rpc("lookup",
			in(b.str("key", 32)),
			in(b.arg("p", ref(point))),
			out(b.arg("found", builtin(idl.Bool))),
			out(b.arg("value", builtin(idl.Iref))),
			doc("fd is what was found.", out(b.arg("fd", builtin(idl.GiveAwayCap)))))),
		b.rpc("sync"),
		b.rpc("put", in(b.arg("h", ref(handle)))),
		b.rpc("get", out(b.arg("h", ref(handle)))),
		b.message("shapes", b.dyn("lines", ref(line), "nlines", 3)),
	)
	iface.Description = "C back-end test"
	iface.Doc = "ctest: exercises every construct of the C mapping (docs/codegen-c.md).\n" +
		"c/tests/codegen_test.c tests the code chanosc generates from it, and\n" +
		"gen/c/ast_test.go builds the same interface by hand: keep them in step.\n" +
		"Its doc comments hold what a C comment cannot hold as it is: an end of\n" +
		"comment, an opener and a trigraph, which the header must break up to\n" +
		"compile with -Wall -Werror."
	return iface
}
