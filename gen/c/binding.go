package c

import (
	"fmt"
	"strconv"
)

// What ties a generated interface to libchanos's binding: its name and
// fingerprint as constants, and the struct chanos_interface that
// chanos_connect_iface and chanos_export_iface take.

// interfaceVar is the name of the generated struct chanos_interface.
func (g *generator) interfaceVar() string { return g.pfx + "_interface" }

// claimBinding claims the C names of the binding constants.
func (g *generator) claimBinding() error {
	pos := g.iface.Pos
	for _, c := range []struct{ name, what string }{
		{g.upfx + "_INTERFACE_NAME", "the name of interface "},
		{g.upfx + "_FINGERPRINT", "the fingerprint of interface "},
		{g.interfaceVar(), "the binding description of interface "},
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

// bindingDefs writes the source's definition of the interface variable.
func (g *generator) bindingDefs(p *printer) {
	p.f("const struct chanos_interface %s = {", g.interfaceVar())
	p.f("    %s_INTERFACE_NAME, %s_MAX_FRAME_SIZE, %s_FINGERPRINT", g.upfx, g.upfx, g.upfx)
	p.f("};")
	p.blank()
}
