// Package seqpacket carries wire frames, with file descriptors beside them,
// over Unix SOCK_SEQPACKET sockets: the control path between a domain and
// its monitor. A seqpacket socket keeps message boundaries, so one frame is
// one packet, and SCM_RIGHTS attaches the frame's capabilities to it.
//
// Reads and writes go through the Go runtime's netpoller (net.UnixConn), so
// a goroutine waiting for a packet parks without holding an OS thread.
package seqpacket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/chanos/chanos/wire"
)

// MaxCaps is the most descriptors one packet carries: the kernel's
// SCM_MAX_FD.
const MaxCaps = 253

// Errors, matchable with errors.Is.
var (
	// ErrTooLarge: a packet was larger than the receive buffer, or a frame
	// to send is larger than the connection allows.
	ErrTooLarge = errors.New("packet too large")
	// ErrTooManyCaps: more descriptors than MaxCaps, or than the
	// receiver had room for.
	ErrTooManyCaps = errors.New("too many descriptors")
	// ErrNotFD: a capability to send has no file descriptor.
	ErrNotFD = errors.New("capability has no file descriptor")
)

// Conn is one end of a seqpacket connection. Send may be called from
// several goroutines; Receive from one at a time.
type Conn struct {
	uc      *net.UnixConn
	maxSize int // largest frame received
	maxSend int // largest frame sent; maxSize unless SetSendLimit
	wmu     sync.Mutex
	rbuf    []byte
	oob     []byte
}

// New wraps a connected seqpacket socket. maxSize bounds the frames it
// receives and sends.
func New(uc *net.UnixConn, maxSize int) *Conn {
	return &Conn{
		uc:      uc,
		maxSize: maxSize,
		maxSend: maxSize,
		rbuf:    make([]byte, maxSize+1), // one spare byte detects oversize packets
		oob:     make([]byte, syscall.CmsgSpace(MaxCaps*4)),
	}
}

// Dial connects to the seqpacket socket at path.
func Dial(ctx context.Context, path string, maxSize int) (*Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, err
	}
	return New(c.(*net.UnixConn), maxSize), nil
}

// Pair returns two connected ends of a new seqpacket socket pair, as
// files: one to keep, one to hand to another process.
func Pair() (a, b *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "seqpacket"), os.NewFile(uintptr(fds[1]), "seqpacket"), nil
}

// FromFile turns a seqpacket socket file into a Conn. The file is not
// consumed: the caller still closes it.
func FromFile(f *os.File, maxSize int) (*Conn, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%s is not a Unix socket", f.Name())
	}
	return New(uc, maxSize), nil
}

// SetSendLimit sets the largest frame Send accepts, which by default is
// the receive limit given to New. A server that receives small requests
// but sends large replies (the monitor) sets them apart, so that it does
// not keep a receive buffer as large as its largest reply.
func (c *Conn) SetSendLimit(n int) {
	c.wmu.Lock()
	c.maxSend = n
	c.wmu.Unlock()
}

// UnixConn returns the underlying socket.
func (c *Conn) UnixConn() *net.UnixConn { return c.uc }

// Close closes the connection.
func (c *Conn) Close() error { return c.uc.Close() }

// Send sends one frame with caps attached, waiting for room in the
// peer's receive queue. The caps stay the caller's: the kernel duplicates
// the descriptors into the packet.
func (c *Conn) Send(frame []byte, caps []wire.Cap) error {
	_, err := c.send(frame, caps, true)
	return err
}

// TrySend is Send without the wait: it reports false, having sent
// nothing, when the peer's receive queue is full.
func (c *Conn) TrySend(frame []byte, caps []wire.Cap) (bool, error) {
	return c.send(frame, caps, false)
}

func (c *Conn) send(frame []byte, caps []wire.Cap, wait bool) (bool, error) {
	if len(caps) > MaxCaps {
		return false, fmt.Errorf("send %d descriptors: %w (limit %d)", len(caps), ErrTooManyCaps, MaxCaps)
	}
	var oob []byte
	if len(caps) > 0 {
		fds := make([]int, len(caps))
		for i, cp := range caps {
			fd, err := capFD(cp)
			if err != nil {
				return false, err
			}
			fds[i] = fd
		}
		oob = syscall.UnixRights(fds...)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(frame) > c.maxSend {
		return false, fmt.Errorf("send %d bytes: %w (limit %d)", len(frame), ErrTooLarge, c.maxSend)
	}
	var n int
	var err error
	if wait {
		n, _, err = c.uc.WriteMsgUnix(frame, oob, nil)
	} else {
		rc, rerr := c.uc.SyscallConn()
		if rerr != nil {
			return false, rerr
		}
		if rerr = rc.Write(func(fd uintptr) bool {
			n, err = syscall.SendmsgN(int(fd), frame, oob, nil, syscall.MSG_DONTWAIT)
			return true // one try, whatever it gave
		}); rerr != nil {
			return false, rerr
		}
		if errors.Is(err, syscall.EAGAIN) {
			return false, nil
		}
	}
	if err != nil {
		return false, err
	}
	if n != len(frame) {
		return false, fmt.Errorf("short write: %d of %d bytes", n, len(frame))
	}
	return true, nil
}

// capFD returns the descriptor of a capability: through SyscallConn for
// files and sockets ((*os.File).Fd would switch the open file description,
// which the peer shares, to blocking mode), else through Fd() uintptr.
func capFD(c wire.Cap) (int, error) {
	switch v := c.(type) {
	case syscall.Conn:
		rc, err := v.SyscallConn()
		if err != nil {
			return -1, err
		}
		fd := -1
		if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
			return -1, err
		}
		return fd, nil
	case interface{ Fd() uintptr }:
		return int(v.Fd()), nil
	}
	return -1, fmt.Errorf("%w: %T", ErrNotFD, c)
}

