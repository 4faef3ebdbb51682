package idl

// The grammar (see docs/idl.md for the prose):
//
//	file       = "interface" ident [ string ] "{" { typedecl } { message } "}" ";"
//	           | { typedecl }                      (include files only)
//	typedecl   = "alias" ident ident ";"
//	           | "typedef" "struct" "{" { ident ident ";" } "}" ident ";"
//	           | "typedef" "enum" "{" ident { "," ident } [ "," ] "}" ident ";"
//	           | "typedef" ident ident [ "[" number "]" ] ";"
//	message    = { annotation } ( "message" | "rpc" ) ident "(" [ arg { "," arg } ] ")" ";"
//	annotation = "@" ident "(" [ param { "," param } ] ")"
//	param      = ident "=" ( number | ident )
//	arg        = [ "in" | "out" ] ident ident [ "[" ( number | ident "," number ) "]" ]
//
// The first token of a declaration brings its doc comment (doc.go).

// keywords of the IDL itself; they cannot name anything. They are
// Flounder's reserved names: alias, typedef, struct and enum are keywords
// only where a declaration expects them, and name things elsewhere
// (message struct(uint32 typedef);), as in Flounder.
var keywords = map[string]bool{
	"interface": true, "message": true, "rpc": true, "in": true, "out": true,
}

// syntaxFile is a parsed file before checking.
type syntaxFile struct {
	hasInterface bool
	namePos      Pos
	name         string
	description  string
	doc          string
	types        []*TypeDecl
	messages     []*Message
}

type parser struct {
	lex  *lexer
	tok  token
	errs *errorSink
	// failed is set after the first syntax error; parsing stops there,
	// because guessing how to recover gives misleading follow-on errors.
	failed bool
}

// parseFile parses src. Errors are recorded in errs; the result is nil
// after a syntax error, but not after a bad bound, so that the checker can
// still report everything else.
func parseFile(filename string, src []byte, errs *errorSink) *syntaxFile {
	p := &parser{lex: newLexer(filename, src, errs), errs: errs}
	p.next()
	f := p.file()
	if p.failed {
		return nil
	}
	return f
}

func (p *parser) next() {
	if p.failed {
		return
	}
	n := len(p.errs.list)
	p.tok = p.lex.next()
	if len(p.errs.list) > n {
		p.failed = true
	}
}

func (p *parser) fail(pos Pos, format string, args ...any) {
	if !p.failed {
		p.errs.errorf(pos, format, args...)
		p.failed = true
	}
	p.tok = token{kind: tokEOF, pos: pos}
}

// peek returns the token after the current one without consuming it.
func (p *parser) peek() token {
	lex, n := *p.lex, len(p.errs.list)
	t := lex.next()
	// A lexical error there is reported when the parser gets to it.
	p.errs.list = p.errs.list[:n]
	return t
}

func (p *parser) isPunct(s string) bool { return p.tok.kind == tokPunct && p.tok.text == s }

func (p *parser) isWord(s string) bool { return p.tok.kind == tokIdent && p.tok.text == s }

func (p *parser) expectPunct(s, context string) bool {
	if p.isPunct(s) {
		p.next()
		return true
	}
	p.fail(p.tok.pos, "expected %q %s, found %s", s, context, p.tok)
	return false
}

// ident reads a name that is not an IDL keyword.
func (p *parser) ident(what string) (string, Pos, bool) {
	t := p.tok
	if t.kind != tokIdent {
		p.fail(t.pos, "expected %s, found %s", what, t)
		return "", t.pos, false
	}
	if keywords[t.text] {
		p.fail(t.pos, "expected %s, found keyword %q", what, t.text)
		return "", t.pos, false
	}
	p.next()
	return t.text, t.pos, true
}

func (p *parser) number(what string) (uint64, Pos, bool) {
	t := p.tok
	if t.kind != tokNumber {
		p.fail(t.pos, "expected %s, found %s", what, t)
		return 0, t.pos, false
	}
	p.next()
	return t.num, t.pos, true
}

