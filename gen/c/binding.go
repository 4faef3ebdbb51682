package c

import (
	"fmt"
	"strconv"
	"strings"
)

// What ties a generated interface to libchanos's binding: its name and
// fingerprint as constants, and the struct chanos_interface that
// chanos_connect_iface and chanos_export_iface take.

// interfaceVar is the name of the generated struct chanos_interface.
func (g *generator) interfaceVar() string { return g.pfx + "_interface" }

// definitionVar is the name of the generated array of the pieces of the
// interface's definition.
func (g *generator) definitionVar() string { return g.pfx + "_definition" }

// claimBinding claims the C names of the binding constants.
func (g *generator) claimBinding() error {
	pos := g.iface.Pos
	for _, c := range []struct{ name, what string }{
		{g.upfx + "_INTERFACE_NAME", "the name of interface "},
		{g.upfx + "_FINGERPRINT", "the fingerprint of interface "},
		{g.interfaceVar(), "the binding description of interface "},
		{g.definitionVar(), "the definition of interface "},
	} {
		if err := g.file.add(c.name, pos, c.what+g.iface.Name); err != nil {
			return err
		}
	}
	return nil
}

// bindingDecls writes the header's binding constants.
func (g *generator) bindingDecls(p *printer) {
	p.comment("", "The interface's name, and the fingerprint of its definition: a "+
		"client binds an export only if both agree (docs/idl.md, \"Fingerprints\").")
	p.defines([]string{g.upfx + "_INTERFACE_NAME", g.upfx + "_FINGERPRINT"},
		[]string{strconv.Quote(g.iface.Name), fmt.Sprintf("UINT64_C(0x%016x)", g.iface.Fingerprint())})
	p.blank()
	p.comment("", "The interface as binding sees it: for chanos_connect_iface, "+
		"chanos_connect_ref_iface and chanos_export_iface.")
	p.f("extern const struct chanos_interface %s;", g.interfaceVar())
	p.blank()
}

// bindingDefs writes the source's definition of the interface variable,
// and of the definition it points to.
func (g *generator) bindingDefs(p *printer) {
	p.comment("", "The interface as an IDL file of its own, in pieces that join "+
		"into it (a line each): what a reflection service answers for an "+
		"export of it (docs/reflection.md). Pieces, not one string, as ISO C "+
		"promises string literals of 4095 bytes only.")
	p.f("static const char *const %s[] = {", g.definitionVar())
	for _, piece := range definitionPieces(g.iface.Format()) {
		p.f("    %s,", cStringLiteral(piece))
	}
	p.f("    NULL")
	p.f("};")
	p.blank()
	p.f("const struct chanos_interface %s = {", g.interfaceVar())
	p.f("    %s_INTERFACE_NAME, %s_MAX_FRAME_SIZE, %s_FINGERPRINT, %s", g.upfx, g.upfx, g.upfx, g.definitionVar())
	p.f("};")
	p.blank()
}

// maxPiece bounds a piece of a definition, far below the 4095 bytes of a
// string literal that ISO C promises, escapes and all.
const maxPiece = 512

// definitionPieces cuts def after each newline, and a line longer than
// maxPiece into pieces of maxPiece bytes.
func definitionPieces(def string) []string {
	var pieces []string
	for def != "" {
		n := strings.IndexByte(def, '\n') + 1
		if n == 0 {
			n = len(def)
		}
		n = min(n, maxPiece)
		pieces = append(pieces, def[:n])
		def = def[n:]
	}
	return pieces
}

// cStringLiteral is s as a C string literal of ASCII characters: a
// newline and a tab as \n and \t, a quote and a backslash escaped, a
// second question mark escaped (no trigraph can form), and any other
// byte outside printable ASCII as a three-digit octal escape, which
// nothing after it can extend.
func cStringLiteral(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '?' && i > 0 && s[i-1] == '?':
			b.WriteString(`\?`)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\%03o", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
