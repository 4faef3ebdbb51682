package c

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/chanos/chanos/idl"
)

// lineWidth is the column generated code wraps at.
const lineWidth = 80

// printer accumulates generated text.
type printer struct {
	b strings.Builder
}

func (p *printer) f(format string, args ...any) {
	fmt.Fprintf(&p.b, format, args...)
	p.b.WriteByte('\n')
}

func (p *printer) blank() { p.b.WriteByte('\n') }

func (p *printer) String() string { return p.b.String() }

// comment writes text as a C comment at the given indent: on one line if
// it fits, else as a block wrapped at lineWidth. Blank lines in text
// separate paragraphs.
func (p *printer) comment(indent, text string) {
	p.block(indent, paragraphs(text, lineWidth-len(indent)-3))
}

// commentDoc writes text as comment does, followed by doc, an IDL doc
// comment, as paragraphs of their own; either may be "".
func (p *printer) commentDoc(indent, text, doc string) {
	var lines []string
	if text != "" {
		lines = paragraphs(text, lineWidth-len(indent)-3)
	}
	p.block(indent, withDoc(lines, doc))
}

// withDoc returns lines followed by the lines of doc, an IDL doc comment,
// as they are in the IDL file, after a blank line.
func withDoc(lines []string, doc string) []string {
	if doc == "" {
		return lines
	}
	if len(lines) > 0 {
		lines = append(lines, "")
	}
	for _, l := range strings.Split(doc, "\n") {
		lines = append(lines, commentSafe(l))
	}
	return lines
}

// commentSafe breaks up what would end a block comment early (*\/), open
// one (/\*, which -Wcomment reports) or form a trigraph (?\?, ??/ is a
// backslash) in text a comment quotes: an IDL doc comment, whose // lines
// may hold any of them, or the interface's description.
func commentSafe(s string) string {
	return commentEscaper.Replace(s)
}

var commentEscaper = strings.NewReplacer("*/", "*\\/", "/*", "/\\*", "??", "?\\?")

// block writes lines as a C comment at the given indent: one line on one
// line if it fits, else a block of " * " lines, "" a blank one.
func (p *printer) block(indent string, lines []string) {
	if len(lines) == 0 {
		return
	}
	if len(lines) == 1 && len(indent)+len(lines[0])+6 <= lineWidth {
		p.f("%s/* %s */", indent, lines[0])
		return
	}
	p.f("%s/*", indent)
	for _, l := range lines {
		if l == "" {
			p.f("%s *", indent)
		} else {
			p.f("%s * %s", indent, l)
		}
	}
	p.f("%s */", indent)
}

// paragraphs wraps text at width: its paragraphs, separated by blank
// lines in text, with a "" line between them.
func paragraphs(text string, width int) []string {
	var lines []string
	for i, para := range strings.Split(text, "\n\n") {
		if i > 0 {
			lines = append(lines, "")
		}
		lines = append(lines, wrap(para, width)...)
	}
	return lines
}

// wrap splits text into lines of at most width bytes, at spaces. Lines of
// text that start with spaces are kept as they are (preformatted).
func wrap(text string, width int) []string {
	var out []string
	for _, raw := range strings.Split(text, "\n") {
		if strings.HasPrefix(raw, " ") {
			out = append(out, raw)
			continue
		}
		line := ""
		for _, w := range strings.Fields(raw) {
			switch {
			case line == "":
				line = w
			case len(line)+1+len(w) <= width:
				line += " " + w
			default:
				out = append(out, line)
				line = w
			}
		}
		if line != "" {
			out = append(out, line)
		}
	}
	return out
}

// proto formats a call or function head, indent+head(params...)tail,
// within lineWidth, continuing the parameter list aligned after the
// parenthesis.
func proto(indent, head string, params []string, tail string) string {
	one := indent + head + "(" + strings.Join(params, ", ") + ")" + tail
	if len(one) <= lineWidth {
		return one
	}
	cont := strings.Repeat(" ", len(indent)+len(head)+1)
	var b strings.Builder
	line := indent + head + "("
	for i, prm := range params {
		item := prm + ","
		if i == len(params)-1 {
			item = prm + ")" + tail
		}
		if len(line) > len(cont) && len(line)+len(item) > lineWidth {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = cont
		}
		line += item + " "
	}
	b.WriteString(strings.TrimRight(line, " "))
	return b.String()
}

