package wire

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Encoder appends one frame to a Buffer. Generated Encode methods create
// one (the zero Encoder
// will do), start it with Begin, write each argument in order with the method of its
// type, and end with Finish, which fills in the header's size and ncaps.
//
// Like Decoder, an Encoder is sticky: the first value that cannot be encoded
// (a string or array over its bound, a NUL in a string, an enum out of
// range, a nil or 256th capability) is recorded, and Finish reports it and
// takes the partial frame back out of the Buffer.
type Encoder struct {
	buf      *Buffer
	b        []byte
	start    int
	capStart int
	name     string
	fault
}

// Begin starts a frame of message number msg and kind kind at the end of
// buf; name is the frame's name for errors, like "kv.get call", and size the
// expected body size in bytes (the fixed part of the message), so that the
// buffer grows at most once. Begin resets e, so an Encoder can be reused.
func (e *Encoder) Begin(buf *Buffer, name string, msg uint16, kind Kind, size int) {
	// Field by field, for the reason given in Decoder.Begin.
	e.buf, e.start, e.capStart, e.name = buf, len(buf.B), len(buf.Caps), name
	e.fault = fault{encoding: true}
	e.b = append(slices.Grow(buf.B, HeaderSize+size), 0, 0, 0, 0, byte(msg), byte(msg>>8), kind.Flags(), 0,
		0, 0, 0, 0, 0, 0, 0, 0)
}

// Failed reports whether the encoder has met a problem.
func (e *Encoder) Failed() bool { return e.err != nil }

// Enter starts the encoding of a struct or array value; Leave ends it.
func (e *Encoder) Enter() { e.fault.enter() }

// Leave ends what Enter started; see Decoder.Leave.
func (e *Encoder) Leave(field string) { e.fault.leave(field, -1) }

// LeaveIndex is Leave for element i of the array field.
func (e *Encoder) LeaveIndex(field string, i int) { e.fault.leave(field, i) }

// Finish ends the frame. On success it patches the header's size and ncaps
// and leaves the frame in the Buffer; on a problem it truncates the Buffer's
// bytes and capabilities back to where they were, and returns the problem.
func (e *Encoder) Finish() error {
	size := len(e.b) - e.start
	ncaps := len(e.buf.Caps) - e.capStart
	switch {
	case e.err != nil:
	case uint64(size) > MaxFrameSize:
		e.fault.fail(ErrSize, e.name, "", 0, fmt.Sprintf("frame of %d bytes exceeds the limit of %d", size, uint64(MaxFrameSize)))
	case ncaps > MaxCaps: // Cap stops at MaxCaps; this is a safeguard
		e.fault.fail(ErrCap, e.name, "", offNCaps, fmt.Sprintf("%d capabilities exceed the limit of %d", ncaps, MaxCaps))
	default:
		binary.LittleEndian.PutUint32(e.b[e.start+offSize:], uint32(size))
		e.b[e.start+offNCaps] = uint8(ncaps)
		e.buf.B = e.b
		return nil
	}
	e.buf.B = e.b[:e.start]
	e.buf.truncateCaps(e.capStart)
	return e.err
}

// offset returns the offset in the frame of the next byte.
func (e *Encoder) offset() int { return len(e.b) - e.start }

// Uint8 appends a one-byte field (uint8, int8, char).
func (e *Encoder) Uint8(v uint8) { e.b = append(e.b, v) }

// Uint16 appends a two-byte field (uint16, int16).
func (e *Encoder) Uint16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }

// Uint32 appends a four-byte field (uint32, int32, int).
func (e *Encoder) Uint32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }

// Uint64 appends an eight-byte field (uint64, int64, uintptr, intptr, size,
// errval).
func (e *Encoder) Uint64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }

// Bool appends a bool as 0 or 1.
func (e *Encoder) Bool(v bool) {
	var b uint8
	if v {
		b = 1
	}
	e.b = append(e.b, b)
}

// Enum appends the value v of an enum of n enumerators; v ≥ n is refused
// with ErrEnum.
func (e *Encoder) Enum(field string, v, n uint32) {
	if v >= n {
		e.fault.fail(ErrEnum, e.name, field, e.offset(), fmt.Sprintf("enum value %d out of range (%d enumerators)", v, n))
	}
	e.Uint32(v)
}

// Iref appends an iref.
func (e *Encoder) Iref(r Iref) {
	e.b = binary.LittleEndian.AppendUint64(e.b, r.Machine)
	e.b = binary.LittleEndian.AppendUint64(e.b, r.Export)
	e.b = append(e.b, r.Token[:]...)
}

// Cap appends the index of capability c and adds c to the Buffer's Caps.
// A nil c, or one past MaxCaps in the frame, is refused with ErrCap.
func (e *Encoder) Cap(field string, c Cap) { e.addCap(field, c, false) }

// GiveAwayCap is Cap for a give_away_cap: the connection closes c once the
// frame has been sent.
func (e *Encoder) GiveAwayCap(field string, c Cap) { e.addCap(field, c, true) }

func (e *Encoder) addCap(field string, c Cap, giveAway bool) {
	i := len(e.buf.Caps) - e.capStart
	switch {
	case c == nil:
		e.fault.fail(ErrCap, e.name, field, e.offset(), "nil capability")
	case i >= MaxCaps:
		e.fault.fail(ErrCap, e.name, field, e.offset(), fmt.Sprintf("more than %d capabilities in one frame", MaxCaps))
	}
	e.Uint32(uint32(i))
	if e.err != nil {
		return
	}
	// GiveAway is kept parallel to Caps even if the caller appended to Caps
	// alone.
	for len(e.buf.GiveAway) < len(e.buf.Caps) {
		e.buf.GiveAway = append(e.buf.GiveAway, false)
	}
	e.buf.Caps = append(e.buf.Caps, c)
	e.buf.GiveAway = append(e.buf.GiveAway[:len(e.buf.Caps)-1], giveAway)
}

// String appends a string of at most bound bytes: a longer one is refused
// with ErrBound, one holding a NUL byte with ErrNUL.
func (e *Encoder) String(field string, s string, bound uint32) {
	switch {
	case uint64(len(s)) > uint64(bound):
		e.fault.fail(ErrBound, e.name, field, e.offset(), fmt.Sprintf("string length %d exceeds bound %d", len(s), bound))
		return
	case strings.IndexByte(s, 0) >= 0:
		e.fault.fail(ErrNUL, e.name, field, e.offset(), fmt.Sprintf("string holds a NUL byte at index %d", strings.IndexByte(s, 0)))
		return
	}
	e.Uint32(uint32(len(s)))
	e.b = append(e.b, s...)
}

// Bytes appends a dynamic array of at most bound bytes (uint8 or char
// elements); a longer one is refused with ErrBound.
func (e *Encoder) Bytes(field string, b []byte, bound uint32) {
	if e.Count(field, len(b), bound) {
		e.b = append(e.b, b...)
	}
}

// Count appends the count n of a dynamic array of at most bound elements
// and reports whether the caller should go on to append the elements: a
// count over the bound is refused with ErrBound.
func (e *Encoder) Count(field string, n int, bound uint32) bool {
	if uint64(n) > uint64(bound) {
		e.fault.fail(ErrBound, e.name, field, e.offset(), fmt.Sprintf("array count %d exceeds bound %d", n, bound))
		return false
	}
	e.Uint32(uint32(n))
	return true
}

// Raw appends b as it is: a fixed array of bytes.
func (e *Encoder) Raw(b []byte) { e.b = append(e.b, b...) }
