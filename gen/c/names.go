package c

import (
	"fmt"
	"strings"

	"github.com/chanos/chanos/idl"
)

// reserved holds the names that get a trailing underscore when an IDL name
// is used as a C identifier without a prefix (struct members): the C11
// keywords, the macros of <stdbool.h>, the C++ keywords and the object-like
// macros of common headers that would silently rewrite a member name.
var reserved = map[string]bool{
	// C11 keywords.
	"auto": true, "break": true, "case": true, "char": true, "const": true,
	"continue": true, "default": true, "do": true, "double": true,
	"else": true, "enum": true, "extern": true, "float": true, "for": true,
	"goto": true, "if": true, "inline": true, "int": true, "long": true,
	"register": true, "restrict": true, "return": true, "short": true,
	"signed": true, "sizeof": true, "static": true, "struct": true,
	"switch": true, "typedef": true, "union": true, "unsigned": true,
	"void": true, "volatile": true, "while": true, "_Alignas": true,
	"_Alignof": true, "_Atomic": true, "_Bool": true, "_Complex": true,
	"_Generic": true, "_Imaginary": true, "_Noreturn": true,
	"_Static_assert": true, "_Thread_local": true,
	// Macros of <stdbool.h>, <stdalign.h>, <stdnoreturn.h>, <assert.h>,
	// <threads.h> and <complex.h> that read like keywords.
	"bool": true, "true": true, "false": true, "alignas": true,
	"alignof": true, "noreturn": true, "static_assert": true,
	"thread_local": true, "complex": true, "imaginary": true, "I": true,
	// C++ keywords, so that C++ programs can include the generated
	// headers (the members of structs a C++ translation unit sees).
	"and": true, "and_eq": true, "asm": true,
	"bitand": true, "bitor": true, "catch": true, "char8_t": true,
	"char16_t": true, "char32_t": true, "class": true, "compl": true,
	"concept": true, "consteval": true, "constexpr": true, "constinit": true,
	"const_cast": true, "co_await": true, "co_return": true, "co_yield": true,
	"decltype": true, "delete": true, "dynamic_cast": true, "explicit": true,
	"export": true, "friend": true, "mutable": true, "namespace": true,
	"new": true, "noexcept": true, "not": true, "not_eq": true,
	"nullptr": true, "operator": true, "or": true, "or_eq": true,
	"private": true, "protected": true, "public": true,
	"reinterpret_cast": true, "requires": true, "static_cast": true,
	"template": true, "this": true, "throw": true, "try": true,
	"typeid": true, "typename": true, "using": true, "virtual": true,
	"wchar_t": true, "xor": true, "xor_eq": true,
	// Object-like macros of <errno.h>, <stdio.h>, <stddef.h>, <sys/stat.h>
	// and <signal.h> (glibc), and GCC's predefined ones in GNU modes.
	"errno": true, "stdin": true, "stdout": true, "stderr": true,
	"NULL": true, "EOF": true, "st_atime": true, "st_mtime": true,
	"st_ctime": true, "sa_handler": true, "sa_sigaction": true,
	"linux": true, "unix": true, "i386": true,
}

// Member returns the C spelling of an IDL name used as a struct or union
// member: the name itself, with "_" appended if it is reserved in C.
func Member(name string) string {
	if reserved[name] {
		return name + "_"
	}
	return name
}

// upper returns the upper-case form of an IDL name, for macros and
// enumerators.
func upper(name string) string { return strings.ToUpper(name) }

// owner records what claimed a C name, for collision errors.
type owner struct {
	pos  idl.Pos
	what string
}

// scope is a set of C names that must be distinct: the file scope of the
// generated header and source, or the members of one struct.
type scope struct {
	names map[string]owner
}

func newScope() *scope { return &scope{names: map[string]owner{}} }

// add claims name for what, declared at pos, and fails if something else
// already holds it.
func (s *scope) add(name string, pos idl.Pos, what string) error {
	if prev, ok := s.names[name]; ok {
		return errorf(pos, "C name %s of %s collides with that of %s at %s",
			name, what, prev.what, prev.pos)
	}
	s.names[name] = owner{pos: pos, what: what}
	return nil
}

// errorf returns an error about the interface at pos. It is an *idl.Error,
// so that chanosc prints it as the front end's errors, FILE:LINE:COL:
// message, without its own name in front (docs/codegen-c.md).
func errorf(pos idl.Pos, format string, args ...any) error {
	return &idl.Error{Pos: pos, Msg: fmt.Sprintf(format, args...)}
}