// defines writes #define lines with their values aligned.
func (p *printer) defines(names, values []string) {
	w := 0
	for _, n := range names {
		w = max(w, len(n))
	}
	for i, n := range names {
		p.f("#define %-*s %s", w, n, values[i])
	}
}

// member is one line of a struct: a declaration and an optional comment,
// after it, and doc, an IDL doc comment, before it.
type member struct {
	decl    string
	comment string
	doc     string
}

// members writes struct members with their comments aligned.
func (p *printer) members(indent string, ms []member) {
	w := 0
	for _, m := range ms {
		if m.comment != "" && len(indent)+len(m.decl)+1+len(m.comment)+7 <= lineWidth {
			w = max(w, len(m.decl)+1)
		}
	}
	for _, m := range ms {
		d := m.decl + ";"
		switch {
		case m.comment == "":
			p.block(indent, withDoc(nil, m.doc))
			p.f("%s%s", indent, d)
		case len(indent)+max(w, len(d))+len(m.comment)+7 <= lineWidth:
			p.block(indent, withDoc(nil, m.doc))
			p.f("%s%-*s /* %s */", indent, w, d, m.comment)
		default:
			// One block above the member, not two.
			p.commentDoc(indent, m.comment, m.doc)
			p.f("%s%s", indent, d)
		}
	}
}

// The header.

func (g *generator) header() string {
	var p printer
	p.f("/* Code generated by chanosc from %s. DO NOT EDIT. */", baseName(g.iface.Pos))
	p.blank()
	g.headerDoc(&p)
	guard := "CHANOS_GEN_" + g.upfx + "_H"
	p.f("#ifndef %s", guard)
	p.f("#define %s", guard)
	p.blank()
	p.f("#include <chanos.h>")
	p.blank()
	p.f("#ifdef __cplusplus")
	p.f("extern \"C\" {")
	p.f("#endif")
	p.blank()

	if len(g.iface.Messages) > 0 {
		p.comment("", "Message numbers: the msg field of the frame header.")
		var names, values []string
		for _, m := range g.iface.Messages {
			names = append(names, g.msgNumber(m))
			values = append(values, fmt.Sprint(m.Number))
		}
		p.defines(names, values)
		p.blank()
	}
	p.comment("", "The largest frame of the interface, header included (rpc error "+
		"replies too), and the most capabilities one frame carries.")
	var most, caps uint64
	if g.hasRPC {
		most = idl.StatusFrameSize
	}
	for _, f := range g.frames {
		most = max(most, f.maxSize)
		caps = max(caps, f.maxCaps)
	}
	p.defines([]string{g.upfx + "_MAX_FRAME_SIZE", g.upfx + "_MAX_CAPS"},
		[]string{literal(most), literal(min(caps, 255))})
	p.blank()
	g.bindingDecls(&p)

	for _, d := range g.types {
		g.typeDecl(&p, d)
	}
	for _, m := range g.iface.Messages {
		g.messageDecls(&p, m)
	}
	g.unionDecl(&p)
	g.stubDecls(&p)

	p.f("#ifdef __cplusplus")
	p.f("}")
	p.f("#endif")
	p.blank()
	p.f("#endif /* %s */", guard)
	return p.String()
}

