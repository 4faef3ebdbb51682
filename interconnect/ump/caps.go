package ump

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/chanos/chanos/wire"
)

// This file turns a ring pair into capabilities that travel in a message
// (the monitor's bind reply and incoming message), and back.

// CapCount is the number of descriptors that describe a ump connection in a
// bind reply or an incoming message: the ring pair's memfd, the side's
// data and space wake-up sockets, its caps socket and its liveness
// socket, in that order.
const CapCount = 5

// fdCap is a raw descriptor as a wire.Cap. Its Fd method lets seqpacket send
// it without the side effect of (*os.File).Fd, which would switch the
// descriptor to blocking.
type fdCap struct{ fd int }

func (c *fdCap) Fd() uintptr { return uintptr(c.fd) }

func (c *fdCap) Close() error {
	if c.fd < 0 {
		return nil
	}
	err := syscall.Close(c.fd)
	c.fd = -1
	return err
}

// dupFD duplicates fd, close-on-exec.
func dupFD(fd int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", e)
	}
	return int(r), nil
}

// Caps returns the capabilities for side's end of a ump connection: a
// duplicate of the ring pair's memfd and side's wake-up sockets, which f
// gives up, then sock, side's end of the liveness socket (an end of
// LivenessPair, or of SocketPair), which the capabilities take over. Only
// side's own wake-up sockets leave: each side of a connection gets its
// own.
func Caps(f *Files, side Side, sock wire.Cap) ([]wire.Cap, error) {
	if side != Creator && side != Attacher {
		sock.Close()
		return nil, fmt.Errorf("ump: bad side %d", side)
	}
	g, err := f.take(side)
	if err != nil {
		sock.Close()
		return nil, err
	}
	return []wire.Cap{&fdCap{g.Mem}, &fdCap{g.Wake[side][wakeData]}, &fdCap{g.Wake[side][wakeSpace]}, &fdCap{g.Caps[side]}, sock}, nil
}

// takeFD returns a descriptor of its own for a received capability and
// closes the capability.
func takeFD(c wire.Cap) (int, error) {
	defer c.Close()
	return wire.DupFD(c)
}

// OpenCaps opens side's end of a ump connection from the CapCount
// descriptors of a bind reply (side Attacher) or an incoming message (side
// Creator): memfd, data and space wake-up sockets, caps socket and
// liveness socket. It takes
// ownership of fds, closing them on failure too. o should set
// MaxMessageSize to the interface's MaxFrameSize, so that a ring pair
// larger than the interface needs is refused.
func OpenCaps(side Side, fds []wire.Cap, o *Options) (*Conn, error) {
	if len(fds) != CapCount {
		wire.CloseCaps(fds)
		return nil, fmt.Errorf("ump: a ump connection needs %d descriptors, got %d", CapCount, len(fds))
	}
	if side != Creator && side != Attacher {
		wire.CloseCaps(fds)
		return nil, fmt.Errorf("ump: bad side %d", side)
	}
	f := noFiles()
	var errs []error
	for i, c := range fds[:CapCount-1] {
		fd, err := takeFD(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("descriptor %d: %w", i, err))
			continue
		}
		switch i {
		case 0:
			f.Mem = fd
		case 1, 2:
			f.Wake[side][i-1] = fd
		case 3:
			f.Caps[side] = fd
		}
	}
	sf, ok := fds[CapCount-1].(*os.File)
	if !ok {
		fds[CapCount-1].Close()
		errs = append(errs, fmt.Errorf("liveness socket is a %T, not a file", fds[CapCount-1]))
	}
	if len(errs) > 0 {
		f.Close()
		if ok {
			sf.Close()
		}
		return nil, fmt.Errorf("ump: open ump connection: %w", errors.Join(errs...))
	}
	sock, err := FileConn(sf)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ump: open ump connection: liveness socket: %w", err)
	}
	c, err := Open(side, f, sock, o)
	if err != nil {
		return nil, fmt.Errorf("ump: open ump connection: %w", err)
	}
	return c, nil
}