func (p *parser) file() *syntaxFile {
	f := &syntaxFile{}
	if !p.isWord("interface") {
		// An include file may be a bare list of type declarations.
		for !p.failed && p.tok.kind != tokEOF {
			if !p.typeDecl(f) {
				return f
			}
		}
		return f
	}
	f.hasInterface = true
	f.doc = p.tok.doc
	p.next()
	var ok bool
	if f.name, f.namePos, ok = p.ident("interface name"); !ok {
		return f
	}
	if p.tok.kind == tokString {
		f.description = p.tok.text
		p.next()
	}
	if !p.expectPunct("{", "to open the interface body") {
		return f
	}
	for !p.failed && !p.isPunct("}") {
		switch {
		case p.tok.kind == tokEOF:
			p.fail(p.tok.pos, "interface %q is not closed: expected \"}\"", f.name)
		case p.isWord("alias") || p.isWord("typedef"):
			if len(f.messages) > 0 {
				p.fail(p.tok.pos, "type declarations must come before the first message")
				return f
			}
			p.typeDecl(f)
		case p.isWord("message") || p.isWord("rpc") || p.isPunct("@"):
			p.message(f)
		default:
			p.fail(p.tok.pos, "expected a type declaration, message or rpc, found %s", p.tok)
		}
	}
	if p.failed {
		return f
	}
	p.next() // }
	if !p.expectPunct(";", "after the interface body") {
		return f
	}
	if p.tok.kind != tokEOF {
		p.fail(p.tok.pos, "unexpected %s after the end of the interface", p.tok)
	}
	return f
}

// typeDecl parses one alias or typedef; false on error.
func (p *parser) typeDecl(f *syntaxFile) bool {
	start, doc := p.tok.pos, p.tok.doc
	switch {
	case p.isWord("alias"):
		p.next()
		name, pos, ok := p.ident("alias name")
		if !ok {
			return false
		}
		elem, ok := p.typeRef()
		if !ok {
			return false
		}
		f.types = append(f.types, &TypeDecl{Pos: pos, Name: name, Kind: DeclAlias, Elem: elem, Doc: doc})
	case p.isWord("typedef"):
		p.next()
		var d *TypeDecl
		// struct and enum open a body only when a brace follows; otherwise
		// they are the names of declared types (typedef struct s;).
		switch next := p.peek(); {
		case p.isWord("struct") && next.kind == tokPunct && next.text == "{":
			d = p.structBody()
		case p.isWord("enum") && next.kind == tokPunct && next.text == "{":
			d = p.enumBody()
		default:
			elem, ok := p.typeRef()
			if !ok {
				return false
			}
			d = &TypeDecl{Kind: DeclTypedef, Elem: elem}
		}
		if d == nil {
			return false
		}
		name, pos, ok := p.ident("type name")
		if !ok {
			return false
		}
		d.Name, d.Pos, d.Doc = name, pos, doc
		if d.Kind == DeclTypedef && p.isPunct("[") {
			p.next()
			n, npos, ok := p.number("array length")
			if !ok {
				return false
			}
			if n == 0 {
				p.errs.errorf(npos, "array %s has length 0", name)
			} else if n > 1<<32-1 {
				p.errs.errorf(npos, "array %s has length %d, more than 4294967295", name, n)
			}
			d.Kind, d.Len = DeclArray, uint32(n)
			if !p.expectPunct("]", "after the array length") {
				return false
			}
		}
		f.types = append(f.types, d)
	default:
		p.fail(start, "expected a type declaration (alias or typedef), found %s", p.tok)
		return false
	}
	return p.expectPunct(";", "after the type declaration")
}

func (p *parser) typeRef() (*TypeRef, bool) {
	name, pos, ok := p.ident("type name")
	if !ok {
		return nil, false
	}
	t := &TypeRef{Pos: pos, Name: name}
	if p.isPunct("(") {
		// `cap(KIND)`: the checker says whether the type takes a kind.
		p.next()
		if t.KindName, _, ok = p.ident("capability kind"); !ok {
			return nil, false
		}
		if !p.expectPunct(")", "to close the capability kind") {
			return nil, false
		}
	}
	return t, true
}

func (p *parser) structBody() *TypeDecl {
	p.next() // struct
	if !p.expectPunct("{", "to open the struct") {
		return nil
	}
	d := &TypeDecl{Kind: DeclStruct}
	for !p.isPunct("}") {
		if p.tok.kind == tokEOF {
			p.fail(p.tok.pos, "struct is not closed: expected \"}\"")
			return nil
		}
		doc := p.tok.doc
		t, ok := p.typeRef()
		if !ok {
			return nil
		}
		name, pos, ok := p.ident("field name")
		if !ok {
			return nil
		}
		if p.isPunct("[") {
			if t.Name == "String" {
				p.fail(p.tok.pos, "struct field %s: arrays of String are not supported", name)
			} else {
				p.fail(p.tok.pos, "struct field %s: declare the array as a type first (typedef %s NAME[N];)", name, t.Name)
			}
			return nil
		}
		d.Fields = append(d.Fields, &Field{Pos: pos, Name: name, Type: t, Doc: doc})
		if !p.expectPunct(";", "after the struct field") {
			return nil
		}
	}
	p.next() // }
	return d
}