func (g *generator) headerDoc(p *printer) {
	n := g.iface.Name
	title := fmt.Sprintf("%s.h: the C binding of interface %s", n, n)
	if g.iface.Description != "" {
		// Quoted, a description has no line breaks or control characters.
		title += ", " + commentSafe(fmt.Sprintf("%q", g.iface.Description))
	}
	x := n + "_X"
	text := fmt.Sprintf("Each message NAME has a struct %s_NAME, and each rpc NAME a struct "+
		"%s_NAME_call (its in arguments) and a struct %s_NAME_reply (its out "+
		"arguments). For each of these structs X:", n, n, n) + "\n\n" +
		docProto(proto("     ", "int "+x+"_encode", []string{"const struct " + x + " *m", "struct chanos_buf *out"}, ";")) + "\n" +
		"      appends one frame to out, with call_id and timeout_us 0.\n" +
		"      Returns 0; CHANOS_ERR_BOUND, _NUL, _ENUM or _CAP for a value\n" +
		"      that cannot be encoded; or CHANOS_ERR_NOSPACE. out is unchanged\n" +
		"      on failure, which is described in *out->fault if it is set:\n" +
		"      which field, and why (chanos_wire_fault_describe).\n" +
		"      Capabilities (fds) are copied to out->fds, not duplicated or\n" +
		"      closed.\n" +
		docProto(proto("     ", "int "+x+"_decode", decodeParams(x, false), ";")) + "\n" +
		"      decodes the one frame in frame[0..len), whose capabilities came\n" +
		"      with it as fds[0..nfds). Returns 0 or a CHANOS_ERR_* code (see\n" +
		"      docs/wire.md); *m is unspecified on failure. Strings and byte\n" +
		"      arrays in *m are views into frame, valid while it is. Capability\n" +
		"      fields are fds copied from fds: decoding neither duplicates nor\n" +
		"      closes them.\n" +
		docProto(proto("     ", "int "+x+"_decode_fault", decodeParams(x, true), ";")) + "\n" +
		"      is " + x + "_decode that also describes a failure in *fault (NULL:\n" +
		"      nowhere). It writes *fault only when it fails.\n\n" +
		fmt.Sprintf("%s_decode decodes any frame of the interface into a struct %s_msg "+
			"(%s_decode_fault too), and %s_encode encodes one, call_id and timeout_us "+
			"included.", n, n, n, n)
	width := lineWidth - 3
	lines := withDoc(paragraphs(title+".", width), g.iface.Doc)
	p.block("", append(append(lines, ""), paragraphs(text, width)...))
}

// signature writes the IDL declaration of m as a comment, wrapped at
// argument boundaries, and m's doc comment after it.
func (p *printer) signature(m *idl.Message) {
	kw := "message "
	if m.RPC {
		kw = "rpc "
	}
	var args []string
	for _, a := range m.Args {
		args = append(args, argSignature(a))
	}
	if len(args) == 0 {
		args = []string{""}
	}
	// Formatted as if at " * ", the block's column, which comes off again.
	lines := strings.Split(proto(" * ", kw+m.Name, args, ";"), "\n")
	for i, l := range lines {
		lines[i] = l[3:]
	}
	p.block("", withDoc(lines, m.Doc))
}

// docProto turns a prototype formatted at indent "     " into one for a
// block comment, whose " * " takes the first three columns.
func docProto(s string) string {
	lines := strings.Split(s, "\n")
	for i := range lines {
		lines[i] = lines[i][3:]
	}
	return strings.Join(lines, "\n")
}

func (g *generator) typeDecl(p *printer, d *idl.TypeDecl) {
	name := g.typeName(d)
	note := ""
	if d.Included {
		note = fmt.Sprintf("%s %s, from %s.", d.Kind, d.Name, baseName(d.Pos))
	}
	p.commentDoc("", note, d.Doc)
	switch d.Kind {
	case idl.DeclAlias, idl.DeclTypedef:
		p.f("typedef %s %s;", g.ctype(d.Elem), name)
	case idl.DeclArray:
		p.f("typedef %s %s[%d];", g.ctype(d.Elem), name, max(d.Len, 1))
	case idl.DeclEnum:
		p.f("enum %s {", name)
		var names, values []string
		for _, e := range d.Enumerators {
			names = append(names, g.enumerator(d, e))
			values = append(values, fmt.Sprint(e.Value))
		}
		w := 0
		for _, n := range names {
			w = max(w, len(n))
		}
		for i, n := range names {
			p.block("    ", withDoc(nil, d.Enumerators[i].Doc))
			p.f("    %-*s = %s,", w, n, values[i])
		}
		p.f("};")
	case idl.DeclStruct:
		var names, values []string
		for _, f := range d.Fields {
			if isString(f.Type) {
				names = append(names, g.fieldBound(d, f))
				values = append(values, literal(uint64(f.Max)))
			}
		}
		if len(names) > 0 {
			p.defines(names, values)
			p.blank()
		}
		var ms []member
		for _, f := range d.Fields {
			m := member{decl: g.ctype(f.Type) + " " + Member(f.Name), doc: f.Doc}
			if isString(f.Type) {
				m.comment = "at most " + g.fieldBound(d, f) + " bytes"
			} else {
				m.comment = capComment(f.Type)
			}
			ms = append(ms, m)
		}
		if len(ms) == 0 {
			ms = append(ms, member{decl: "char unused_", comment: "C needs a member"})
		}
		p.f("struct %s {", name)
		p.members("    ", ms)
		p.f("};")
	}
	p.blank()
}

