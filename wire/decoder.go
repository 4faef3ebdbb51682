package wire

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Decoder reads the body of one frame. Generated Decode methods create one
// (the zero Decoder will do), start it with Begin, read each argument in order with the method of its type,
// and end with Finish.
//
// A Decoder is sticky: the first problem is recorded and every later read
// returns a zero value, so generated code need not check after each field.
// Finish reports the problem. Enter and Leave bracket the decoding of a
// struct or array, so that the error names the path to the field.
type Decoder struct {
	b    []byte
	off  int
	caps []Cap
	ncap int
	name string
	fault
}

// Begin starts decoding frame, whose out-of-band capabilities are caps, as a
// frame of message number msg and kind kind; name is the frame's name for
// errors, like "kv.get call". Begin resets d, so a Decoder can be reused.
// It checks the header: length (ErrTruncated, ErrSize), message number
// (ErrUnknownMessage), flags, call_id and timeout_us (ErrHeader), and ncaps
// against len(caps) (ErrCap).
func (d *Decoder) Begin(frame []byte, caps []Cap, name string, msg uint16, kind Kind) {
	// Field by field: a composite literal is built on the stack and copied,
	// which stalls store forwarding and costs more than the whole decode.
	d.b, d.off, d.caps, d.ncap, d.name = frame, HeaderSize, caps, 0, name
	d.fault = fault{}
	// The common case, a valid header, costs a few compares; badHeader
	// works out what is wrong otherwise.
	if len(frame) < HeaderSize ||
		uint64(binary.LittleEndian.Uint32(frame[offSize:])) != uint64(len(frame)) ||
		binary.LittleEndian.Uint16(frame[offMsg:]) != msg ||
		frame[offFlags] != kind.Flags() || int(frame[offNCaps]) != len(caps) ||
		(kind == KindMessage && binary.LittleEndian.Uint32(frame[offCallID:]) != 0) ||
		(kind != KindCall && binary.LittleEndian.Uint32(frame[offTimeout:]) != 0) {
		d.badHeader(msg, kind)
	}
}

// badHeader records the first problem of a header that failed the quick
// checks of Begin, in the order of docs/wire.md: length, size, message
// number, flags and the fields they govern, ncaps.
func (d *Decoder) badHeader(msg uint16, kind Kind) {
	frame := d.b
	d.off = len(frame)
	if len(frame) < HeaderSize {
		d.fault.fail(ErrTruncated, d.name, "", 0,
			fmt.Sprintf("frame of %d bytes is shorter than the %d-byte header", len(frame), HeaderSize))
		return
	}
	h := Header{
		Size:      binary.LittleEndian.Uint32(frame[offSize:]),
		Msg:       binary.LittleEndian.Uint16(frame[offMsg:]),
		Flags:     frame[offFlags],
		NCaps:     frame[offNCaps],
		CallID:    binary.LittleEndian.Uint32(frame[offCallID:]),
		TimeoutUS: binary.LittleEndian.Uint32(frame[offTimeout:]),
	}
	k, off, problem := h.kind()
	if problem == "" && k != kind {
		off, problem = offFlags, fmt.Sprintf("%s frame, expected a %s", k, kind)
	}
	switch {
	case uint64(h.Size) != uint64(len(frame)):
		d.fault.fail(ErrSize, d.name, "", offSize,
			fmt.Sprintf("header size %d differs from frame length %d", h.Size, len(frame)))
	case h.Msg != msg:
		d.fault.fail(ErrUnknownMessage, d.name, "", offMsg,
			fmt.Sprintf("message number %d, expected %d", h.Msg, msg))
	case problem != "":
		d.fault.fail(ErrHeader, d.name, "", off, problem)
	default:
		d.fault.fail(ErrCap, d.name, "", offNCaps,
			fmt.Sprintf("header ncaps %d differs from the %d capabilities received", h.NCaps, len(d.caps)))
	}
}

// Failed reports whether the decoder has met a problem.
func (d *Decoder) Failed() bool { return d.err != nil }

// Offset returns the offset of the next byte to read.
func (d *Decoder) Offset() int { return d.off }