func (p *parser) enumBody() *TypeDecl {
	p.next() // enum
	if !p.expectPunct("{", "to open the enum") {
		return nil
	}
	d := &TypeDecl{Kind: DeclEnum}
	for {
		doc := p.tok.doc
		name, pos, ok := p.ident("enumerator")
		if !ok {
			return nil
		}
		d.Enumerators = append(d.Enumerators, &Enumerator{Pos: pos, Name: name, Value: uint32(len(d.Enumerators)), Doc: doc})
		if p.isPunct(",") {
			p.next()
			if p.isPunct("}") {
				break
			}
			continue
		}
		break
	}
	if !p.expectPunct("}", "to close the enum") {
		return nil
	}
	return d
}

func (p *parser) message(f *syntaxFile) {
	// The doc stands before the annotations, or between them and the
	// keyword.
	doc := p.tok.doc
	var anns []*Annotation
	for p.isPunct("@") {
		a := p.annotation()
		if a == nil {
			return
		}
		anns = append(anns, a)
	}
	if !p.isWord("message") && !p.isWord("rpc") {
		p.fail(p.tok.pos, "expected message or rpc after the annotation, found %s", p.tok)
		return
	}
	if doc == "" {
		doc = p.tok.doc
	}
	m := &Message{RPC: p.tok.text == "rpc", Annotations: anns, Doc: doc}
	p.next()
	var ok bool
	if m.Name, m.Pos, ok = p.ident("message name"); !ok {
		return
	}
	if !p.expectPunct("(", "to open the argument list") {
		return
	}
	if !p.isPunct(")") {
		for {
			a := p.arg()
			if a == nil {
				return
			}
			m.Args = append(m.Args, a)
			if !p.isPunct(",") {
				break
			}
			p.next()
		}
	}
	if !p.expectPunct(")", "to close the argument list") || !p.expectPunct(";", "after the message") {
		return
	}
	f.messages = append(f.messages, m)
}

func (p *parser) annotation() *Annotation {
	p.next() // @
	name, pos, ok := p.ident("annotation name")
	if !ok {
		return nil
	}
	a := &Annotation{Pos: pos, Name: name}
	if !p.expectPunct("(", "after the annotation name") {
		return nil
	}
	for !p.isPunct(")") {
		key, kpos, ok := p.ident("annotation key")
		if !ok || !p.expectPunct("=", "after the annotation key") {
			return nil
		}
		param := &AnnotationParam{Pos: kpos, Key: key}
		switch p.tok.kind {
		case tokNumber:
			param.Value, param.IsInt, param.Int = p.tok.text, true, p.tok.num
		case tokIdent:
			param.Value = p.tok.text
		default:
			p.fail(p.tok.pos, "expected a number or identifier as the value of %s, found %s", key, p.tok)
			return nil
		}
		p.next()
		a.Params = append(a.Params, param)
		if !p.isPunct(",") {
			break
		}
		p.next()
	}
	if !p.expectPunct(")", "to close the annotation") {
		return nil
	}
	return a
}

func (p *parser) arg() *Arg {
	a := &Arg{Pos: p.tok.pos, Doc: p.tok.doc}
	if p.isWord("in") || p.isWord("out") {
		a.Dir = DirIn
		if p.tok.text == "out" {
			a.Dir = DirOut
		}
		p.next()
	}
	t, ok := p.typeRef()
	if !ok {
		return nil
	}
	a.Type = t
	if a.Name, a.Pos, ok = p.ident("argument name"); !ok {
		return nil
	}
	if !p.isPunct("[") {
		return a
	}
	p.next()
	switch p.tok.kind {
	case tokNumber:
		// `T name[MAX]`: a String's bound (the checker rejects other types).
		n, pos, _ := p.number("bound")
		a.Shape, a.Max = ShapeString, p.bound(n, pos, a.Name)
	case tokIdent:
		// `T name[LEN, MAX]`: a dynamic array.
		a.Shape = ShapeDynArray
		if a.LenName, _, ok = p.ident("length name"); !ok {
			return nil
		}
		if !p.expectPunct(",", "between the length name and the bound") {
			return nil
		}
		n, pos, ok := p.number("bound")
		if !ok {
			return nil
		}
		a.Max = p.bound(n, pos, a.Name)
	default:
		p.fail(p.tok.pos, "expected a bound or a length name in [...] of %s, found %s", a.Name, p.tok)
		return nil
	}
	if !p.expectPunct("]", "to close the bound") {
		return nil
	}
	return a
}

func (p *parser) bound(n uint64, pos Pos, name string) uint32 {
	switch {
	case n == 0:
		p.errs.errorf(pos, "argument %s has bound 0; the bound must be at least 1", name)
	case n > 1<<32-1:
		p.errs.errorf(pos, "argument %s has bound %d, more than 4294967295", name, n)
		return 0
	}
	return uint32(n)
}