// capComment says what a capability member holds and who closes it. A
// received descriptor is always the receiver's; a sent one stays the
// sender's (cap) or is closed by the send (give_away_cap).
func capComment(t *idl.TypeRef) string {
	b, d := t.Underlying()
	if d != nil || !b.IsCap() {
		return ""
	}
	what := "a file descriptor"
	switch t.Cap() {
	case idl.CapFile:
		what = "a file descriptor (file)"
	case idl.CapEvent:
		what = "an Event's eventfd (chanos_event_*)"
	case idl.CapEndpoint:
		what = "a connection endpoint (chanos_endpoint_open)"
	}
	if b == idl.Cap {
		return "cap: " + what + "; sent, still yours; received, yours to close"
	}
	return "give_away_cap: " + what + "; sent, closed by the send; received, yours to close"
}

func (g *generator) messageDecls(p *printer, m *idl.Message) {
	p.signature(m)
	var names, values []string
	for _, a := range m.Args {
		if a.Shape != idl.ShapeScalar {
			names = append(names, g.argBound(m, a))
			values = append(values, literal(uint64(a.Max)))
		}
	}
	for _, f := range g.frames {
		if f.msg == m {
			names = append(names, upper(f.cname)+"_MAX_FRAME_SIZE")
			values = append(values, literal(f.maxSize))
		}
	}
	p.defines(names, values)
	p.blank()
	for _, f := range g.frames {
		if f.msg == m {
			g.frameDecls(p, f)
		}
	}
}

func (g *generator) frameDecls(p *printer, f *frame) {
	m := f.msg
	switch f.kind {
	case kindCall:
		p.comment("", "The in arguments of rpc "+m.Name+".")
	case kindReply:
		p.comment("", "The out arguments of rpc "+m.Name+".")
	}
	var ms []member
	for _, a := range f.args {
		name := Member(a.Name)
		bound := g.argBound(m, a)
		// An array's doc goes before its count, which comes first.
		switch {
		case a.Shape == idl.ShapeString:
			ms = append(ms, member{"struct chanos_str " + name, "at most " + bound + " bytes", a.Doc})
		case a.Shape == idl.ShapeDynArray && bytesView(a.Type):
			ms = append(ms, member{"struct chanos_bytes " + name, "at most " + bound + " bytes", a.Doc})
		case a.Shape == idl.ShapeDynArray:
			ms = append(ms,
				member{"uint32_t " + Member(a.LenName), "elements used in " + name, a.Doc},
				member{fmt.Sprintf("%s %s[%s]", g.ctype(a.Type), name, arrayDim(a.Max, bound)), capComment(a.Type), ""})
		default:
			ms = append(ms, member{g.ctype(a.Type) + " " + name, capComment(a.Type), a.Doc})
		}
	}
	if len(ms) == 0 {
		ms = append(ms, member{decl: "char unused_", comment: "no arguments; C needs a member"})
	}
	p.f("struct %s {", f.cname)
	p.members("    ", ms)
	p.f("};")
	p.blank()
	p.f("%s", proto("", "int "+f.cname+"_encode", []string{"const struct " + f.cname + " *m", "struct chanos_buf *out"}, ";"))
	p.f("%s", proto("", "int "+f.cname+"_decode", decodeParams(f.cname, false), ";"))
	p.f("%s", proto("", "int "+f.cname+"_decode_fault", decodeParams(f.cname, true), ";"))
	p.blank()
}

// arrayDim is the dimension of an inline array of at most max elements: C
// forbids zero-length arrays, so a bound of 0 still gets one element.
func arrayDim(max uint32, macro string) string {
	if max == 0 {
		return "1"
	}
	return macro
}

func (g *generator) unionDecl(p *printer) {
	n := g.pfx
	p.comment("", fmt.Sprintf("%s_msg holds any frame of the interface: msg and kind say which "+
		"member of u is valid.", n))
	p.f("struct %s_msg {", n)
	p.members("    ", []member{
		{decl: "uint16_t msg", comment: g.upfx + "_MSG_*"},
		{decl: "uint8_t kind", comment: "CHANOS_KIND_MESSAGE, _CALL or _REPLY"},
		{decl: "uint32_t call_id", comment: "rpc frames only"},
		{decl: "uint32_t timeout_us", comment: "rpc calls only"},
	})
	p.f("    union {")
	var ms []member
	for _, f := range g.frames {
		ms = append(ms, member{decl: "struct " + f.cname + " " + f.member})
	}
	if len(ms) == 0 {
		ms = append(ms, member{decl: "char unused_", comment: "no messages; C needs a member"})
	}
	p.members("        ", ms)
	p.f("    } u;")
	p.f("};")
	p.blank()
	p.f("%s", proto("", "int "+n+"_decode", decodeParams(n+"_msg", false), ";"))
	p.f("%s", proto("", "int "+n+"_decode_fault", decodeParams(n+"_msg", true), ";"))
	p.f("%s", proto("", "int "+n+"_encode", []string{"const struct " + n + "_msg *m", "struct chanos_buf *out"}, ";"))
	p.blank()
}

