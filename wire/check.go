package wire

import (
	"fmt"
	"strings"
)

// The Check functions apply the encoder's rules to a value without
// encoding it. The local interconnect, which passes messages as values,
// calls them through the generated MsgValidate methods, so that a message
// too long for the wire is refused there too. msg and field name the value
// in the error, as the encoder would.

// CheckString refuses a string longer than bound bytes (ErrBound) or
// holding a NUL byte (ErrNUL).
func CheckString(msg, field, s string, bound uint32) error {
	if uint64(len(s)) > uint64(bound) {
		return &Error{Err: ErrBound, Message: msg, Field: field, Offset: -1, Encoding: true,
			Detail: fmt.Sprintf("string length %d exceeds bound %d", len(s), bound)}
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return &Error{Err: ErrNUL, Message: msg, Field: field, Offset: -1, Encoding: true,
			Detail: fmt.Sprintf("string holds a NUL byte at index %d", i)}
	}
	return nil
}

// CheckCount refuses a dynamic array of more than bound elements.
func CheckCount(msg, field string, n int, bound uint32) error {
	if uint64(n) > uint64(bound) {
		return &Error{Err: ErrBound, Message: msg, Field: field, Offset: -1, Encoding: true,
			Detail: fmt.Sprintf("array count %d exceeds bound %d", n, bound)}
	}
	return nil
}

// CheckEnum refuses an enum value v of a type with n enumerators when v is
// out of range.
func CheckEnum(msg, field string, v, n uint32) error {
	if v >= n {
		return &Error{Err: ErrEnum, Message: msg, Field: field, Offset: -1, Encoding: true,
			Detail: fmt.Sprintf("enum value %d out of range (%d enumerators)", v, n)}
	}
	return nil
}

// CheckEnums is CheckEnum for each element of vs, an array of enums: the
// first out of range is reported as field[i].
func CheckEnums[E ~uint8 | ~uint16 | ~uint32 | ~uint64](msg, field string, vs []E, n uint32) error {
	for i, v := range vs {
		if uint64(v) >= uint64(n) {
			return CheckEnum(msg, fmt.Sprintf("%s[%d]", field, i), uint32(min(uint64(v), uint64(^uint32(0)))), n)
		}
	}
	return nil
}

// First returns the first of errs that is not nil: the checks of a
// message's fields, in their order.
func First(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
