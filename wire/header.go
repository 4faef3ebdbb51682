package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// HeaderSize is the size of the frame header.
const HeaderSize = 16

// MaxCaps is the most capabilities a frame can carry (ncaps is one byte).
// An interconnect may set a lower limit.
const MaxCaps = 255

// MaxFrameSize is the largest frame the header can describe.
const MaxFrameSize = math.MaxUint32

// Flag bits of the header's flags byte.
const (
	FlagCall   uint8 = 0x01 // an rpc call: the body holds the in arguments
	FlagReply  uint8 = 0x02 // an rpc reply: the body holds the out arguments
	FlagError  uint8 = 0x04 // with FlagReply: the call failed, the body is a Status
	FlagCancel uint8 = 0x08 // the caller abandons the call; the body is empty
)

// NoDeadline is the timeout_us value that means "at least 71.6 minutes";
// a server treats it as no deadline, as it does 0.
const NoDeadline = math.MaxUint32

// Offsets of the header fields.
const (
	offSize    = 0
	offMsg     = 4
	offFlags   = 6
	offNCaps   = 7
	offCallID  = 8
	offTimeout = 12
)

// Kind is the kind of a frame, as given by the header's flags.
type Kind uint8

// The frame kinds. Generated message types are of the first three; error
// replies and cancels belong to the connection layer.
const (
	KindMessage    Kind = iota + 1 // flags 0
	KindCall                       // FlagCall
	KindReply                      // FlagReply
	KindErrorReply                 // FlagReply|FlagError
	KindCancel                     // FlagCancel
)

var kindNames = [...]string{
	KindMessage:    "message",
	KindCall:       "call",
	KindReply:      "reply",
	KindErrorReply: "error reply",
	KindCancel:     "cancel",
}

// String returns "message", "call", "reply", "error reply" or "cancel".
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + fmt.Sprint(uint8(k)) + ")"
}

// Flags returns the header flags of a frame of kind k.
func (k Kind) Flags() uint8 {
	switch k {
	case KindCall:
		return FlagCall
	case KindReply:
		return FlagReply
	case KindErrorReply:
		return FlagReply | FlagError
	case KindCancel:
		return FlagCancel
	}
	return 0
}

// Header is a decoded frame header.
type Header struct {
	Size      uint32 // total frame length, header included
	Msg       uint16 // message number, from 1
	Flags     uint8  // Flag bits
	NCaps     uint8  // capabilities carried out of band
	CallID    uint32 // rpc correlation id; 0 on messages
	TimeoutUS uint32 // on a call: the caller's remaining time; else 0
}

// ParseHeader decodes the header of frame, a buffer that holds exactly one
// frame. It fails with ErrTruncated if frame is shorter than HeaderSize and
// with ErrSize if the size field differs from len(frame). It does not check
// the flags: Header.Kind does.
func ParseHeader(frame []byte) (Header, error) {
	if len(frame) < HeaderSize {
		return Header{}, errShortHeader(len(frame))
	}
	// Two loads: the offsets are those of docs/wire.md (offSize ...).
	lo, hi := binary.LittleEndian.Uint64(frame), binary.LittleEndian.Uint64(frame[8:])
	h := Header{Size: uint32(lo), Msg: uint16(lo >> 32), Flags: uint8(lo >> 48), NCaps: uint8(lo >> 56),
		CallID: uint32(hi), TimeoutUS: uint32(hi >> 32)}
	if uint64(h.Size) != uint64(len(frame)) {
		return h, errSizeMismatch(h.Size, len(frame))
	}
	return h, nil
}

// The errors of ParseHeader are built out of line, so that it stays small
// enough to be inlined on every receive.

//go:noinline
func errShortHeader(n int) error {
	return &Error{Err: ErrTruncated, Offset: 0,
		Detail: fmt.Sprintf("frame of %d bytes is shorter than the %d-byte header", n, HeaderSize)}
}

//go:noinline
func errSizeMismatch(size uint32, n int) error {
	return &Error{Err: ErrSize, Offset: offSize,
		Detail: fmt.Sprintf("header size %d differs from frame length %d", size, n)}
}

// Kind returns the kind of frame h heads, or an ErrHeader error if the
// flags, call_id and timeout_us are not one of the valid combinations of
// docs/wire.md. It does not look at Msg or at the body.
func (h Header) Kind() (Kind, error) {
	k, off, problem := h.kind()
	if problem != "" {
		return 0, &Error{Err: ErrHeader, Offset: off, Detail: problem}
	}
	return k, nil
}

