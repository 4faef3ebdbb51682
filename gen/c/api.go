package c

import "github.com/chanos/chanos/idl"

// The functions in this file give the C names the back end generates, for
// tools that write C against generated code (internal/testkit/cvectors).

// Frame kinds, as FrameName and UnionMember take them.
const (
	KindMessage = kindMessage
	KindCall    = kindCall
	KindReply   = kindReply
)

// FrameName returns the name of the struct (and the prefix of the encode
// and decode functions) for a frame of m: the message itself, or an rpc's
// call or reply.
func FrameName(iface *idl.Interface, m *idl.Message, kind string) string {
	if kind == kindMessage {
		return iface.Name + "_" + m.Name
	}
	return iface.Name + "_" + m.Name + "_" + kind
}

// UnionMember returns the member of the interface's tagged union that
// holds a frame of m.
func UnionMember(m *idl.Message, kind string) string {
	if kind == kindMessage {
		return Member(m.Name)
	}
	return Member(m.Name + "_" + kind)
}

// MessageNumber returns the macro holding m's wire number.
func MessageNumber(iface *idl.Interface, m *idl.Message) string {
	return upper(iface.Name) + "_MSG_" + upper(m.Name)
}

// Enumerator returns the C constant of enumerator e of enum d.
func Enumerator(iface *idl.Interface, d *idl.TypeDecl, e *idl.Enumerator) string {
	g := generator{iface: iface}
	return upper(iface.Name) + "_" + upper(g.tname(d)) + "_" + upper(e.Name)
}

// TypeName returns the C type of a declared type: "struct NAME",
// "enum NAME" or a typedef name.
func TypeName(iface *idl.Interface, d *idl.TypeDecl) string {
	g := generator{iface: iface, pfx: iface.Name}
	return g.ctype(&idl.TypeRef{Name: d.Name, Decl: d})
}

// BytesView reports whether a dynamic array of t is a struct chanos_bytes
// (1-byte elements) rather than an inline array with a length member.
func BytesView(t *idl.TypeRef) bool { return bytesView(t) }

// ByteArray reports whether a fixed array of t is copied as raw bytes.
func ByteArray(t *idl.TypeRef) bool { return isByte(t) }
