package idl

import (
	"fmt"
	"strconv"
	"strings"
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
}

func newLexer(file string, src []byte, errs *errorSink) *lexer {
	return &lexer{file: file, src: src, line: 1, col: 1, errs: errs}
}

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
			for l.off < len(l.src) && l.src[l.off] != '\n' {
				l.advance()
			}
		case c == '/' && l.peekByte(1) == '*':
			start := l.pos()
			l.advance()
			l.advance()
			for {
				if l.off >= len(l.src) {
					l.errs.errorf(start, "comment not terminated")
					return false
				}
				if l.src[l.off] == '*' && l.peekByte(1) == '/' {
					l.advance()
					l.advance()
					break
				}
				l.advance()
			}
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

// next returns the next token. After an error it returns tokEOF.
func (l *lexer) next() token {
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
		begin := l.off
		for l.off < len(l.src) && isIdentChar(l.src[l.off]) {
			l.advance()
		}
		text := string(l.src[begin:l.off])
		n, err := strconv.ParseUint(text, 0, 64)
		if err != nil || strings.ContainsRune(text, '_') || (len(text) > 1 && text[0] == '0' && text[1] != 'x' && text[1] != 'X') {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				l.errs.errorf(start, "number %s does not fit in 64 bits", text)
			} else {
				l.errs.errorf(start, "malformed number %q (write decimal, or hexadecimal with 0x)", text)
			}
			return token{kind: tokEOF, pos: start}
		}
		return token{kind: tokNumber, pos: start, text: text, num: n}
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
			if l.off >= len(l.src) {
				l.errs.errorf(start, "string not terminated")
				return token{kind: tokEOF, pos: start}
			}
			switch e := l.src[l.off]; e {
			case '"', '\\':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				l.errs.errorf(escPos, "unknown escape \\%c in string (use \\\", \\\\, \\n or \\t)", e)
				return token{kind: tokEOF, pos: start}
			}
			l.advance()
		default:
			b.WriteByte(c)
			l.advance()
		}
	}
}