// The source.

func (g *generator) source() string {
	var p printer
	p.f("/* Code generated by chanosc from %s. DO NOT EDIT. */", baseName(g.iface.Pos))
	p.blank()
	p.f("#include \"%s.h\"", g.iface.Name)
	p.blank()
	g.bindingDefs(&p)
	for _, d := range g.types {
		if g.reach[d] {
			g.structHelpers(&p, d)
		}
	}
	for _, f := range g.frames {
		g.frameFuncs(&p, f)
	}
	g.ifaceDecode(&p)
	g.ifaceEncode(&p)
	g.stubDefs(&p)
	return strings.TrimSuffix(p.String(), "\n")
}

// body collects the statements of a function and the locals they need.
type body struct {
	p     printer
	loops int  // loop variables needed
	count bool // n, the encoded element count, needed
}

func loopVar(depth int) string {
	if depth < 3 {
		return string("ijk"[depth])
	}
	return fmt.Sprintf("i%d", depth)
}

// locals returns the declaration of the loop variables, or "".
func (b *body) locals() string {
	var vs []string
	for i := 0; i < b.loops; i++ {
		vs = append(vs, loopVar(i))
	}
	if b.count {
		vs = append(vs, "n")
	}
	if len(vs) == 0 {
		return ""
	}
	return "uint32_t " + strings.Join(vs, ", ") + ";"
}

func ind(n int) string { return strings.Repeat("    ", n) }

// wireFunc names the chanos_enc_* / chanos_dec_* function of a builtin.
var wireFunc = map[idl.Builtin]string{
	idl.Uint8:   "u8",
	idl.Uint16:  "u16",
	idl.Uint32:  "u32",
	idl.Uint64:  "u64",
	idl.Uintptr: "u64",
	idl.Int8:    "i8",
	idl.Int16:   "i16",
	idl.Int32:   "i32",
	idl.Int64:   "i64",
	idl.Intptr:  "i64",
	idl.Size:    "u64",
	idl.Char:    "char",
	idl.Bool:    "bool",
	idl.Errval:  "u64",
}

// function writes a function definition: its head, locals and body.
func (p *printer) function(head string, locals []string, b *body) {
	p.f("%s", head)
	p.f("{")
	if l := b.locals(); l != "" {
		locals = append(locals, l)
	}
	for _, l := range locals {
		p.f("    %s", l)
	}
	if len(locals) > 0 {
		p.blank()
	}
	p.b.WriteString(b.p.String())
	p.f("}")
	p.blank()
}

func (g *generator) structHelpers(p *printer, d *idl.TypeDecl) {
	name := g.typeName(d)
	var enc, dec body
	// A helper runs only while the error is clear (see codec.go).
	ce, cd := newCoder(g, &enc, false, true), newCoder(g, &dec, true, true)
	for _, f := range d.Fields {
		expr := "v->" + Member(f.Name)
		if isString(f.Type) {
			q := strconv.Quote(f.Name)
			ce.stmt(1, "chanos_enc_str(e, %s, %s, %s);", q, expr, g.fieldBound(d, f))
			cd.stmt(1, "%s = chanos_dec_str(d, %s, %s);", expr, q, g.fieldBound(d, f))
			ce.clean, cd.clean = false, false
			continue
		}
		ce.value(1, expr, f.Type, f.Name, nil, 0)
		cd.value(1, expr, f.Type, f.Name, nil, 0)
	}
	if len(d.Fields) == 0 {
		enc.p.f("    (void)e;")
		enc.p.f("    (void)v;")
		dec.p.f("    (void)d;")
		dec.p.f("    (void)v;")
	}
	p.function(proto("", "static inline void enc_"+g.tname(d), []string{"struct chanos_enc *e", "const struct " + name + " *v"}, ""), nil, &enc)
	p.function(proto("", "static inline void dec_"+g.tname(d), []string{"struct chanos_dec *d", "struct " + name + " *v"}, ""), nil, &dec)
}

