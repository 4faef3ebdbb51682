package wire

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// The functions of this file are the fast path of generated code for
// messages whose body has one fixed size and needs no checks beyond the
// header: integers, chars, errvals, irefs and fixed arrays of bytes. Such a
// message is encoded by writing into the body AppendFixed returns and
// decoded by reading from the body FixedBody returns, at constant offsets.

// AppendFixed appends the header of a frame of message number msg and kind
// kind, with a body of exactly size bytes, to buf, and returns the body for
// the caller to fill in. The frame carries no capabilities.
func AppendFixed(buf *Buffer, msg uint16, kind Kind, size int) []byte {
	n := len(buf.B)
	b := slices.Grow(buf.B, HeaderSize+size)[:n+HeaderSize+size]
	f := b[n:]
	binary.LittleEndian.PutUint64(f, uint64(HeaderSize+size)|uint64(msg)<<32|uint64(kind.Flags())<<48)
	binary.LittleEndian.PutUint64(f[8:], 0)
	buf.B = b
	return f[HeaderSize:]
}

// FixedBody returns the body of frame, and true, if frame is a well-formed
// frame of message number msg and kind kind, with a body of exactly size
// bytes and no capabilities. If it returns false, the caller decodes the
// frame the slow way, with a Decoder, to learn what is wrong.
func FixedBody(frame []byte, caps []Cap, msg uint16, kind Kind, size int) ([]byte, bool) {
	// Size, message number, flags and ncaps make up the first eight bytes;
	// call_id and timeout_us the next eight, of which the bits in
	// kindZeros must be 0. Table lookups rather than Kind methods keep
	// FixedBody small enough to be inlined.
	n := HeaderSize + size
	if len(frame) != n || len(caps) != 0 ||
		binary.LittleEndian.Uint64(frame)^(uint64(n)|uint64(msg)<<32|uint64(kindFlags[kind&7])<<48)|
			binary.LittleEndian.Uint64(frame[8:])&kindZeros[kind&7] != 0 {
		return nil, false
	}
	return frame[HeaderSize:], true
}

// FixedError returns what is wrong with frame, which FixedBody refused
// for message number msg and kind kind with a body of size bytes, as a
// Decoder of the frame's fields would report it: a bad header, a body
// shorter or longer than size, or capabilities the frame cannot hold.
// name is the frame's name in errors ("kv.get call").
func FixedError(frame []byte, caps []Cap, name string, msg uint16, kind Kind, size int) error {
	// Copies, so that the frame is not taken to escape: generated code
	// decodes frames on its stack, and this runs only for a bad one.
	b, c := slices.Clone(frame), slices.Clone(caps)
	var d Decoder
	d.Begin(b, c, name, msg, kind)
	if !d.Failed() {
		if len(b) < HeaderSize+size {
			d.short("body")
		} else {
			d.off = HeaderSize + size
		}
	}
	if err := d.Finish(); err != nil {
		return err
	}
	// FixedBody and the Decoder disagree: a bug here, not in the peer.
	return fmt.Errorf("%s: frame refused by FixedBody but not by the Decoder: %w", name, ErrMalformed)
}

// PeekMsg returns the message number in frame's header, and false if
// frame is too short to hold a header. It checks nothing else: a caller
// uses it to choose which FixedBody to try, and trusts the frame only
// once that succeeds.
func PeekMsg(frame []byte) (uint16, bool) {
	if len(frame) < HeaderSize {
		return 0, false
	}
	return binary.LittleEndian.Uint16(frame[offMsg:]), true
}

// TailBody is FixedBody for a frame whose body is size bytes of fixed
// fields and the count of one dynamic array of bytes, followed by that
// many bytes and, if any, more fixed fields: it returns the body, at least
// size bytes long, if frame's header is well formed for message number msg
// and kind kind and it carries no capabilities. The caller checks the
// count against its bound and the body's length, and decodes the frame
// with a Decoder if they do not agree.
func TailBody(frame []byte, caps []Cap, msg uint16, kind Kind, size int) ([]byte, bool) {
	// A frame longer than the size field can hold spills into the
	// message number's bits and fails the compare.
	if len(frame) < HeaderSize+size || len(caps) != 0 ||
		binary.LittleEndian.Uint64(frame)^(uint64(len(frame))|uint64(msg)<<32|uint64(kindFlags[kind&7])<<48)|
			binary.LittleEndian.Uint64(frame[8:])&kindZeros[kind&7] != 0 {
		return nil, false
	}
	return frame[HeaderSize:], true
}

// Take says how a decoder takes a dynamic array of bytes out of a frame:
// generated code decodes a frame one way, and takes its bytes as its
// caller needs.
type Take uint8

const (
	// TakeCopy takes a copy of its own (CloneBytes): what Decode does.
	TakeCopy Take = iota
	// TakeView takes a view into the frame (View), valid as long as the
	// frame is: for the handlers of @borrow messages and rpcs.
	TakeView
	// TakeAppend appends the bytes to the caller's slice: for the Append
	// stubs, which reuse the caller's buffer.
	TakeAppend
)

