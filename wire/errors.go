package wire

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrMalformed is matched by every rejection of this package: every code
// sentinel below and every *Error.
var ErrMalformed = errors.New("wire: malformed frame")

// codeError is a rejection code of docs/wire.md.
type codeError struct{ code string }

func (c *codeError) Error() string { return "wire: " + c.code }

// Is makes every code match ErrMalformed.
func (c *codeError) Is(target error) bool { return target == ErrMalformed }

// The rejection codes of docs/wire.md, the same in Go and C. Match them with
// errors.Is; Code returns a code's name.
var (
	// ErrTruncated: the buffer ends inside the header or a field.
	ErrTruncated error = &codeError{"truncated"}
	// ErrSize: the header's size differs from the buffer length, or
	// exceeds a limit.
	ErrSize error = &codeError{"size"}
	// ErrTrailing: bytes remain after the last argument.
	ErrTrailing error = &codeError{"trailing"}
	// ErrUnknownMessage: the message number names no message of the
	// interface, or not the one the caller asked to decode.
	ErrUnknownMessage error = &codeError{"unknown_message"}
	// ErrHeader: flags, call_id or timeout_us invalid for the frame kind.
	ErrHeader error = &codeError{"header"}
	// ErrBound: a string or array is longer than its IDL bound.
	ErrBound error = &codeError{"bound"}
	// ErrEnum: an enum value is out of range.
	ErrEnum error = &codeError{"enum"}
	// ErrBool: a bool byte is neither 0 nor 1.
	ErrBool error = &codeError{"bool"}
	// ErrCap: a capability index or count is wrong, or a capability
	// cannot be encoded (nil, or more than MaxCaps).
	ErrCap error = &codeError{"cap"}
	// ErrNUL: a string contains a NUL byte.
	ErrNUL error = &codeError{"nul"}
)

var codes = [...]error{ErrTruncated, ErrSize, ErrTrailing, ErrUnknownMessage,
	ErrHeader, ErrBound, ErrEnum, ErrBool, ErrCap, ErrNUL}

// Code returns the name of the rejection code err matches ("truncated",
// "bound", ... as in docs/wire.md), or "" if it matches none.
func Code(err error) string {
	for _, c := range codes {
		if errors.Is(err, c) {
			return c.(*codeError).code
		}
	}
	return ""
}

// CodeError returns the sentinel error of the rejection code named code
// ("truncated", "bound", ...), or nil if there is no such code.
func CodeError(code string) error {
	for _, c := range codes {
		if c.(*codeError).code == code {
			return c
		}
	}
	return nil
}

// Error is a detailed rejection: which code, in which message and field,
// at which byte offset of the frame. It unwraps to its code, so
// errors.Is(err, ErrBound) and errors.Is(err, ErrMalformed) both work.
type Error struct {
	// Err is the code: ErrTruncated, ErrBound, ...
	Err error
	// Message is the frame being encoded or decoded, like "kv.put" or
	// "kv.get call"; "" when not known.
	Message string
	// Field is the argument, with a path into structs and arrays, like
	// "lines[1].from.x"; "" for the header and for the frame as a whole.
	Field string
	// Offset is the byte offset, from the start of the frame, of the field
	// or header field at fault; -1 when a value was checked without being
	// encoded (see CheckString).
	Offset int
	// Detail describes the problem, like "string length 300 exceeds bound
	// 256".
	Detail string
	// Encoding is set when a value was refused on its way into a frame (by
	// an Encoder, a Check function or AppendMetadata): the fault is its
	// sender's, where a frame refused by a Decoder is whoever made the
	// frame's. chanos gives the first the status code invalid_argument,
	// the second internal.
	Encoding bool
}

// Error formats e as, for example,
//
//	wire: alltypes.strings: field name: string length 300 exceeds bound 256 at offset 20
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("wire: ")
	if e.Message != "" {
		b.WriteString(e.Message)
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString("field ")
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	detail := e.Detail
	if detail == "" && e.Err != nil {
		detail = strings.TrimPrefix(e.Err.Error(), "wire: ")
	}
	b.WriteString(detail)
	if e.Offset >= 0 {
		b.WriteString(" at offset ")
		b.WriteString(strconv.Itoa(e.Offset))
	}
	return b.String()
}

// Unwrap returns the code.
func (e *Error) Unwrap() error { return e.Err }

// fault records the first error of an Encoder or Decoder, and the nesting
// depth at which it happened, so that Leave can prefix the field path once
// per level on the way out.
type fault struct {
	err      *Error
	depth    int
	errDepth int
	encoding bool // an Encoder's (Error.Encoding)
}

func (f *fault) fail(code error, name, field string, off int, detail string) {
	if f.err != nil {
		return
	}
	f.err = &Error{Err: code, Message: name, Field: field, Offset: off, Detail: detail, Encoding: f.encoding}
	f.errDepth = f.depth
}

func (f *fault) enter() { f.depth++ }

func (f *fault) leave(field string, index int) {
	f.depth--
	if f.err == nil || f.errDepth <= f.depth {
		return
	}
	f.errDepth = f.depth
	if index >= 0 {
		field += "[" + strconv.Itoa(index) + "]"
	}
	switch inner := f.err.Field; {
	case inner == "":
		f.err.Field = field
	case inner[0] == '[' || field == "":
		f.err.Field = field + inner
	default:
		f.err.Field = field + "." + inner
	}
}

// UnknownMessage returns the ErrUnknownMessage error of a frame whose
// message number msg names no message of the interface iface.
func UnknownMessage(iface string, msg uint16) error {
	return &Error{Err: ErrUnknownMessage, Message: iface, Offset: offMsg,
		Detail: fmt.Sprintf("message number %d names no message of %s", msg, iface)}
}