// errName is the name of f in faults, as Go's: "kv.put", "kv.get call".
func (g *generator) errName(f *frame) string {
	if f.kind == kindMessage {
		return g.iface.Name + "." + f.msg.Name
	}
	return g.iface.Name + "." + f.msg.Name + " " + f.kind
}

// decodeParams are the parameters of a frame's decoder, with the fault
// record of its _decode_fault form.
func decodeParams(m string, fault bool) []string {
	ps := []string{"struct " + m + " *m", "const uint8_t *frame", "size_t len", "const int *fds", "uint32_t nfds"}
	if fault {
		ps = append(ps, "struct chanos_wire_fault *fault")
	}
	return ps
}

// bodyFunc writes enc_BASE or dec_BASE, which code the arguments of f.
func (g *generator) bodyFunc(p *printer, f *frame, dec bool) {
	var b body
	// An encoder's error is clear where its body starts
	// (chanos_enc_begin_); a decoder's may be the sticky CAP of a header
	// whose ncaps are not the descriptors received (chanos_dec_begin_msg_).
	c := newCoder(g, &b, dec, !dec)
	for _, a := range f.args {
		c.arg(f.msg, a)
	}
	head := proto("", "static void enc_"+f.base, []string{"struct chanos_enc *e", "const struct " + f.cname + " *m"}, "")
	if dec {
		head = proto("", "static void dec_"+f.base, []string{"struct chanos_dec *d", "struct " + f.cname + " *m"}, "")
	}
	p.function(head, nil, &b)
}

func (g *generator) frameFuncs(p *printer, f *frame) {
	m := f.msg
	number := g.msgNumber(m)
	name := strconv.Quote(g.errName(f))

	if len(f.args) > 0 {
		g.bodyFunc(p, f, false)
	}
	var enc body
	if len(f.args) == 0 {
		enc.p.f("    (void)m;")
	}
	enc.p.f("%s", proto("    ", "chanos_enc_begin_", []string{"&e", "out", number, f.kindMacro(), name}, ";"))
	if len(f.args) > 0 {
		enc.p.f("    enc_%s(&e, m);", f.base)
	}
	enc.p.f("    return chanos_enc_end(&e);")
	p.function(proto("", "int "+f.cname+"_encode", []string{"const struct " + f.cname + " *m", "struct chanos_buf *out"}, ""),
		[]string{"struct chanos_enc e;"}, &enc)

	if len(f.args) > 0 {
		g.bodyFunc(p, f, true)
	}

	var plain body
	plain.p.f("%s", proto("    ", "return "+f.cname+"_decode_fault", []string{"m", "frame", "len", "fds", "nfds", "NULL"}, ";"))
	p.function(proto("", "int "+f.cname+"_decode", decodeParams(f.cname, false), ""), nil, &plain)

	var dec body
	dec.p.f("%s", proto("    ", "rc = chanos_dec_begin_msg_", []string{"&d", "frame", "len", "fds", "nfds", number, f.kindMacro(), name, "fault"}, ";"))
	dec.p.f("    if (rc != 0)")
	dec.p.f("        return rc;")
	if len(f.args) > 0 {
		dec.p.f("    dec_%s(&d, m);", f.base)
	} else {
		dec.p.f("    (void)m;")
	}
	dec.p.f("    return chanos_dec_end(&d);")
	p.function(proto("", "int "+f.cname+"_decode_fault", decodeParams(f.cname, true), ""),
		[]string{"struct chanos_dec d;", "int rc;"}, &dec)
}

// byMessage returns the frames of m: one for a message, call and reply for
// an rpc.
func (g *generator) byMessage(m *idl.Message) []*frame {
	var fs []*frame
	for _, f := range g.frames {
		if f.msg == m {
			fs = append(fs, f)
		}
	}
	return fs
}

