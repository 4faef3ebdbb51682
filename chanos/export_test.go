package chanos

import (
	"context"
	"time"

	"github.com/chanos/chanos/chanos/internal/engine"
	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/interconnect/local"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/wire"
)

// LocalPair returns both ends of a local connection, for tests.
func LocalPair(iface Interface) (*Conn, *Conn) {
	a, b := local.Pair()
	return NewConn(a, iface), NewConn(b, iface)
}

// UMPPair returns both ends of a ump connection within this process.
func UMPPair(iface Interface) (*Conn, *Conn, error) {
	a, b, err := ump.Pipe(&ump.Options{MaxMessageSize: iface.MaxFrameSize})
	if err != nil {
		return nil, nil, err
	}
	return NewConn(ump.NewLink(a), iface), NewConn(ump.NewLink(b), iface), nil
}

// loopLink is a link whose peer is a function: each frame sent is answered
// by next's result, which the following receive returns; nil ends the
// connection. It measures the connection layer without an interconnect.
// next must not keep sent: a Link keeps nothing it is given to send.
type loopLink struct {
	next  func(sent []byte) []byte
	frame []byte
}

func (l *loopLink) Kind() string { return "loop" }
func (l *loopLink) SendFrame(_ context.Context, frame []byte, _ []wire.Cap) error {
	l.frame = l.next(frame)
	return nil
}
func (l *loopLink) TrySendFrame(frame []byte, caps []wire.Cap) (bool, error) {
	return true, l.SendFrame(context.Background(), frame, caps)
}
func (l *loopLink) Receive(_ context.Context, in *Incoming) error {
	f := l.frame
	if f == nil {
		*in = Incoming{}
		return interconnect.Ended(ErrClosed, nil)
	}
	return in.SetFrame(f, nil)
}
func (l *loopLink) Close() error { return nil }

// LoopConn returns a connection whose peer is next: see loopLink. first is
// the first frame to receive, or nil.
func LoopConn(iface Interface, first []byte, next func(sent []byte) []byte) *Conn {
	return NewConn(&loopLink{next: next, frame: first}, iface)
}

// SpinWindowOf returns the spin window of c's ring pair, or -1 if c is
// not over ump.
func SpinWindowOf(c *Conn) time.Duration {
	if l, ok := (*engine.Conn)(c).Link().(*ump.Link); ok {
		return l.Conn().SpinWindow()
	}
	return -1
}

// InboxFullAndWaiting reports whether c's inbox is full and a goroutine
// waits for room in it: a Call that read past the messages to its reply.
func InboxFullAndWaiting(c *Conn) bool {
	_, full, waiting := (*engine.Conn)(c).Backlog()
	return full && waiting > 0
}

// InboxLen reports how many received messages wait in c's inbox.
func InboxLen(c *Conn) int {
	n, _, _ := (*engine.Conn)(c).Backlog()
	return n
}
