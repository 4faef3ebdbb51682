package chanos

import (
	"context"
	"time"

	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/wire"
)

// LocalPair returns both ends of a local connection, for tests.
func LocalPair(iface Interface) (*Conn, *Conn) {
	a, b := localPair()
	return newConn(a, iface, nil), newConn(b, iface, nil)
}

// UMPPair returns both ends of a ump connection within this process.
func UMPPair(iface Interface) (*Conn, *Conn, error) {
	a, b, err := ump.Pipe(&ump.Options{MaxMessageSize: iface.MaxFrameSize})
	if err != nil {
		return nil, nil, err
	}
	return NewConn(a, iface), NewConn(b, iface), nil
}

// loopLink is a link whose peer is a function: each frame sent is answered
// by next's result, which the following receive returns; nil ends the
// connection. It measures the connection layer without an interconnect.
type loopLink struct {
	next  func(sent []byte) []byte
	frame []byte
}

func (l *loopLink) kind() string { return "ump" }
func (l *loopLink) sendFrame(_ context.Context, frame []byte, _ []wire.Cap) error {
	l.frame = l.next(frame)
	return nil
}
func (l *loopLink) trySendFrame(frame []byte, caps []wire.Cap) (bool, error) {
	return true, l.sendFrame(context.Background(), frame, caps)
}
func (l *loopLink) sendValue(context.Context, wire.Message) error { return nil }
func (l *loopLink) receive(_ context.Context, in *Incoming) error {
	f := l.frame
	if f == nil {
		*in = Incoming{}
		return &endError{kind: ErrClosed}
	}
	k, err := wire.ParseFrameInto(&in.Header, f)
	in.Kind, in.Frame, in.Caps, in.Msg, in.Inline = k, f, nil, nil, false
	return err
}
func (l *loopLink) close() error { return nil }

// LoopConn returns a connection whose peer is next: see loopLink. first is
// the first frame to receive, or nil.
func LoopConn(iface Interface, first []byte, next func(sent []byte) []byte) *Conn {
	return newConn(&loopLink{next: next, frame: first}, iface, nil)
}

// SpinWindowOf returns the spin window of c's ring pair, or -1 if c is
// not over ump.
func SpinWindowOf(c *Conn) time.Duration {
	if l, ok := c.l.(*umpLink); ok {
		return l.u.SpinWindow()
	}
	return -1
}
