package reflection

import (
	"context"

	"github.com/chanos/chanos/chanos"
)

// NameOf returns the name under which the domain that exports name
// exports its reflection service: name + ".reflection", so that a tool
// finds one from the other (`chanos describe NAME`).
func NameOf(name string) string { return name + ".reflection" }

// Exports serves describe for the exports of one domain: the interface
// of each name the domain exports by name, as its generated package
// declares it (the Definition constant). A Private export is not
// described: its name binds nothing, and whoever holds its iref holds
// the interface's package too. Use it with Serve:
//
//	l, err := reflection.Export(ctx, d, reflection.NameOf("kv"))
//	...
//	go reflection.Serve(ctx, l, reflection.NewExports(d))
type Exports struct {
	UnimplementedServer
	d *chanos.Domain
}

// NewExports returns the reflection server of d's exports.
func NewExports(d *chanos.Domain) *Exports { return &Exports{d: d} }

// Describe implements Server: the interface of the export name, an error
// of CodeNotFound for a name the domain does not export by name, and of
// CodeUnimplemented for an interface made without a definition (a
// chanos.Interface written by hand).
func (e *Exports) Describe(ctx context.Context, name string) (iface string, fingerprint uint64, definition string, err error) {
	in, ok := e.d.ExportedInterface(name)
	switch {
	case !ok:
		return "", 0, "", chanos.Errorf(chanos.CodeNotFound, "this domain exports no %q", name)
	case in.Definition == "":
		return "", 0, "", chanos.Errorf(chanos.CodeUnimplemented, "the interface %s of %q carries no definition", in.Name, name)
	case len(in.Definition) > MaxDescribeDefinitionLen:
		return "", 0, "", chanos.Errorf(chanos.CodeResourceExhausted, "the definition of %s takes %d bytes, more than describe carries (%d)", in.Name, len(in.Definition), MaxDescribeDefinitionLen)
	}
	return in.Name, in.Fingerprint, in.Definition, nil
}