// Enter starts the decoding of a struct or array value; Leave ends it.
func (d *Decoder) Enter() { d.fault.enter() }

// Leave ends what Enter started. If the problem was met inside, field (the
// argument, struct field or "" for an element's own position) is prefixed
// to the error's field path.
func (d *Decoder) Leave(field string) { d.fault.leave(field, -1) }

// LeaveIndex is Leave for element i of the array field.
func (d *Decoder) LeaveIndex(field string, i int) { d.fault.leave(field, i) }

// Finish ends the decoding: it returns the first problem met, or
// ErrTrailing if bytes remain, or ErrCap if fewer capabilities were used
// than the frame carries.
func (d *Decoder) Finish() error {
	if d.err != nil {
		return d.err
	}
	if d.off != len(d.b) {
		return &Error{Err: ErrTrailing, Message: d.name, Offset: d.off,
			Detail: fmt.Sprintf("%d bytes after the last argument", len(d.b)-d.off)}
	}
	if d.ncap != len(d.caps) {
		return &Error{Err: ErrCap, Message: d.name, Offset: offNCaps,
			Detail: fmt.Sprintf("header ncaps %d, but the body holds %d capabilities", len(d.caps), d.ncap)}
	}
	return nil
}

// short records that field does not fit in what is left of the frame.
func (d *Decoder) short(field string) {
	d.fault.fail(ErrTruncated, d.name, field, d.off,
		fmt.Sprintf("frame ends %d bytes into the field", len(d.b)-d.off))
	d.off = len(d.b)
}

// Uint8 reads a one-byte field (uint8, int8, char).
func (d *Decoder) Uint8(field string) uint8 {
	if b := d.b[d.off:]; len(b) >= 1 {
		d.off++
		return b[0]
	}
	d.short(field)
	return 0
}

// Uint16 reads a two-byte field (uint16, int16).
func (d *Decoder) Uint16(field string) uint16 {
	if b := d.b[d.off:]; len(b) >= 2 {
		d.off += 2
		return binary.LittleEndian.Uint16(b)
	}
	d.short(field)
	return 0
}

// Uint32 reads a four-byte field (uint32, int32, int).
func (d *Decoder) Uint32(field string) uint32 {
	if b := d.b[d.off:]; len(b) >= 4 {
		d.off += 4
		return binary.LittleEndian.Uint32(b)
	}
	d.short(field)
	return 0
}

// Uint64 reads an eight-byte field (uint64, int64, uintptr, intptr, size,
// errval).
func (d *Decoder) Uint64(field string) uint64 {
	if b := d.b[d.off:]; len(b) >= 8 {
		d.off += 8
		return binary.LittleEndian.Uint64(b)
	}
	d.short(field)
	return 0
}

// Bool reads a bool, rejecting a byte other than 0 and 1 with ErrBool.
func (d *Decoder) Bool(field string) bool {
	off := d.off
	switch v := d.Uint8(field); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fault.fail(ErrBool, d.name, field, off, fmt.Sprintf("bool byte %d is neither 0 nor 1", v))
		d.off = len(d.b)
		return false
	}
}

// Enum reads an enum of n enumerators, rejecting a value ≥ n with ErrEnum.
func (d *Decoder) Enum(field string, n uint32) uint32 {
	off := d.off
	v := d.Uint32(field)
	if v >= n && d.err == nil {
		d.fault.fail(ErrEnum, d.name, field, off, fmt.Sprintf("enum value %d out of range (%d enumerators)", v, n))
		d.off = len(d.b)
		return 0
	}
	return v
}

// Iref reads an iref.
func (d *Decoder) Iref(field string) Iref {
	if len(d.b)-d.off < IrefSize {
		d.short(field)
		return Iref{}
	}
	b := d.b[d.off : d.off+IrefSize]
	d.off += IrefSize
	r := Iref{
		Machine: binary.LittleEndian.Uint64(b[0:]),
		Export:  binary.LittleEndian.Uint64(b[8:]),
	}
	copy(r.Token[:], b[16:])
	return r
}

