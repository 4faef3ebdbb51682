package monitor

import (
	"fmt"
	"net"
	"syscall"

	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/wire"
)

// UMPFDs is the number of descriptors that describe a ump connection in a
// bind reply or an incoming message (ump.CapCount).
const UMPFDs = ump.CapCount

// OpenUMP opens side's end of a ump connection from the descriptors of a
// bind reply or incoming message; see ump.OpenCaps.
func OpenUMP(side ump.Side, fds []wire.Cap, o *ump.Options) (*ump.Conn, error) {
	return ump.OpenCaps(side, fds, o)
}

func closeCaps(caps []wire.Cap) { wire.CloseCaps(caps) }

// sockSlack is what the kernel keeps of a socket's send buffer for
// itself: a packet may be at most SO_SNDBUF - 32 bytes.
const sockSlack = 32

// preparePacketSize raises uc's send buffer so that it can carry frames of
// up to want bytes, as far as the system allows (net.core.wmem_max), and
// returns the largest packet it can now send.
func preparePacketSize(uc *net.UnixConn, want int) int {
	uc.SetWriteBuffer(want + sockSlack) // capped by net.core.wmem_max
	rc, err := uc.SyscallConn()
	if err != nil {
		return want
	}
	size := 0
	rc.Control(func(fd uintptr) {
		size, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	})
	if err != nil || size-sockSlack >= want {
		return want
	}
	return max(size-sockSlack, wire.HeaderSize)
}

// sendPacket sends frame with the descriptors of caps attached. The caps
// stay the caller's.
func sendPacket(uc *net.UnixConn, frame []byte, caps []wire.Cap) error {
	var oob []byte
	if len(caps) > 0 {
		fds := make([]int, len(caps))
		for i, c := range caps {
			fd, err := capFD(c)
			if err != nil {
				return err
			}
			fds[i] = fd
		}
		oob = syscall.UnixRights(fds...)
	}
	n, _, err := uc.WriteMsgUnix(frame, oob, nil)
	if err != nil {
		return err
	}
	if n != len(frame) {
		return fmt.Errorf("short write: %d of %d bytes", n, len(frame))
	}
	return nil
}

// capFD returns the descriptor of a capability the monitor sends: a file
// or socket (through SyscallConn, which leaves its mode alone), or a raw
// descriptor from ump.Caps.
func capFD(c wire.Cap) (int, error) {
	switch v := c.(type) {
	case interface{ Fd() uintptr }:
		if _, isConn := c.(syscall.Conn); !isConn {
			return int(v.Fd()), nil
		}
	}
	switch v := c.(type) {
	case syscall.Conn:
		rc, err := v.SyscallConn()
		if err != nil {
			return -1, err
		}
		fd := -1
		if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
			return -1, err
		}
		return fd, nil
	}
	return -1, fmt.Errorf("capability %T has no descriptor", c)
}
