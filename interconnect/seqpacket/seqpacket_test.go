package seqpacket

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/chanos/chanos/wire"
)

func pair(t *testing.T, max int) (*Conn, *Conn) {
	t.Helper()
	fa, fb, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	defer fb.Close()
	a, err := FromFile(fa, max)
	if err != nil {
		t.Fatal(err)
	}
	b, err := FromFile(fb, max)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestFramesAndCaps(t *testing.T) {
	a, b := pair(t, 1024)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := a.Send([]byte("hello"), []wire.Cap{w}); err != nil {
		t.Fatal(err)
	}
	frame, caps, err := b.Receive()
	if err != nil || string(frame) != "hello" || len(caps) != 1 {
		t.Fatalf("got %q %v %v", frame, caps, err)
	}
	// The received descriptor is a working duplicate of the pipe's end,
	// close-on-exec from its arrival: a child forked meanwhile must not
	// inherit it.
	got := caps[0].(*os.File)
	rc, err := got.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	fdFlags, ferr := 0, error(nil)
	rc.Control(func(fd uintptr) { fdFlags, ferr = unix.FcntlInt(fd, unix.F_GETFD, 0) })
	if ferr != nil || fdFlags&unix.FD_CLOEXEC == 0 {
		t.Errorf("received descriptor's flags %#x, %v: want FD_CLOEXEC", fdFlags, ferr)
	}
	if _, err := got.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	got.Close()
	buf := make([]byte, 1)
	if _, err := r.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("pipe read %q %v", buf, err)
	}
}

func TestLimits(t *testing.T) {
	a, b := pair(t, 8)
	if err := a.Send(bytes.Repeat([]byte{1}, 9), nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize send: %v", err)
	}
	// A peer with a larger limit sends a packet too big for b.
	fa, fb, _ := Pair()
	defer fa.Close()
	defer fb.Close()
	big, _ := FromFile(fa, 64)
	small, _ := FromFile(fb, 8)
	defer big.Close()
	defer small.Close()
	big.Send(bytes.Repeat([]byte{1}, 20), nil)
	if _, _, err := small.Receive(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversize receive: %v", err)
	}
	a.Close()
	if _, _, err := b.Receive(); err != io.EOF {
		t.Fatalf("after close: %v", err)
	}
	if err := a.Send([]byte("x"), []wire.Cap{notFD{}}); err == nil {
		t.Fatal("cap without fd accepted")
	}
}

type notFD struct{}

func (notFD) Close() error { return nil }

func TestListenDialPeerCred(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	l, err := Listen(path, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v", fi.Mode().Perm())
	}
	if _, err := Listen(path, 64); !errors.Is(err, ErrInUse) {
		t.Errorf("second listen: %v", err)
	}
	done := make(chan *Conn)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		done <- c
	}()
	c, err := Dial(context.Background(), path, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := <-done
	defer s.Close()
	cred, err := s.PeerCred()
	if err != nil || int(cred.Uid) != os.Getuid() || int(cred.Pid) != os.Getpid() {
		t.Fatalf("cred %+v %v", cred, err)
	}
}

func TestSendLimitApart(t *testing.T) {
	a, b := pair(t, 8)
	a.SetSendLimit(64)
	if err := a.Send(bytes.Repeat([]byte{1}, 64), nil); err != nil {
		t.Fatalf("send within the send limit: %v", err)
	}
	if err := a.Send(bytes.Repeat([]byte{1}, 65), nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("send over the send limit: %v", err)
	}
	// b still receives with its own, smaller limit.
	if _, _, err := b.Receive(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("receive over the receive limit: %v", err)
	}
}

// TestListenAppearsReady checks that the socket file only appears once it
// accepts connections (it is linked into place after listen(2)), that no
// temporary name is left behind, and that Close removes the file.
func TestListenAppearsReady(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.sock")
	ready := make(chan error, 1)
	go func() {
		// Dial the moment the file exists: before the fix, the file
		// appeared at bind(2) and a dial could be refused.
		for {
			if _, err := os.Lstat(path); err == nil {
				c, err := Dial(context.Background(), path, 64)
				if err == nil {
					c.Close()
				}
				ready <- err
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	l, err := Listen(path, 64)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("dial as soon as the socket file appeared: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "m.sock" {
		t.Errorf("directory holds %v, want only m.sock", entries)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close, the socket file: %v", err)
	}
}

// A peer that answers and closes with a packet of ours unread: the kernel
// reports the reset before the answer, which Receive still returns, then
// the end.
func TestReceiveAnswerBeforeReset(t *testing.T) {
	for _, unread := range []bool{false, true} {
		a, b := pair(t, 64)
		if unread {
			if err := b.Send([]byte("never read"), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Send([]byte("answer"), nil); err != nil {
			t.Fatal(err)
		}
		a.Close()
		frame, _, err := b.Receive()
		if err != nil || string(frame) != "answer" {
			t.Fatalf("unread %v: Receive = %q, %v; want the answer", unread, frame, err)
		}
		if _, _, err := b.Receive(); !errors.Is(err, io.EOF) {
			t.Fatalf("unread %v: Receive after the answer = %v, want io.EOF", unread, err)
		}
	}
}
