package monitor

import (
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