// Bytes returns b, a dynamic array of bytes in a frame, taken as t says;
// dst is the slice TakeAppend appends to.
func (t Take) Bytes(dst, b []byte) []byte {
	switch t {
	case TakeView:
		return View(b)
	case TakeAppend:
		return append(dst, b...)
	}
	return CloneBytes(b)
}

// CloneBytes returns a copy of b that shares no memory with it, nil if b
// is empty: the value a Decoder gives a dynamic array of bytes.
func CloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	// make and copy of the same length, without zeroing the new slice
	// first.
	c := make([]byte, len(b))
	copy(c, b)
	return c
}

// View returns b, nil if it is empty, capped at its length: the value
// Decoder.BytesView gives a dynamic array of bytes.
func View(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b[:len(b):len(b)]
}

// kindFlags and kindZeros give, for each Kind, the header flags and the
// bits of call_id (low half) and timeout_us (high half) that must be 0.
var (
	kindFlags = [8]uint8{KindCall: FlagCall, KindReply: FlagReply,
		KindErrorReply: FlagReply | FlagError, KindCancel: FlagCancel}
	kindZeros = [8]uint64{KindMessage: ^uint64(0), KindReply: 0xFFFFFFFF << 32,
		KindErrorReply: 0xFFFFFFFF << 32, KindCancel: 0xFFFFFFFF << 32}
)

// Uint16 returns the little-endian uint16 at the start of b.
func Uint16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

// Uint32 returns the little-endian uint32 at the start of b.
func Uint32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }

// Uint64 returns the little-endian uint64 at the start of b.
func Uint64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }

// PutUint16 writes v little-endian at the start of b.
func PutUint16(b []byte, v uint16) { binary.LittleEndian.PutUint16(b, v) }

// PutUint32 writes v little-endian at the start of b.
func PutUint32(b []byte, v uint32) { binary.LittleEndian.PutUint32(b, v) }

// PutUint64 writes v little-endian at the start of b.
func PutUint64(b []byte, v uint64) { binary.LittleEndian.PutUint64(b, v) }

// GetIref returns the iref encoded at the start of b.
func GetIref(b []byte) Iref {
	b = b[:IrefSize]
	r := Iref{Machine: binary.LittleEndian.Uint64(b), Export: binary.LittleEndian.Uint64(b[8:])}
	copy(r.Token[:], b[16:])
	return r
}

// PutIref encodes r at the start of b.
func PutIref(b []byte, r Iref) {
	b = b[:IrefSize]
	binary.LittleEndian.PutUint64(b, r.Machine)
	binary.LittleEndian.PutUint64(b[8:], r.Export)
	copy(b[16:], r.Token[:])
}

// PutHead writes the header of a frame of message number msg and kind
// kind, with a body of size bytes, at the start of b: for a frame that
// the connection sends in parts (chanos.Conn.CallParts, ReplyParts,
// SendParts), whose body does not follow the header in b.
func PutHead(b []byte, msg uint16, kind Kind, size int) {
	binary.LittleEndian.PutUint64(b, uint64(HeaderSize+size)|uint64(msg)<<32|uint64(kindFlags[kind&7])<<48)
	binary.LittleEndian.PutUint64(b[8:], 0)
}

// PutFixed writes the header of a frame of message number msg and kind
// kind into frame, which holds exactly the whole frame (a body of a fixed
// size), and returns the body for the caller to fill in. It is
// AppendFixed for a frame in an array of its own, which generated stubs
// keep on their stack: the connection's fast paths (chanos.Conn.CallFrame,
// ReplyFrame, SendFrame) take such frames.
func PutFixed(frame []byte, msg uint16, kind Kind) []byte {
	binary.LittleEndian.PutUint64(frame, uint64(len(frame))|uint64(msg)<<32|uint64(kindFlags[kind&7])<<48)
	binary.LittleEndian.PutUint64(frame[8:], 0)
	return frame[HeaderSize:]
}

// DecodeNew decodes frame, with its capabilities caps, into a new value
// of one of an interface's message types, which newMsg returns for a
// message number and kind (nil where the interface has none): the reply's
// type when the header says reply, else the call's or the message's, so
// that what is wrong with a header is reported by that type's Decode.
// iface names the interface in errors.
func DecodeNew[M Message](frame []byte, caps []Cap, iface string, newMsg func(msg uint16, kind Kind) M) (M, error) {
	var zero M
	h, err := ParseHeader(frame)
	if err != nil {
		return zero, err
	}
	kinds := [3]Kind{KindCall, KindMessage, KindReply}
	if h.Flags&FlagReply != 0 {
		kinds = [3]Kind{KindReply, KindMessage, KindCall}
	}
	for _, k := range kinds {
		if m := newMsg(h.Msg, k); any(m) != nil {
			if err := m.Decode(frame, caps); err != nil {
				return zero, err
			}
			return m, nil
		}
	}
	return zero, UnknownMessage(iface, h.Msg)
}
