package idl

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// docs is an interface with a doc comment in every place one attaches,
// and comments in the places where none does.
const docs = `// file header: a blank line parts it from the interface's doc.

/* The interface's doc. */
interface docs {
    // Section: separated by a blank line, so nobody's doc.

    // alias doc
    alias word uint64;
    typedef uint32 handle; // trailing: nobody's doc
    // enum doc
    typedef enum {
        // first doc
        first,
        second, // trailing, and so is the next line,
                // which continues it
        third
    } order;
    /* struct doc */ typedef struct {
        // field doc
        uint8 a;

        // not the field's: a blank line follows

        uint8 b;
    } pair;

    // message doc
    message m(
        // arg doc
        uint32 x,
        uint32 y);
    // before the annotation
    @borrow()
    rpc r(in uint8 data[n, 8], // trailing
          out uint32 z);
    @borrow()
    // between the annotation and the keyword
    rpc s(/* on the line of the token before */ in uint32 v);
    rpc none();
};
`

func TestDocAttachment(t *testing.T) {
	iface, err := compile(t, "docs.if", docs)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]*TypeDecl{}
	for _, d := range iface.Types {
		types[d.Name] = d
	}
	msgs := map[string]*Message{}
	for _, m := range iface.Messages {
		msgs[m.Name] = m
	}
	for what, got := range map[string][2]string{
		"interface":                         {iface.Doc, "The interface's doc."},
		"alias":                             {types["word"].Doc, "alias doc"},
		"typedef after trailing":            {types["handle"].Doc, ""},
		"enum":                              {types["order"].Doc, "enum doc"},
		"enumerator":                        {types["order"].Enumerators[0].Doc, "first doc"},
		"enumerator, trailing":              {types["order"].Enumerators[1].Doc, ""},
		"enumerator after a trailing group": {types["order"].Enumerators[2].Doc, ""},
		"struct, on its line":               {types["pair"].Doc, "struct doc"},
		"field":                             {types["pair"].Fields[0].Doc, "field doc"},
		"field after a blank":               {types["pair"].Fields[1].Doc, ""},
		"message":                           {msgs["m"].Doc, "message doc"},
		"argument":                          {msgs["m"].Args[0].Doc, "arg doc"},
		"argument, undocumented":            {msgs["m"].Args[1].Doc, ""},
		"rpc before annotations":            {msgs["r"].Doc, "before the annotation"},
		"argument after trailing":           {msgs["r"].Args[1].Doc, ""},
		"rpc after annotations":             {msgs["s"].Doc, "between the annotation and the keyword"},
		"argument after a comment on the line of (": {msgs["s"].Args[0].Doc, ""},
		"rpc, undocumented":                         {msgs["none"].Doc, ""},
	} {
		if got[0] != got[1] {
			t.Errorf("%s: doc %q, want %q", what, got[0], got[1])
		}
	}
}

// Types of an include file keep their doc comments.
func TestDocInclude(t *testing.T) {
	inc := Source{Name: "types.if", Data: []byte("/* types.if */\n\n// a color\ntypedef enum { red } color;\n")}
	iface, err := compile(t, "t.if", "interface t { message m(color c); };", inc)
	if err != nil {
		t.Fatal(err)
	}
	if d := iface.Types[0]; !d.Included || d.Doc != "a color" {
		t.Errorf("included type: %+v", d)
	}
}

// How the text of a comment is cleaned (docs/idl.md, "Doc comments").
func TestDocText(t *testing.T) {
	for _, tc := range []struct{ what, comment, want string }{
		{"line comments", "// one\n//two\n//   indented\n//\n// after a blank", "one\ntwo\n  indented\n\nafter a blank"},
		{"line comments indented as a whole", "//   a\n//     b", "a\n  b"},
		{"slashes", "/// three slashes\n////", "three slashes"},
		{"block on one line", "/* one line */", "one line"},
		{"star column", "/*\n * first\n *\n *   code\n * last\n */", "first\n\n  code\nlast"},
		{"star column, no space", "/*\n *first\n *second\n */", "first\nsecond"},
		{"javadoc", "/**\n * Doc.\n */", "Doc."},
		{"javadoc on one line", "/** Doc. */", "Doc."},
		{"a line of stars", "/*****\n * boxed\n *****/", "boxed"},
		{"text after the opener, indented rest", "/* Foo does\n   things:\n     code */", "Foo does\nthings:\n  code"},
		{"no star column", "/*\n    indented\n    text\n*/", "indented\ntext"},
		{"nested", "/* a /* b */ c */", "a /* b */ c"},
		{"blank lines", "//\n// a\n//\n//\n// b\n//", "a\n\nb"},
		{"a block after line comments", "// a\n/* b */", "a\nb"},
		{"CRLF", "// a\r\n// b\r\n", "a\nb"},
		{"CRLF in a block", "/*\r\n * a\r\n * b\r\n */", "a\nb"},
		{"trailing white space", "// a  \t\n// b ", "a\nb"},
		{"control characters", "// bell\a, nul\x00, esc\x1b, tab\tkept", `bell\a, nul\x00, esc\x1b, tab` + "\tkept"},
		{"not UTF-8", "// bad \xff\xfe byte, good é", `bad \xff\xfe byte, good é`},
		{"a line separator", "// a\u2028b", `a\u2028b`},
		{"a comment end in a line comment", "// a */ b", "a */ b"},
	} {
		src := tc.comment
		if !strings.HasSuffix(src, "\n") {
			src += "\n"
		}
		iface, err := compile(t, "t.if", src+"interface t {};")
		if err != nil {
			t.Errorf("%s: %v", tc.what, err)
			continue
		}
		if iface.Doc != tc.want {
			t.Errorf("%s: doc %q, want %q", tc.what, iface.Doc, tc.want)
		}
		checkDoc(t, iface.Doc)
	}
}

// checkDoc fails t unless doc keeps the promises of Interface.Doc.
func checkDoc(t testing.TB, doc string) {
	t.Helper()
	if !utf8.ValidString(doc) {
		t.Errorf("doc %q is not UTF-8", doc)
	}
	for _, r := range doc {
		if r != '\n' && r != '\t' && r != ' ' && !unicode.IsPrint(r) {
			t.Errorf("doc %q holds %U", doc, r)
		}
	}
	if strings.HasPrefix(doc, "\n") || strings.HasSuffix(doc, "\n") || strings.Contains(doc, "\n\n\n") {
		t.Errorf("doc %q has blank lines at an end, or a run of them", doc)
	}
	for _, l := range strings.Split(doc, "\n") {
		if strings.TrimRight(l, " \t") != l {
			t.Errorf("doc %q has trailing white space", doc)
		}
	}
}

// checkDocs applies checkDoc to every doc comment of iface.
func checkDocs(t testing.TB, iface *Interface) {
	t.Helper()
	checkDoc(t, iface.Doc)
	for _, d := range iface.Types {
		checkDoc(t, d.Doc)
		for _, f := range d.Fields {
			checkDoc(t, f.Doc)
		}
		for _, e := range d.Enumerators {
			checkDoc(t, e.Doc)
		}
	}
	for _, m := range iface.Messages {
		checkDoc(t, m.Doc)
		for _, a := range m.Args {
			checkDoc(t, a.Doc)
		}
	}
}
