package gen

import (
	"strings"

	"github.com/chanos/chanos/idl"
)

// TypeNames returns the name each type declaration of iface goes by in
// generated code, in both back ends: its IDL name, unless a message or rpc
// claims that name. A type's generated names (a C struct and its helpers,
// a Go type and its constants) would then collide with the message's, so
// the type takes Flounder's suffix _t, as often as needed to name nothing
// else (docs/idl.md, "Names in generated code").
//
// A name is claimed by a message or rpc NAME, and by an rpc's call and
// reply, NAME_call and NAME_reply. Names are compared without underscores
// and case, so that names equal only after the Go back end's CamelCase
// (trigger and Trigger, get_call and getCall) count as equal too.
// Messages never change name: only an interface that would not compile
// otherwise has a type renamed.
func TypeNames(iface *idl.Interface) map[*idl.TypeDecl]string {
	claimed := map[string]bool{} // by messages and rpcs
	for _, m := range iface.Messages {
		claimed[nameKey(m.Name)] = true
		if m.RPC {
			claimed[nameKey(m.Name+"_call")] = true
			claimed[nameKey(m.Name+"_reply")] = true
		}
	}
	taken := map[string]bool{} // by anything: messages and types
	for k := range claimed {
		taken[k] = true
	}
	for _, d := range iface.Types {
		taken[nameKey(d.Name)] = true
	}
	names := make(map[*idl.TypeDecl]string, len(iface.Types))
	for _, d := range iface.Types {
		name := d.Name
		if claimed[nameKey(name)] {
			for name += "_t"; taken[nameKey(name)]; name += "_t" {
			}
			taken[nameKey(name)] = true
		}
		names[d] = name
	}
	return names
}

// nameKey is the form in which two names are compared: names with the same
// key may end up as the same name in some back end.
func nameKey(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "_", ""))
}
