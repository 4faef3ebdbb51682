package monitor

import (
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

// probeMaxPacket returns the largest packet, up to want bytes, that a
// session's socket can carry once its send buffer is raised as far as the
// system allows (net.core.wmem_max): the bound of the monitor's replies.
func probeMaxPacket(want int) int {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return want
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	syscall.SetsockoptInt(fds[0], syscall.SOL_SOCKET, syscall.SO_SNDBUF, want+sockSlack)
	size, err := syscall.GetsockoptInt(fds[0], syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	if err != nil || size-sockSlack >= want {
		return want
	}
	return max(size-sockSlack, wire.HeaderSize)
}
