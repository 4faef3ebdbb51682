package idl

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strings"
)

// Fingerprint returns the interface's fingerprint: the first 8 bytes,
// big-endian, of the SHA-256 of Canonical. Binding compares the
// fingerprints of the export and of the client (docs/idl.md,
// "Fingerprints"); it is computed here once, for every back end. It is
// never 0, which the runtime reads as "not declared".
func (iface *Interface) Fingerprint() uint64 {
	sum := sha256.Sum256([]byte(iface.Canonical()))
	if fp := binary.BigEndian.Uint64(sum[:8]); fp != 0 {
		return fp
	}
	return 1
}

// Canonical returns the normalised definition the fingerprint hashes: one
// line per message and per argument, in wire order, with every type
// spelled out down to builtins. It holds the message numbers, kinds and
// names; each argument's direction, name, shape, bound and type; and of a
// declared type its structure (struct field names and types, enumerator
// names in order, array lengths), never its name, so that an alias or a
// renamed typedef keeps the fingerprint. Comments, whitespace, the
// description, annotations, include files' unused types, a dynamic
// array's length name and the interface's name (which binding compares
// by itself) are left out (docs/idl.md, "Fingerprints").
func (iface *Interface) Canonical() string {
	var b strings.Builder
	b.WriteString("chanos-fingerprint 1\n")
	for _, m := range iface.Messages {
		kind := "message"
		if m.RPC {
			kind = "rpc"
		}
		fmt.Fprintf(&b, "%s %d %s\n", kind, m.Number, m.Name)
		for _, a := range m.Args {
			dir := a.Dir.String()
			if dir == "" {
				dir = "arg"
			}
			fmt.Fprintf(&b, "\t%s %s ", dir, a.Name)
			canonicalType(&b, a.Type)
			switch a.Shape {
			case ShapeString:
				fmt.Fprintf(&b, " string %d", a.Max)
			case ShapeDynArray:
				// Not LenName: like a type's name it is spelled in the
				// generated code only, and the count means its array's
				// length to both peers whatever they call it.
				fmt.Fprintf(&b, " array %d", a.Max)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// canonicalType writes t structurally: builtins by their canonical name
// (int is int32), aliases and typedefs as what they name.
func canonicalType(b *strings.Builder, t *TypeRef) {
	if t.Decl == nil {
		b.WriteString(t.Builtin.String())
		if t.CapKind != CapAny {
			// A kind changes what the receiver accepts, not the wire.
			fmt.Fprintf(b, "(%s)", t.CapKind)
		}
		return
	}
	d := t.Decl
	switch d.Kind {
	case DeclAlias, DeclTypedef:
		canonicalType(b, d.Elem)
	case DeclArray:
		canonicalType(b, d.Elem)
		fmt.Fprintf(b, "[%d]", d.Len)
	case DeclEnum:
		b.WriteString("enum{")
		for i, e := range d.Enumerators {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(e.Name)
		}
		b.WriteByte('}')
	case DeclStruct:
		b.WriteString("struct{")
		for i, f := range d.Fields {
			if i > 0 {
				b.WriteString("; ")
			}
			b.WriteString(f.Name)
			b.WriteByte(' ')
			canonicalType(b, f.Type)
			if f.Max > 0 {
				fmt.Fprintf(b, " string %d", f.Max)
			}
		}
		b.WriteByte('}')
	}
}
