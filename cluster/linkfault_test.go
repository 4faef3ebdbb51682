package cluster

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/internal/testkit"
)

// flakyListener fails its first Accepts with the errors of errs, as a
// TCP listener reports them, then accepts as ln does.
type flakyListener struct {
	net.Listener
	mu   sync.Mutex
	errs []syscall.Errno
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.errs) > 0 {
		e := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", e)}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// TestListenerSurvivesAcceptErrors: a listener whose accept fails for want
// of descriptors or buffers, or on a connection aborted before it was
// taken, logs it and goes on accepting; only Close ends it.
func TestListenerSurvivesAcceptErrors(t *testing.T) {
	root := newRoot(t, "lab")
	a, b := newMachine(t, root, "alpha"), newMachine(t, root, "beta")
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	flaky := &flakyListener{Listener: raw,
		errs: []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED, syscall.ENOBUFS}}
	ln := serveListener(flaky, b.id, b.opts().withDefaults())
	defer ln.Close()

	ctx := testkit.Context(t)
	accepted := make(chan error, 1)
	go func() {
		l, err := ln.Accept(ctx)
		if err == nil {
			l.Close()
		}
		accepted <- err
	}()
	d, err := Dial(ctx, ln.Addr().String(), a.id, a.opts())
	if err != nil {
		t.Fatalf("dial after the listener's accept failed: %v\nlistener's log:\n%s", err, b.log.String())
	}
	d.Close()
	if err := <-accepted; err != nil {
		t.Fatalf("accept: %v", err)
	}
	b.log.waitLog(t, "cluster accept failed", "too many open files")
	b.log.waitLog(t, "cluster accept failed", "connection abort")

	ln.Close()
	if _, err := ln.Accept(ctx); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept on a closed listener = %v, want net.ErrClosed", err)
	}
}

// cutConn is a connection whose reads (or writes, if write) can be made
// to meet the end of their context just as they complete: once armed,
// the first read or write that moves bytes calls cancel and returns only
// when the link's deadline for it has begun to be set in the past. That
// deadline is held back until the link clears it (it then lands after
// the clearing, as it may when the two race) or for a while, and landed
// is closed once it is set.
type cutConn struct {
	net.Conn
	write bool

	mu      sync.Mutex
	cancel  func()
	started chan struct{}
	release chan struct{}
	landed  chan struct{}
	once    [3]sync.Once
}

func (c *cutConn) arm(cancel func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancel = cancel
	c.started, c.release, c.landed = make(chan struct{}), make(chan struct{}), make(chan struct{})
}

func (c *cutConn) fire(n int) {
	c.mu.Lock()
	cancel, started := c.cancel, c.started
	if n > 0 {
		c.cancel = nil
	}
	c.mu.Unlock()
	if cancel != nil && n > 0 {
		cancel()
		<-started
	}
}

func (c *cutConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.write {
		c.fire(n)
	}
	return n, err
}

func (c *cutConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if c.write {
		c.fire(n)
	}
	return n, err
}

func (c *cutConn) SetReadDeadline(t time.Time) error {
	if c.write {
		return c.Conn.SetReadDeadline(t)
	}
	return c.deadline(t, c.Conn.SetReadDeadline)
}

func (c *cutConn) SetWriteDeadline(t time.Time) error {
	if !c.write {
		return c.Conn.SetWriteDeadline(t)
	}
	return c.deadline(t, c.Conn.SetWriteDeadline)
}

func (c *cutConn) deadline(t time.Time, set func(time.Time) error) error {
	c.mu.Lock()
	started, release, landed := c.started, c.release, c.landed
	c.mu.Unlock()
	if started == nil {
		return set(t)
	}
	if t.IsZero() {
		err := set(t)
		c.once[1].Do(func() { close(release) })
		return err
	}
	held := false
	c.once[0].Do(func() { held = true })
	if !held {
		return set(t)
	}
	close(started)
	select {
	case <-release:
	case <-time.After(100 * time.Millisecond):
	}
	err := set(t)
	c.once[2].Do(func() { close(landed) })
	return err
}

// cutPair returns a link from a to b over a cutConn, and b's end.
func cutPair(t *testing.T, a, b *machine, write bool) (*Link, *cutConn, *Link) {
	t.Helper()
	ctx := testkit.Context(t)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	type result struct {
		l   *Link
		err error
	}
	acc := make(chan result, 1)
	go func() {
		c, err := raw.Accept()
		if err != nil {
			acc <- result{nil, err}
			return
		}
		o := b.opts().withDefaults()
		l, err := handshake(ctx, c, b.id, &o, false)
		acc <- result{l, err}
	}()
	c, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc := &cutConn{Conn: c, write: write}
	o := a.opts().withDefaults()
	d, err := handshake(ctx, cc, a.id, &o, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.l.Close() })
	return d, cc, r.l
}

// TestSendAfterLateCancel: a send whose context ends just as its write
// completes has sent its frame, and the link goes on: the next send,
// under a context that never ends, is not cut short by the first one's
// deadline.
func TestSendAfterLateCancel(t *testing.T) {
	root := newRoot(t, "lab")
	a, b := newMachine(t, root, "alpha"), newMachine(t, root, "beta")
	d, cc, acc := cutPair(t, a, b, true)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cc.arm(cancel)
	first, second := frame(1, []byte("first")), frame(2, []byte("second"))
	if err := d.SendFrame(ctx, first, nil); err != nil {
		t.Fatalf("a send whose write completed: %v", err)
	}
	testkit.Await(t, "the first send's deadline to be set", cc.landed)
	if err := d.SendFrame(context.Background(), second, nil); err != nil {
		t.Fatalf("a send after one whose context ended as it completed: %v", err)
	}
	for _, want := range [][]byte{first, second} {
		got, err := receive(t, acc)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("receive = %q, %v; want %q", got, err, want)
		}
	}
}

// TestReceiveAfterLateCancel: a Receive whose context ends just as its
// frame arrives returns the frame, and the next Receive, under a context
// that never ends, is not cut short by the first one's deadline, even if
// that deadline is set only as the first Receive returns.
func TestReceiveAfterLateCancel(t *testing.T) {
	root := newRoot(t, "lab")
	a, b := newMachine(t, root, "alpha"), newMachine(t, root, "beta")
	d, cc, acc := cutPair(t, a, b, false)
	ctx := testkit.Context(t)

	first, second := frame(1, []byte("first")), frame(2, []byte("second"))
	if err := acc.SendFrame(ctx, first, nil); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cc.arm(cancel)
	var in interconnect.Incoming
	if err := d.Receive(rctx, &in); err != nil || !bytes.Equal(in.Frame, first) {
		t.Fatalf("receive = %q, %v; want %q", in.Frame, err, first)
	}
	testkit.Await(t, "the first receive's deadline to be set", cc.landed)
	if err := acc.SendFrame(ctx, second, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Receive(ctx, &in); err != nil || !bytes.Equal(in.Frame, second) {
		t.Fatalf("a receive after one whose context ended as it returned = %q, %v; want %q", in.Frame, err, second)
	}
}
