package idl

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// tokenKind classifies a token.
type tokenKind int

const (
	tokEOF tokenKind = iota
	tokIdent
	tokNumber
	tokString
	tokPunct // one of { } ( ) [ ] ; , = @
)

type token struct {
	kind tokenKind
	pos  Pos
	text string // identifier, punctuation, number as written, or string contents
	num  uint64 // value of a tokNumber
	// doc is the text of the doc comment right before the token (see
	// docComment), "" for none. The parser keeps it only where a
	// declaration starts.
	doc string
}

func (t token) String() string {
	switch t.kind {
	case tokEOF:
		return "end of file"
	case tokIdent:
		return fmt.Sprintf("identifier %q", t.text)
	case tokNumber:
		return "number " + t.text
	case tokString:
		return fmt.Sprintf("string %q", t.text)
	}
	return fmt.Sprintf("%q", t.text)
}

// lexer splits an interface file into tokens. It stops at the first
// lexical error, which it reports as a tokEOF after recording the error.
type lexer struct {
	file string
	src  []byte
	off  int
	line int
	col  int
	errs *errorSink
	// lastLine is the line on which the token before ended, 0 before the
	// first: a comment that starts there trails that token.
	lastLine int
	// comments are those skipped since the token before.
	comments []comment
}

func newLexer(file string, src []byte, errs *errorSink) *lexer {
	l := &lexer{file: file, src: src, line: 1, col: 1, errs: errs}
	// A byte order mark, which some editors write at the start of UTF-8
	// files, is no part of the text: columns count from after it.
	if bytes.HasPrefix(src, utf8BOM) {
		l.off = len(utf8BOM)
	}
	return l
}

// utf8BOM is the byte order mark as UTF-8 encodes it.
var utf8BOM = []byte{0xef, 0xbb, 0xbf}

func (l *lexer) pos() Pos { return Pos{File: l.file, Line: l.line, Col: l.col} }

func (l *lexer) advance() {
	if l.src[l.off] == '\n' {
		l.line++
		l.col = 1
	} else {
		l.col++
	}
	l.off++
}

func (l *lexer) peekByte(ahead int) byte {
	if l.off+ahead < len(l.src) {
		return l.src[l.off+ahead]
	}
	return 0
}

// skipSpace skips white space and comments; false means an unterminated
// block comment was reported.
func (l *lexer) skipSpace() bool {
	for l.off < len(l.src) {
		c := l.src[l.off]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			l.advance()
		case c == '/' && l.peekByte(1) == '/':
			start, begin := l.pos(), l.off
			for l.off < len(l.src) && l.src[l.off] != '\n' {
				l.advance()
			}
			l.comments = append(l.comments, comment{start: start.Line, end: l.line, col: start.Col, text: l.src[begin:l.off]})
		case c == '/' && l.peekByte(1) == '*':
			// Block comments nest, as in Flounder's lexer (Parsec's
			// javaStyle): /* a /* b */ c */ is one comment.
			start, begin := l.pos(), l.off
			l.advance()
			l.advance()
			for depth := 1; depth > 0; {
				switch {
				case l.off >= len(l.src):
					l.errs.errorf(start, "comment not terminated")
					return false
				case l.src[l.off] == '*' && l.peekByte(1) == '/':
					depth--
					l.advance()
				case l.src[l.off] == '/' && l.peekByte(1) == '*':
					depth++
					l.advance()
				}
				l.advance()
			}
			l.comments = append(l.comments, comment{start: start.Line, end: l.line, col: start.Col, text: l.src[begin:l.off]})
		default:
			return true
		}
	}
	return true
}

func isIdentStart(c byte) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isIdentChar(c byte) bool { return isIdentStart(c) || ('0' <= c && c <= '9') }

// next returns the next token, with its doc comment. After an error it
// returns tokEOF.
func (l *lexer) next() token {
	t := l.scan()
	t.doc = docComment(l.comments, l.lastLine, t.pos.Line)
	// A fresh slice, not comments[:0]: the parser's peek works on a copy
	// of the lexer, which must not write into this one's array.
	l.comments = nil
	l.lastLine = l.line
	return t
}

// scan reads the next token.
func (l *lexer) scan() token {
	if !l.skipSpace() || l.off >= len(l.src) {
		return token{kind: tokEOF, pos: l.pos()}
	}
	start := l.pos()
	c := l.src[l.off]
	switch {
	case isIdentStart(c):
		begin := l.off
		for l.off < len(l.src) && isIdentChar(l.src[l.off]) {
			l.advance()
		}
		return token{kind: tokIdent, pos: start, text: string(l.src[begin:l.off])}
	case '0' <= c && c <= '9':
		return l.lexNumber(start)
	case c == '"':
		return l.lexString(start)
	case strings.IndexByte("{}()[];,=@", c) >= 0:
		l.advance()
		return token{kind: tokPunct, pos: start, text: string(c)}
	}
	if c < 0x20 || c >= 0x7f {
		l.errs.errorf(start, "unexpected byte 0x%02x", c)
	} else {
		l.errs.errorf(start, "unexpected character %q", c)
	}
	return token{kind: tokEOF, pos: start}
}

