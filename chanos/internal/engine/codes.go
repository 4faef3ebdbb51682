package engine

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/wire"
)

// Code is the status code of an rpc's failure, carried by an error reply
// (docs/wire.md, "Status codes"). Codes 1 to 16 are the canonical ones, with
// gRPC's numbers and meanings; 17 to 999 are reserved for more of them;
// from 1000 up (CodeApplication) they are an application's own, which
// travel intact. 0 is success and never sent.
//
// A Code is an error: a handler may return one (or wrap one) to fail with
// it, and errors.Is(err, code) matches an rpc's error reply of that code.
type Code uint64

// The canonical codes, as gRPC's codes package numbers them.
const (
	CodeOK                 Code = 0  // not an error; never sent
	CodeCanceled           Code = 1  // the caller gave up
	CodeUnknown            Code = 2  // an error that says nothing more
	CodeInvalidArgument    Code = 3  // the arguments are wrong, whatever the state
	CodeDeadlineExceeded   Code = 4  // the deadline passed before the work was done
	CodeNotFound           Code = 5  // something asked for does not exist
	CodeAlreadyExists      Code = 6  // something to be created exists already
	CodePermissionDenied   Code = 7  // the caller may not do this
	CodeResourceExhausted  Code = 8  // a quota or a limit was reached
	CodeFailedPrecondition Code = 9  // the state does not allow it (do not retry as is)
	CodeAborted            Code = 10 // a conflict, such as a failed transaction (retry higher up)
	CodeOutOfRange         Code = 11 // past the valid range (an offset past the end)
	CodeUnimplemented      Code = 12 // the server does not implement the rpc
	CodeInternal           Code = 13 // an invariant broke in the server
	CodeUnavailable        Code = 14 // the service cannot be reached now (retry later)
	CodeDataLoss           Code = 15 // data were lost or corrupted for good
	CodeUnauthenticated    Code = 16 // the caller's identity could not be established
	// CodeApplication is the first of the codes an application defines.
	CodeApplication Code = 1000
)

var codeNames = [...]string{
	CodeOK:                 "ok",
	CodeCanceled:           "canceled",
	CodeUnknown:            "unknown",
	CodeInvalidArgument:    "invalid argument",
	CodeDeadlineExceeded:   "deadline exceeded",
	CodeNotFound:           "not found",
	CodeAlreadyExists:      "already exists",
	CodePermissionDenied:   "permission denied",
	CodeResourceExhausted:  "resource exhausted",
	CodeFailedPrecondition: "failed precondition",
	CodeAborted:            "aborted",
	CodeOutOfRange:         "out of range",
	CodeUnimplemented:      "unimplemented",
	CodeInternal:           "internal",
	CodeUnavailable:        "unavailable",
	CodeDataLoss:           "data loss",
	CodeUnauthenticated:    "unauthenticated",
}

// Canonical reports whether c is one of the canonical codes (0 to 16).
func (c Code) Canonical() bool { return c < Code(len(codeNames)) }

// String returns a canonical code's name ("not found"), and "code N" for
// any other.
func (c Code) String() string {
	if c.Canonical() {
		return codeNames[c]
	}
	return "code " + strconv.FormatUint(uint64(c), 10)
}

// Error returns c's String, so that a handler can return c itself.
func (c Code) Error() string { return c.String() }

// RemoteError is an rpc's failure as reported by the server in an error
// reply: the code and detail of the reply's status (docs/wire.md). A
// handler may also return one, as Errorf makes, to choose the code.
// errors.Is(err, code) reports whether a RemoteError has that Code.
type RemoteError struct {
	// Msg is the rpc, like "kv.get"; "" in an error a handler made.
	Msg string
	// Code is the failure's code (a Code). 0, which no reply carries,
	// is taken as CodeUnknown, as the error reply made of it says.
	Code wire.Errval
	// Detail is the server's description of the failure.
	Detail string
}

// Error formats e as, for example, "kv.get: not found: no such key", or
// "kv.get: code 1001: no such shelf" for an application's code.
func (e *RemoteError) Error() string {
	s := e.code().String()
	if e.Msg != "" {
		s = e.Msg + ": " + s
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is reports whether target is the Code of e.
func (e *RemoteError) Is(target error) bool {
	c, ok := target.(Code)
	return ok && e.code() == c
}

// code is e's Code: a failure, so never CodeOK, which a handler's error
// made with that code would otherwise show to the serving side's
// interceptors while its caller got CodeUnknown.
func (e *RemoteError) code() Code {
	if e.Code == 0 {
		return CodeUnknown
	}
	return Code(e.Code)
}

// CodeOf returns the code of err: CodeOK for nil; the code of an error
// reply (a *RemoteError) or of a Code that err wraps; CodeCanceled and
// CodeDeadlineExceeded for the context's errors; CodeUnimplemented for
// errors.ErrUnsupported; CodeUnavailable for the end of the connection;
// CodeInternal for a protocol violation; CodeInvalidArgument for a value
// refused on its way into a frame (a *wire.Error with Encoding set: the
// sender's mistake); CodeInternal for any other wire.ErrMalformed (a
// frame that does not decode); and CodeUnknown for any other error.
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	var re *RemoteError
	if errors.As(err, &re) {
		return re.code()
	}
	var c Code
	if errors.As(err, &c) && c != CodeOK {
		return c
	}
	switch {
	case errors.Is(err, context.Canceled):
		return CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return CodeDeadlineExceeded
	case errors.Is(err, errors.ErrUnsupported):
		return CodeUnimplemented
	case errors.Is(err, interconnect.ErrProtocol):
		return CodeInternal
	case encodingFault(err):
		return CodeInvalidArgument
	case errors.Is(err, wire.ErrMalformed):
		return CodeInternal
	case interconnect.IsEnd(err):
		return CodeUnavailable
	}
	return CodeUnknown
}

// encodingFault reports whether err is a value's refusal on its way into
// a frame (wire.Error.Encoding).
func encodingFault(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Encoding
}

// statusOf makes the status of the error reply that answers a handler's
// err: its code as CodeOf says (CodeUnknown for an unknown error), and as
// detail the detail of a *RemoteError returned as is, or else err's text,
// less the text of a code (or of a handler's error of a code) it wraps.
// A Code returned as is has no detail: its name says it all.
func statusOf(err error) wire.Status {
	code := CodeOf(err)
	if code == CodeOK {
		code = CodeUnknown
	}
	st := wire.Status{Code: wire.Errval(code)}
	switch e := err.(type) {
	case *RemoteError:
		st.Detail = e.Detail
	case Code:
	default:
		st.Detail = err.Error()
		// The caller prints the code before the detail: the text of the
		// code, or of a handler's error of a code, that err wraps is not
		// said again ("shelf 3: out of range" goes as "shelf 3").
		var re *RemoteError
		var c Code
		switch {
		case errors.As(err, &re) && re.Msg == "":
			st.Detail = strings.Replace(st.Detail, re.Error(), re.Detail, 1)
		case errors.As(err, &c):
			st.Detail = strings.TrimSuffix(st.Detail, ": "+c.Error())
		}
	}
	return st
}
