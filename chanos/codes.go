package chanos

import (
	"fmt"

	"github.com/chanos/chanos/chanos/internal/engine"
	"github.com/chanos/chanos/wire"
)

// Code is the status code of an rpc's failure, carried by its error reply
// (docs/wire.md, "Status codes"). Codes 1 to 16 are the canonical ones,
// numbered and meant as gRPC's; 17 to 999 are reserved; from
// CodeApplication (1000) up, codes are an application's own and travel
// intact. CodeOK (0) is never sent.
//
// A Code is an error: a handler may return one, alone or wrapped, to fail
// with it, and errors.Is(err, CodeNotFound) reports whether err is (or
// wraps) an error reply with that code, or the Code itself.
type Code = engine.Code

// The canonical codes (gRPC's codes.Code, by number and meaning).
const (
	// CodeOK is success; it is never sent, and CodeOf(nil) returns it.
	CodeOK = engine.CodeOK
	// CodeCanceled: the caller gave up (its context was canceled).
	CodeCanceled = engine.CodeCanceled
	// CodeUnknown: an error that says nothing more, as a handler's error
	// that carries no code.
	CodeUnknown = engine.CodeUnknown
	// CodeInvalidArgument: the arguments are wrong whatever the state
	// (a malformed name, a negative size).
	CodeInvalidArgument = engine.CodeInvalidArgument
	// CodeDeadlineExceeded: the deadline passed before the work was done.
	CodeDeadlineExceeded = engine.CodeDeadlineExceeded
	// CodeNotFound: something the call names does not exist.
	CodeNotFound = engine.CodeNotFound
	// CodeAlreadyExists: something the call would create exists already.
	CodeAlreadyExists = engine.CodeAlreadyExists
	// CodePermissionDenied: the caller may not do this.
	CodePermissionDenied = engine.CodePermissionDenied
	// CodeResourceExhausted: a quota or limit was reached.
	CodeResourceExhausted = engine.CodeResourceExhausted
	// CodeFailedPrecondition: the state does not allow the call; do not
	// retry it until the state has changed.
	CodeFailedPrecondition = engine.CodeFailedPrecondition
	// CodeAborted: a conflict, such as a failed transaction; retry the
	// larger operation.
	CodeAborted = engine.CodeAborted
	// CodeOutOfRange: past the valid range, such as an offset past the end.
	CodeOutOfRange = engine.CodeOutOfRange
	// CodeUnimplemented: the server does not implement the rpc (a
	// generated Unimplemented server's answer).
	CodeUnimplemented = engine.CodeUnimplemented
	// CodeInternal: an invariant broke in the server, such as a reply it
	// could not encode.
	CodeInternal = engine.CodeInternal
	// CodeUnavailable: the service cannot be reached now; CodeOf returns
	// it for the end of a connection. Retrying later may succeed.
	CodeUnavailable = engine.CodeUnavailable
	// CodeDataLoss: data were lost or corrupted for good.
	CodeDataLoss = engine.CodeDataLoss
	// CodeUnauthenticated: the caller's identity could not be established.
	CodeUnauthenticated = engine.CodeUnauthenticated
	// CodeApplication is the first code of the range left to
	// applications: an interface's own failures, numbered from here up,
	// never collide with a canonical code.
	CodeApplication = engine.CodeApplication
)

// RemoteError is an rpc's failure as reported by the server in an error
// reply: the code and detail of the reply's status (docs/wire.md). Errorf
// and Error make one for a handler to return. errors.Is(err, code)
// matches its Code. Its fields: Msg (the rpc, "kv.get"; "" in one a
// handler made), Code (0 is taken as CodeUnknown) and Detail (the
// server's description).
type RemoteError = engine.RemoteError

// Error returns an error with code and the detail msg, for an rpc handler
// to return: its caller receives an error reply with that code and
// detail. CodeOK, which no failure has, is taken as CodeUnknown, for the
// handler's interceptors as for its caller.
func Error(code Code, msg string) error {
	if code == CodeOK {
		code = CodeUnknown
	}
	return &RemoteError{Code: wire.Errval(code), Detail: msg}
}

// Errorf is Error with the detail formatted as by fmt.Sprintf. To keep an
// error's chain, wrap the result instead (fmt.Errorf("...: %w", Error(...))):
// the reply then carries the whole text as its detail.
func Errorf(code Code, format string, args ...any) error {
	return Error(code, fmt.Sprintf(format, args...))
}

// CodeOf returns the code of err: CodeOK for nil; the code of an error
// reply (a *RemoteError) or of a Code that err is or wraps; CodeCanceled
// and CodeDeadlineExceeded for the context's errors (Call returns them when
// its context ends first); CodeUnimplemented for errors.ErrUnsupported (a
// generated UnimplementedServer's); CodeUnavailable for the end of the
// connection (ErrClosed, ErrPeerDied, ErrNetworkLost);
// CodeInvalidArgument for a call or message of this side's that breaks a
// bound of the interface, refused before it is sent (wire.ErrBound, say,
// which it still matches); CodeInternal for a protocol violation and for a
// frame that does not decode (wire.ErrMalformed); CodeUnknown for any
// other error. A handler's reply past its bounds reaches its caller as
// CodeInternal: the server broke the interface, not the caller. A handler's error is sent with the code CodeOf gives
// it.
func CodeOf(err error) Code { return engine.CodeOf(err) }
