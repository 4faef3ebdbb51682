package golang

import (
	"fmt"
	"go/token"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/chanos/chanos/idl"
)

// initialisms are the words written in upper case when they make up a
// whole part of a snake_case name: msg_id becomes MsgID, url_path becomes
// URLPath (urlPath as a parameter). The list is fixed, so that a name's Go
// spelling never changes between chanosc versions; docs/codegen-go.md
// repeats it.
var initialisms = map[string]bool{
	"ACL": true, "API": true, "ASCII": true, "CPU": true, "DNS": true,
	"EOF": true, "FD": true, "GID": true, "GUID": true, "HTTP": true,
	"HTTPS": true, "ID": true, "IO": true, "IP": true, "IPC": true,
	"JSON": true, "MAC": true, "MTU": true, "NUMA": true, "OS": true,
	"PID": true, "RAM": true, "RPC": true, "SQL": true, "SSH": true,
	"TCP": true, "TID": true, "TLS": true, "TTL": true, "UDP": true,
	"UID": true, "UMP": true, "URI": true, "URL": true, "UTF8": true,
	"UUID": true, "VM": true, "XML": true,
}

// predeclared are Go's predeclared identifiers, which a parameter or local
// must not shadow.
var predeclared = map[string]bool{
	"any": true, "append": true, "bool": true, "byte": true, "cap": true,
	"clear": true, "close": true, "comparable": true, "complex": true,
	"complex128": true, "complex64": true, "copy": true, "delete": true,
	"error": true, "false": true, "float32": true, "float64": true,
	"imag": true, "int": true, "int16": true, "int32": true, "int64": true,
	"int8": true, "iota": true, "len": true, "make": true, "max": true,
	"min": true, "new": true, "nil": true, "panic": true, "print": true,
	"println": true, "real": true, "recover": true, "rune": true,
	"string": true, "true": true, "uint": true, "uint16": true,
	"uint32": true, "uint64": true, "uint8": true, "uintptr": true,
}

// localNames are the identifiers the generated functions use for
// themselves, beside parameters: package names and locals.
var localNames = map[string]bool{
	"ctx": true, "err": true, "c": true, "call": true, "reply": true, "r": true,
	"srv": true, "m": true, "from": true, "in": true, "v": true, "ok": true,
	"b": true, "msg": true, "frame": true, "dst": true, "f": true, "head": true, "tail": true, "n": true, "end": true,
	"wire": true, "chanos": true, "genrt": true, "context": true, "fmt": true, "errors": true,
}

// packageNames are the exported package-level names every generated
// package declares.
var packageNames = map[string]bool{
	"InterfaceName": true, "MaxFrameSize": true, "Fingerprint": true, "Definition": true, "Msg": true,
	"Decode": true, "New": true, "Client": true, "Server": true,
	"Dispatch": true, "UnimplementedServer": true,
	"Interface": true, "Conn": true, "NewConn": true, "Connect": true, "ConnectRef": true, "NewDialer": true, "Dialer": true,
	"Listener": true, "Export": true, "Serve": true,
	"binding": true, "asMsg": true, "serve": true, "unsupported": true,
}

// messageMethods are the methods of generated message, call and reply
// types, which a field of theirs must not be named.
var messageMethods = map[string]bool{
	"MsgNumber": true, "MsgKind": true, "MsgName": true,
	"Encode": true, "Decode": true,
}

// clientMethods are the methods of Client besides the rpc stubs.
// (Conn embeds Client, so Conn's own methods count too.)
var clientMethods = map[string]bool{"Send": true, "Receive": true, "Recv": true, "Handle": true, "Serve": true, "Err": true, "Close": true, "Raw": true, "Stream": true}

// words splits an IDL name at underscores, dropping empty parts.
func words(name string) []string {
	return strings.FieldsFunc(name, func(r rune) bool { return r == '_' })
}

// exported converts an IDL name to an exported Go name: each
// underscore-separated word gets an upper-case first letter; a word on the
// initialism list is written in upper case, and a word written all in
// upper case (COLOR) is written like any other (Color). Other letters keep
// their case, so camelCase input keeps its humps: clientId becomes
// ClientId. It returns "" if name has no letters or digits.
func exported(name string) string {
	var b strings.Builder
	for _, w := range words(name) {
		up := strings.ToUpper(w)
		switch {
		case initialisms[up]:
			b.WriteString(up)
		case w == up:
			r, n := utf8.DecodeRuneInString(w)
			b.WriteRune(r)
			b.WriteString(strings.ToLower(w[n:]))
		default:
			r, n := utf8.DecodeRuneInString(w)
			b.WriteRune(unicode.ToUpper(r))
			b.WriteString(w[n:])
		}
	}
	return b.String()
}

// unexported converts an IDL name to a Go parameter name: exported, with
// its first word in lower case (an initialism entirely: id, urlPath).
func unexported(name string) string {
	ws := words(name)
	if len(ws) == 0 {
		return ""
	}
	first := exported(ws[0])
	rest := exported(strings.Join(ws[1:], "_"))
	up := strings.ToUpper(ws[0])
	if initialisms[up] || ws[0] == up {
		return strings.ToLower(first) + rest
	}
	r, n := utf8.DecodeRuneInString(first)
	return string(unicode.ToLower(r)) + first[n:] + rest
}

// escape appends "_" to a Go name that is a keyword or in one of the
// reserved sets, the rule shared with the C back end (docs/idl.md).
func escape(name string, reserved ...map[string]bool) string {
	if token.IsKeyword(name) {
		return name + "_"
	}
	for _, r := range reserved {
		if r[name] {
			return name + "_"
		}
	}
	return name
}

// scope detects names that collide after conversion.
type scope struct {
	what  string // "package", "struct line", ...
	names map[string]scopeEntry
	errs  *idl.ErrorList
}

type scopeEntry struct {
	pos  idl.Pos
	desc string
}

func newScope(what string, errs *idl.ErrorList) *scope {
	return &scope{what: what, names: map[string]scopeEntry{}, errs: errs}
}

// claim records that name, the Go spelling of desc declared at pos, is in
// the scope, and reports a collision with an earlier claim. A name that
// converts to nothing is reported too.
func (s *scope) claim(name string, pos idl.Pos, desc string) {
	if !token.IsIdentifier(name) || name == "_" {
		*s.errs = append(*s.errs, &idl.Error{Pos: pos,
			Msg: fmt.Sprintf("%s has no Go spelling: %q is not an identifier", desc, name)})
		return
	}
	if prev, ok := s.names[name]; ok {
		*s.errs = append(*s.errs, &idl.Error{Pos: pos,
			Msg: fmt.Sprintf("%s and %s (declared at %s) are both %s in Go, in the %s scope; rename one",
				desc, prev.desc, prev.pos, name, s.what)})
		return
	}
	s.names[name] = scopeEntry{pos: pos, desc: desc}
}
