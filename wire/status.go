package wire

import "fmt"

// MaxStatusDetail bounds the Detail of a Status.
const MaxStatusDetail = 1024

// Status is the body of an rpc error reply (flags REPLY|ERROR): the code of
// the failure, never 0, and a human-readable detail of at most
// MaxStatusDetail bytes without NUL. The connection layer sends it when a
// server's handler fails, and turns it back into an error for the caller.
type Status struct {
	Code   Errval
	Detail string
}

// AppendErrorReply appends an error reply frame for rpc number msg,
// carrying s, to buf, with call_id 0 for the connection layer to patch. A
// zero Code is refused with ErrHeader, a Detail over MaxStatusDetail with
// ErrBound, a NUL in it with ErrNUL.
func AppendErrorReply(buf *Buffer, msg uint16, s Status) error {
	var e Encoder
	e.Begin(buf, "error reply", msg, KindErrorReply, 12+len(s.Detail))
	if s.Code == 0 {
		e.fault.fail(ErrHeader, e.name, "code", HeaderSize, "status code 0 (an error reply needs a nonzero code)")
	}
	e.Uint64(uint64(s.Code))
	e.String("detail", s.Detail, MaxStatusDetail)
	return e.Finish()
}

// ParseErrorReply decodes an error reply frame. It checks the header (the
// frame must be an error reply, without capabilities) and the body; a zero
// code is rejected with ErrHeader.
func ParseErrorReply(frame []byte) (Header, Status, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return h, Status{}, err
	}
	var d Decoder
	d.Begin(frame, nil, "error reply", h.Msg, KindErrorReply)
	s := Status{Code: Errval(d.Uint64("code"))}
	if s.Code == 0 && !d.Failed() {
		d.fault.fail(ErrHeader, d.name, "code", HeaderSize, "status code 0 (an error reply needs a nonzero code)")
	}
	s.Detail = d.String("detail", MaxStatusDetail)
	if err := d.Finish(); err != nil {
		return h, Status{}, err
	}
	return h, s, nil
}

// AppendCancel appends a cancel frame for call callID of rpc number msg to
// buf.
func AppendCancel(buf *Buffer, msg uint16, callID uint32) {
	buf.B = AppendHeader(buf.B, Header{Size: HeaderSize, Msg: msg, Flags: FlagCancel, CallID: callID})
}

// ParseCancel decodes a cancel frame: its header must say so, and its body
// must be empty (ErrTrailing) and carry no capabilities (ErrCap).
func ParseCancel(frame []byte) (Header, error) {
	h, err := ParseHeader(frame)
	if err != nil {
		return h, err
	}
	var d Decoder
	d.Begin(frame, nil, "cancel", h.Msg, KindCancel)
	return h, d.Finish()
}

// String formats s as "error 0x...: detail".
func (s Status) String() string {
	if s.Detail == "" {
		return fmt.Sprintf("error 0x%x", uint64(s.Code))
	}
	return fmt.Sprintf("error 0x%x: %s", uint64(s.Code), s.Detail)
}