// Cap reads a capability index, which must equal the number of capabilities
// read before it (ErrCap), and returns that capability.
func (d *Decoder) Cap(field string) Cap {
	off := d.off
	i := d.Uint32(field)
	if d.err != nil {
		return nil
	}
	if uint64(i) != uint64(d.ncap) || d.ncap >= len(d.caps) {
		detail := fmt.Sprintf("capability index %d, expected %d", i, d.ncap)
		if d.ncap >= len(d.caps) {
			detail = fmt.Sprintf("capability %d of a frame that carries %d", d.ncap+1, len(d.caps))
		}
		d.fault.fail(ErrCap, d.name, field, off, detail)
		d.off = len(d.b)
		return nil
	}
	d.ncap++
	return d.caps[i]
}

// length reads the u32 length of a string or the count of a dynamic array,
// checks it against bound (ErrBound) and checks that n elements of elemSize
// bytes fit in what is left (ErrTruncated). It returns -1 on a problem.
func (d *Decoder) length(field string, bound uint32, elemSize int, what string) int {
	off := d.off
	n := d.Uint32(field)
	if d.err != nil {
		return -1
	}
	if n > bound {
		d.fault.fail(ErrBound, d.name, field, off, fmt.Sprintf("%s %d exceeds bound %d", what, n, bound))
		d.off = len(d.b)
		return -1
	}
	if need := uint64(n) * uint64(elemSize); need > uint64(len(d.b)-d.off) {
		d.fault.fail(ErrTruncated, d.name, field, off, fmt.Sprintf("%s %d needs %d bytes, %d left", what, n, need, len(d.b)-d.off))
		d.off = len(d.b)
		return -1
	}
	return int(n)
}

// String reads a string of at most bound bytes: ErrBound if longer, ErrNUL if
// it contains a NUL byte.
func (d *Decoder) String(field string, bound uint32) string {
	off := d.off
	n := d.length(field, bound, 1, "string length")
	if n <= 0 {
		return ""
	}
	b := d.b[d.off : d.off+n]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		d.fault.fail(ErrNUL, d.name, field, off, fmt.Sprintf("string holds a NUL byte at index %d", i))
		d.off = len(d.b)
		return ""
	}
	d.off += n
	return string(b)
}

// Bytes reads a dynamic array of at most bound bytes (uint8 or char
// elements), into a new slice; nil if empty.
func (d *Decoder) Bytes(field string, bound uint32) []byte {
	n := d.length(field, bound, 1, "array count")
	if n <= 0 {
		return nil
	}
	b := CloneBytes(d.b[d.off : d.off+n])
	d.off += n
	return b
}

// BytesView is Bytes without the copy: it returns the array's bytes in
// the frame itself (nil if empty), capped at their length, so that they
// are valid as long as the frame is and an append to them cannot write
// into the rest of the frame.
func (d *Decoder) BytesView(field string, bound uint32) []byte {
	n := d.length(field, bound, 1, "array count")
	if n <= 0 {
		return nil
	}
	b := View(d.b[d.off : d.off+n])
	d.off += n
	return b
}

// BytesAs is Bytes taking the array's bytes as take says: a copy, a view
// into the frame, or appended to dst.
func (d *Decoder) BytesAs(field string, bound uint32, take Take, dst []byte) []byte {
	n := d.length(field, bound, 1, "array count")
	if n < 0 {
		return take.Bytes(dst, nil)
	}
	b := take.Bytes(dst, d.b[d.off:d.off+n])
	d.off += n
	return b
}

// Count reads the count of a dynamic array of at most bound elements, each
// at least elemSize bytes on the wire, and returns it (0 on a problem). The
// caller then reads that many elements.
func (d *Decoder) Count(field string, bound uint32, elemSize int) int {
	return max(d.length(field, bound, elemSize, "array count"), 0)
}

// Raw fills dst with the next len(dst) bytes: a fixed array of bytes.
func (d *Decoder) Raw(field string, dst []byte) {
	if len(d.b)-d.off < len(dst) {
		d.short(field)
		clear(dst)
		return
	}
	d.off += copy(dst, d.b[d.off:])
}

// GiveAwayCap is Cap for a give_away_cap: the capability is the receiver's
// to close, like any other it receives.
func (d *Decoder) GiveAwayCap(field string) Cap { return d.Cap(field) }