func (g *generator) ifaceDecode(p *printer) {
	n := g.pfx
	var plain body
	plain.p.f("%s", proto("    ", "return "+n+"_decode_fault", []string{"m", "frame", "len", "fds", "nfds", "NULL"}, ";"))
	p.function(proto("", "int "+n+"_decode", decodeParams(n+"_msg", false), ""), nil, &plain)

	var b body
	b.p.f("    rc = chanos_dec_begin_(&d, &h, frame, len, fds, nfds, NULL, fault);")
	b.p.f("    if (rc != 0)")
	b.p.f("        return rc;")
	b.p.f("    switch (h.msg) {")
	// expect writes the checks of frame f's kind and the decoding of its
	// body, at indent lv.
	expect := func(lv int, f *frame) {
		b.p.f("%s", proto(ind(lv), "rc = chanos_dec_expect_", []string{"&d", "&h", f.kindMacro(), strconv.Quote(g.errName(f))}, ";"))
		b.p.f("%sif (rc != 0)", ind(lv))
		b.p.f("%sreturn rc;", ind(lv+1))
		if len(f.args) > 0 {
			b.p.f("%sdec_%s(&d, &m->u.%s);", ind(lv), f.base, f.member)
		}
	}
	for _, m := range g.iface.Messages {
		b.p.f("    case %s:", g.msgNumber(m))
		fs := g.byMessage(m)
		if !m.RPC {
			expect(2, fs[0])
			b.p.f("        break;")
			continue
		}
		// As Go's: a frame with the reply flag is taken for the reply,
		// any other for the call, and the kind checked against that.
		b.p.f("        if ((h.flags & CHANOS_FLAG_REPLY) == 0) {")
		expect(3, fs[0])
		b.p.f("        } else {")
		expect(3, fs[1])
		b.p.f("        }")
		b.p.f("        break;")
	}
	b.p.f("    default:")
	b.p.f("        return chanos_dec_unknown_(&d, %s);", strconv.Quote(g.iface.Name))
	b.p.f("    }")
	b.p.f("    m->msg = h.msg;")
	b.p.f("    m->kind = h.flags;")
	b.p.f("    m->call_id = h.call_id;")
	b.p.f("    m->timeout_us = h.timeout_us;")
	b.p.f("    return chanos_dec_end(&d);")
	p.function(proto("", "int "+n+"_decode_fault", decodeParams(n+"_msg", true), ""),
		[]string{"struct chanos_dec d;", "struct chanos_hdr h;", "int rc;"}, &b)
}

func (g *generator) ifaceEncode(p *printer) {
	n := g.pfx
	var b body
	var locals []string
	if g.hasRPC {
		locals = []string{"size_t start = out->len;", "int rc;"}
	}
	b.p.f("    switch (m->msg) {")
	for _, m := range g.iface.Messages {
		b.p.f("    case %s:", g.msgNumber(m))
		fs := g.byMessage(m)
		if !m.RPC {
			b.p.f("        if (m->kind != CHANOS_KIND_MESSAGE)")
			b.p.f("%s", proto("            ", "return chanos_enc_refuse_", []string{"out", "CHANOS_ERR_HEADER", strconv.Quote(n),
				strconv.Quote(g.errName(fs[0])), "m->msg", "m->kind", "false"}, ";"))
			b.p.f("        return %s_encode(&m->u.%s, out);", fs[0].cname, fs[0].member)
			continue
		}
		call, reply := fs[0], fs[1]
		b.p.f("        if (m->kind == CHANOS_KIND_CALL)")
		b.p.f("            rc = %s_encode(&m->u.%s, out);", call.cname, call.member)
		b.p.f("        else if (m->kind == CHANOS_KIND_REPLY)")
		b.p.f("            rc = %s_encode(&m->u.%s, out);", reply.cname, reply.member)
		b.p.f("        else")
		b.p.f("%s", proto("            ", "return chanos_enc_refuse_", []string{"out", "CHANOS_ERR_HEADER", strconv.Quote(n),
			strconv.Quote(g.iface.Name + "." + m.Name), "m->msg", "m->kind", "true"}, ";"))
		b.p.f("        break;")
	}
	b.p.f("    default:")
	b.p.f("%s", proto("        ", "return chanos_enc_refuse_", []string{"out", "CHANOS_ERR_UNKNOWN_MESSAGE", strconv.Quote(n),
		"NULL", "m->msg", "m->kind", "false"}, ";"))
	b.p.f("    }")
	if g.hasRPC {
		b.p.f("    if (rc == 0)")
		b.p.f("%s", proto("        ", "chanos_hdr_set_call", []string{"out->data + start", "m->call_id",
			"m->kind == CHANOS_KIND_CALL ? m->timeout_us : 0"}, ";"))
		b.p.f("    return rc;")
	}
	head := proto("", "int "+n+"_encode", []string{"const struct " + n + "_msg *m", "struct chanos_buf *out"}, "")
	p.function(head, locals, &b)
}
