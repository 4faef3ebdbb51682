package idl

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// ErrInvalid is matched (with errors.Is) by every error the front end
// reports about an interface file's content.
var ErrInvalid = errors.New("invalid interface")

// Error is one problem found in an interface file.
type Error struct {
	Pos Pos
	Msg string
}

func (e *Error) Error() string { return e.Pos.String() + ": " + e.Msg }

// Is makes every Error match ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// ErrorList is every problem found in one run of the front end, sorted by
// position. Its Error method prints one per line, as FILE:LINE:COL: message.
type ErrorList []*Error

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Is makes an ErrorList match ErrInvalid.
func (l ErrorList) Is(target error) bool { return target == ErrInvalid }

// Unwrap exposes the individual errors to errors.As.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// errorSink collects errors during parsing and checking.
type errorSink struct {
	list ErrorList
}

func (s *errorSink) errorf(pos Pos, format string, args ...any) {
	s.list = append(s.list, &Error{Pos: pos, Msg: fmt.Sprintf(format, args...)})
}

// err returns the collected errors, sorted and deduplicated, or nil.
func (s *errorSink) err() error {
	if len(s.list) == 0 {
		return nil
	}
	sort.SliceStable(s.list, func(i, j int) bool {
		a, b := s.list[i].Pos, s.list[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	out := s.list[:0]
	for i, e := range s.list {
		if i > 0 && *e == *s.list[i-1] {
			continue
		}
		out = append(out, e)
	}
	return out
}