// Receive reads one packet. The frame is valid until the next Receive; the
// caps are new files the caller owns. At the peer's orderly close or death
// it returns io.EOF.
func (c *Conn) Receive() (frame []byte, caps []wire.Cap, err error) {
	n, oobn, flags, err := c.read()
	if err != nil {
		// The peer's close and its death look the same to a socket.
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return nil, nil, io.EOF
		}
		return nil, nil, err
	}
	files, perr := parseRights(c.oob[:oobn])
	if perr == nil && flags&syscall.MSG_CTRUNC != 0 {
		perr = fmt.Errorf("received descriptors were cut short: %w", ErrTooManyCaps)
	}
	if perr == nil && (n > c.maxSize || flags&syscall.MSG_TRUNC != 0) {
		perr = fmt.Errorf("received packet of more than %d bytes: %w", c.maxSize, ErrTooLarge)
	}
	if perr != nil {
		for _, f := range files {
			f.Close()
		}
		return nil, nil, perr
	}
	if n == 0 && oobn == 0 {
		return nil, nil, io.EOF
	}
	caps = make([]wire.Cap, len(files))
	for i, f := range files {
		caps[i] = f
	}
	return c.rbuf[:n], caps, nil
}

// read reads one packet into c.rbuf and its control message into c.oob.
func (c *Conn) read() (n, oobn, flags int, err error) {
	n, oobn, flags, _, err = c.uc.ReadMsgUnix(c.rbuf, c.oob)
	if !(err == nil && n == 0 && oobn == 0) && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		return n, oobn, flags, err
	}
	// The kernel may report the peer's end before packets the peer sent
	// just before it: on a non-blocking socket it looks at the queue,
	// then at the end, so a packet and the close that come between the
	// two looks read as the end; and the reset of a peer that closed with
	// packets of ours unread comes before the packets it sent. Either way
	// the end is there to stay and nothing more can come, so one more
	// read, which cannot wait, finds what the peer sent, if anything: a
	// monitor's answer to a join it refuses, say, which it sends just
	// before it closes the connection.
	rc, rerr := c.uc.SyscallConn()
	if rerr != nil {
		return n, oobn, flags, err
	}
	var n2, oobn2, flags2 int
	var err2 error
	if rerr := rc.Read(func(fd uintptr) bool {
		n2, oobn2, flags2, _, err2 = syscall.Recvmsg(int(fd), c.rbuf, c.oob, syscall.MSG_DONTWAIT|syscall.MSG_CMSG_CLOEXEC)
		return true // one try: the end has been seen
	}); rerr != nil || err2 != nil || (n2 == 0 && oobn2 == 0) {
		return n, oobn, flags, err
	}
	return n2, oobn2, flags2, nil
}

func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control message: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		if m.Header.Level != syscall.SOL_SOCKET || m.Header.Type != syscall.SCM_RIGHTS {
			continue
		}
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("control message: %w", err)
		}
		// Close-on-exec already: on Linux ReadMsgUnix receives with
		// MSG_CMSG_CLOEXEC, so no child forked meanwhile inherits them.
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "cap"))
		}
	}
	return files, nil
}

// PeerCred returns the credentials the kernel recorded for the peer when
// the connection was made (SO_PEERCRED): they cannot be forged by the peer.
func (c *Conn) PeerCred() (*syscall.Ucred, error) {
	rc, err := c.uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, serr
}

// Listener accepts seqpacket connections on a socket file.
type Listener struct {
	ul      *net.UnixListener
	path    string
	maxSize int
}

// Listen creates a seqpacket socket at path, readable and writable by its
// owner only (mode 0600). The socket is bound and listening, with its
// mode set, under a temporary name in the same directory before it is
// linked to path, so a client that finds path never meets a socket that
// refuses connections or has a looser mode. A stale socket file left by a
// dead process is replaced.
func Listen(path string, maxSize int) (*Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.Dial("unixpacket", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen %s: %w", path, ErrInUse)
		}
		os.Remove(path)
	}
	// Short, so that it fits in a socket address wherever path does.
	tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".l%d", os.Getpid()))
	os.Remove(tmp) // left by a process of ours that died (pids are reused)
	ul, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: tmp, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	ul.SetUnlinkOnClose(false)
	err = os.Chmod(tmp, 0o600)
	if err == nil {
		// A link, not a rename: it fails if another process took path
		// meanwhile, rather than taking it from that process.
		if err = os.Link(tmp, path); errors.Is(err, fs.ErrExist) {
			err = fmt.Errorf("listen %s: %w", path, ErrInUse)
		}
	}
	os.Remove(tmp)
	if err != nil {
		ul.Close()
		return nil, err
	}
	return &Listener{ul: ul, path: path, maxSize: maxSize}, nil
}

// ErrInUse: another live process listens on the socket path.
var ErrInUse = errors.New("socket in use by a running process")

// Accept waits for the next connection.
func (l *Listener) Accept() (*Conn, error) {
	uc, err := l.ul.AcceptUnix()
	if err != nil {
		return nil, err
	}
	return New(uc, l.maxSize), nil
}

// Close stops listening and removes the socket file.
func (l *Listener) Close() error {
	err := l.ul.Close()
	os.Remove(l.path)
	return err
}

// Addr returns the socket path.
func (l *Listener) Addr() string { return l.path }