// kind is Kind without the allocation: on a bad combination it returns the
// offset of the offending header field and a description of the problem.
func (h Header) kind() (k Kind, off int, problem string) {
	switch h.Flags {
	case 0:
		if h.CallID != 0 {
			return 0, offCallID, "message with nonzero call_id"
		}
		k = KindMessage
	case FlagCall:
		return KindCall, 0, ""
	case FlagReply:
		k = KindReply
	case FlagReply | FlagError:
		k = KindErrorReply
	case FlagCancel:
		k = KindCancel
	default:
		return 0, offFlags, fmt.Sprintf("invalid flags 0x%02x", h.Flags)
	}
	if h.TimeoutUS != 0 {
		return 0, offTimeout, k.String() + " with nonzero timeout_us"
	}
	return k, 0, ""
}

// PutHeader writes h into the first HeaderSize bytes of b.
func PutHeader(b []byte, h Header) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint32(b[offSize:], h.Size)
	binary.LittleEndian.PutUint16(b[offMsg:], h.Msg)
	b[offFlags] = h.Flags
	b[offNCaps] = h.NCaps
	binary.LittleEndian.PutUint32(b[offCallID:], h.CallID)
	binary.LittleEndian.PutUint32(b[offTimeout:], h.TimeoutUS)
}

// AppendHeader appends h to b and returns the extended slice.
func AppendHeader(b []byte, h Header) []byte {
	b = append(b, make([]byte, HeaderSize)...)
	PutHeader(b[len(b)-HeaderSize:], h)
	return b
}

// SetCallID patches the call_id of the frame that starts at frame[0]. The
// connection layer calls it on encoded calls and replies before sending.
func SetCallID(frame []byte, id uint32) {
	binary.LittleEndian.PutUint32(frame[offCallID:], id)
}

// SetTimeout patches the timeout_us of the rpc call frame that starts at
// frame[0]; see TimeoutUS.
func SetTimeout(frame []byte, us uint32) {
	binary.LittleEndian.PutUint32(frame[offTimeout:], us)
}

// TimeoutUS converts the time left before a deadline into a timeout_us
// value: rounded up to a whole microsecond, at least 1 (0 would mean no
// deadline), and NoDeadline when it does not fit.
func TimeoutUS(left time.Duration) uint32 {
	if left <= 0 {
		return 1
	}
	us := (left + time.Microsecond - 1) / time.Microsecond
	if us >= NoDeadline {
		return NoDeadline
	}
	return uint32(us)
}

// Timeout converts a timeout_us value into a duration, with ok false for 0
// and NoDeadline, which both mean no deadline.
func Timeout(us uint32) (d time.Duration, ok bool) {
	if us == 0 || us == NoDeadline {
		return 0, false
	}
	return time.Duration(us) * time.Microsecond, true
}

// ParseFrame parses frame's header and returns it with the frame's kind:
// ParseHeader followed by Header.Kind, the check every receiver makes first.
func ParseFrame(frame []byte) (Header, Kind, error) {
	var h Header
	k, err := ParseFrameInto(&h, frame)
	return h, k, err
}

// ParseFrameInto is ParseFrame writing the header into *h, which it sets
// also on error. Receivers that keep the header in a longer-lived value
// use it: a Header returned by value and then copied is written in pieces
// and read back whole, which stalls the processor on every frame.
func ParseFrameInto(h *Header, frame []byte) (Kind, error) {
	if len(frame) < HeaderSize {
		*h = Header{}
		return 0, errShortHeader(len(frame))
	}
	// Two loads: the offsets are those of docs/wire.md (offSize ...).
	lo, hi := binary.LittleEndian.Uint64(frame), binary.LittleEndian.Uint64(frame[8:])
	h.Size, h.Msg, h.Flags, h.NCaps = uint32(lo), uint16(lo>>32), uint8(lo>>48), uint8(lo>>56)
	h.CallID, h.TimeoutUS = uint32(hi), uint32(hi>>32)
	if uint64(uint32(lo)) != uint64(len(frame)) {
		return 0, errSizeMismatch(uint32(lo), len(frame))
	}
	// The valid combinations by table, as FixedBody does; Kind says what
	// is wrong with the others.
	if flags := uint8(lo >> 48); flags < uint8(len(flagKinds)) {
		k := flagKinds[flags]
		if k != 0 && hi&kindZeros[k&7] == 0 {
			return k, nil
		}
	}
	return h.Kind()
}

// flagKinds maps the valid header flags to their kinds; 0 marks the
// invalid ones.
var flagKinds = [16]Kind{0: KindMessage, FlagCall: KindCall, FlagReply: KindReply,
	FlagReply | FlagError: KindErrorReply, FlagCancel: KindCancel}
