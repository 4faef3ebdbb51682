package idl

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Doc comments (docs/idl.md, "Doc comments"). The rules are Go's and
// protoc's, so that a file written for either reads the same here: the
// comments right before a declaration, with no blank line between them
// or after them, document it.

// comment is one comment as the lexer skipped it: its first and last
// lines, the column it starts in, and its text, markers included.
type comment struct {
	start, end, col int
	text            []byte
}

// docComment returns the doc comment of a token on line tokLine, given
// the comments skipped since the token before, which ended on line last
// (0 for none). A comment that starts on line last trails that token, as
// do the comments on the lines right after it that start in its column:
// they are nobody's doc (`rpc a(); // about a` says nothing about what
// follows). Of the rest, the last group of comments with no blank line
// between them is the doc, if it ends on tokLine or the line before it.
func docComment(cs []comment, last, tokLine int) string {
	if last > 0 && len(cs) > 0 && cs[0].start == last {
		i := 1
		for i < len(cs) && (cs[i].start == last || cs[i].start <= cs[i-1].end+1 && cs[i].col == cs[0].col) {
			i++
		}
		cs = cs[i:]
	}
	if len(cs) == 0 || cs[len(cs)-1].end < tokLine-1 {
		return ""
	}
	first := len(cs) - 1
	for first > 0 && cs[first].start <= cs[first-1].end+1 {
		first--
	}
	var lines []string
	for _, c := range cs[first:] {
		lines = append(lines, commentLines(c.text)...)
	}
	return cleanDoc(lines)
}

// commentLines returns the lines of one comment without its markers. Of a
// line comment that is the text after the slashes and one space. Of a
// block comment, the text between /* and */, with its decoration taken
// off: the stars that open /** or a line of stars, and, when every line
// after the first starts with a star (the " * " column of C and Java),
// that star and one space after it; then the indent the lines after the
// first share.
func commentLines(text []byte) []string {
	s := string(text)
	if strings.HasPrefix(s, "//") {
		s = strings.TrimLeft(s, "/")
		return []string{strings.TrimPrefix(strings.TrimSuffix(s, "\r"), " ")}
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "/*"), "*/")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	lines[0] = strings.TrimSpace(strings.TrimLeft(lines[0], "*"))
	if n := len(lines) - 1; n > 0 && strings.Trim(lines[n], " \t*") == "" {
		lines[n] = ""
	}
	rest := lines[1:]
	starred := len(rest) > 0
	for _, l := range rest {
		if l != "" && !strings.HasPrefix(strings.TrimLeft(l, " \t"), "*") {
			starred = false
		}
	}
	if starred {
		for i, l := range rest {
			l = strings.TrimLeft(l, " \t")
			l = strings.TrimPrefix(l, "*")
			rest[i] = strings.TrimPrefix(l, " ")
		}
	}
	// The first line begins after the marker, wherever that stood: the
	// others' indent is theirs alone.
	dedent(rest)
	return lines
}

// cleanDoc joins the lines of a doc comment into its text: the indent
// its lines share taken off, blank lines at either end dropped and runs
// of them made one, and each line made safe for any back end to copy into
// a comment (safeLine).
func cleanDoc(lines []string) string {
	dedent(lines)
	var out []string
	for _, l := range lines {
		l = safeLine(strings.TrimRight(l, " \t\r"))
		if l == "" && (len(out) == 0 || out[len(out)-1] == "") {
			continue
		}
		out = append(out, l)
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return strings.Join(out, "\n")
}

// dedent takes off the white space that begins every line that is not
// blank, so that text indented as a whole is not read as code.
func dedent(lines []string) {
	indent, found := "", false
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		lead := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if !found {
			indent, found = lead, true
			continue
		}
		for !strings.HasPrefix(lead, indent) {
			indent = indent[:len(indent)-1]
		}
	}
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, indent)
	}
}

// safeLine writes what a line of a generated comment must not hold, or
// would hide, as a Go escape: bytes that are not UTF-8 (\xff), control
// characters but the tab, and other characters that do not print (\u2028,
// a line separator to some readers).
func safeLine(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || r != '\t' && !unicode.IsPrint(r) && r != ' ' {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case r == '\t' || r == ' ' || unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[n:]
	}
	return b.String()
}