// lexNumber reads a number as Flounder's lexer (Parsec's natural) does:
// decimal digits, leading zeros allowed (017 is seventeen); 0x or 0X and
// hexadecimal digits; 0o or 0O and octal digits.
func (l *lexer) lexNumber(start Pos) token {
	begin := l.off
	for l.off < len(l.src) && isIdentChar(l.src[l.off]) {
		l.advance()
	}
	text := string(l.src[begin:l.off])
	digits, base := text, 10
	if len(text) > 1 && text[0] == '0' {
		switch text[1] {
		case 'x', 'X':
			digits, base = text[2:], 16
		case 'o', 'O':
			digits, base = text[2:], 8
		}
	}
	n, err := strconv.ParseUint(digits, base, 64)
	if err != nil || strings.ContainsRune(digits, '_') || strings.HasPrefix(digits, "+") {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			l.errs.errorf(start, "number %s does not fit in 64 bits", text)
		} else {
			l.errs.errorf(start, "malformed number %q (write decimal, hexadecimal with 0x or octal with 0o)", text)
		}
		return token{kind: tokEOF, pos: start}
	}
	return token{kind: tokNumber, pos: start, text: text, num: n}
}

// asciiNames are the escapes \NUL ... \DEL of Haskell string literals,
// longest first where one name begins another (SOH before SO).
var asciiNames = []struct {
	name string
	code byte
}{
	{"NUL", 0}, {"SOH", 1}, {"STX", 2}, {"ETX", 3}, {"EOT", 4}, {"ENQ", 5}, {"ACK", 6},
	{"BEL", 7}, {"BS", 8}, {"HT", 9}, {"LF", 10}, {"VT", 11}, {"FF", 12}, {"CR", 13},
	{"SO", 14}, {"SI", 15}, {"DLE", 16}, {"DC1", 17}, {"DC2", 18}, {"DC3", 19},
	{"DC4", 20}, {"NAK", 21}, {"SYN", 22}, {"ETB", 23}, {"CAN", 24}, {"EM", 25},
	{"SUB", 26}, {"ESC", 27}, {"FS", 28}, {"GS", 29}, {"RS", 30}, {"US", 31},
	{"SP", 32}, {"DEL", 127},
}

func init() {
	// SOH must be tried before SO, as Parsec tries three-letter names first.
	sort.SliceStable(asciiNames, func(i, j int) bool { return len(asciiNames[i].name) > len(asciiNames[j].name) })
}

// lexString reads the interface description, a string literal with the
// escapes of Flounder's lexer (Parsec's stringLiteral, Haskell's syntax):
// \a \b \f \n \r \t \v \\ \" \'; a character code in decimal (\65), hexadecimal
// (\x41) or octal (\o101); a control character (\^A); an ASCII name
// (\NUL, \ESC, \DEL); the empty escape \&; and a gap, a backslash, white
// space (line breaks too) and a backslash, which stands for nothing.
func (l *lexer) lexString(start Pos) token {
	l.advance() // opening quote
	var b strings.Builder
	for {
		if l.off >= len(l.src) || l.src[l.off] == '\n' {
			l.errs.errorf(start, "string not terminated")
			return token{kind: tokEOF, pos: start}
		}
		c := l.src[l.off]
		switch c {
		case '"':
			l.advance()
			return token{kind: tokString, pos: start, text: b.String()}
		case '\\':
			escPos := l.pos()
			l.advance()
			if !l.escape(&b, escPos) {
				return token{kind: tokEOF, pos: start}
			}
		default:
			b.WriteByte(c)
			l.advance()
		}
	}
}

// escape reads one escape after its backslash into b; false after
// reporting an error.
func (l *lexer) escape(b *strings.Builder, escPos Pos) bool {
	if l.off >= len(l.src) {
		l.errs.errorf(escPos, "string not terminated")
		return false
	}
	e, escOff := l.src[l.off], l.off
	if i := strings.IndexByte("abfnrtv\\\"'", e); i >= 0 {
		b.WriteByte("\a\b\f\n\r\t\v\\\"'"[i])
		l.advance()
		return true
	}
	switch {
	case e == '&':
		l.advance()
		return true
	case e == ' ' || e == '\t' || e == '\n' || e == '\r' || e == '\f' || e == '\v':
		for l.off < len(l.src) && strings.IndexByte(" \t\n\r\f\v", l.src[l.off]) >= 0 {
			l.advance()
		}
		if l.off >= len(l.src) || l.src[l.off] != '\\' {
			l.errs.errorf(escPos, "string gap not closed: a backslash, white space and a backslash stand for nothing")
			return false
		}
		l.advance()
		return true
	case e == '^':
		l.advance()
		if l.off < len(l.src) && '@' <= l.src[l.off] && l.src[l.off] <= '_' {
			b.WriteByte(l.src[l.off] - '@')
			l.advance()
			return true
		}
		l.errs.errorf(escPos, "escape \\^ needs a control letter, @ or one of [\\]^_ after it")
		return false
	case '0' <= e && e <= '9' || e == 'x' || e == 'o':
		base, digit := 10, func(c byte) bool { return '0' <= c && c <= '9' }
		switch e {
		case 'x':
			base, digit = 16, func(c byte) bool {
				return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
			}
			l.advance()
		case 'o':
			base, digit = 8, func(c byte) bool { return '0' <= c && c <= '7' }
			l.advance()
		}
		begin := l.off
		for l.off < len(l.src) && digit(l.src[l.off]) {
			l.advance()
		}
		n, err := strconv.ParseUint(string(l.src[begin:l.off]), base, 32)
		if err != nil || n > unicode.MaxRune || (0xd800 <= n && n < 0xe000) {
			l.errs.errorf(escPos, "character code in escape \\%s is not a character", l.src[escOff:l.off])
			return false
		}
		b.WriteRune(rune(n))
		return true
	}
	for _, a := range asciiNames {
		if strings.HasPrefix(string(l.src[l.off:min(l.off+3, len(l.src))]), a.name) {
			for range a.name {
				l.advance()
			}
			b.WriteByte(a.code)
			return true
		}
	}
	l.errs.errorf(escPos, "unknown escape \\%c in string (the escapes are Haskell's: \\n, \\t, \\\\, \\\", \\65, \\x41, \\NUL, ...)", e)
	return false
}
