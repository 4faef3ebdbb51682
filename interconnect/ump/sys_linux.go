package ump

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const (
	mfdCloexec      = 0x1
	mfdAllowSealing = 0x2

	fAddSeals  = 1033
	fGetSeals  = 1034
	sealSeal   = 0x1
	sealShrink = 0x2
	sealGrow   = 0x4

	membarrierQuery                    = 0
	membarrierPrivateExpedited         = 1 << 3
	membarrierRegisterPrivateExpedited = 1 << 4
)

// startFence registers this process for fenceAllThreads with
// membarrier(2), in the background, when its first connection is set up.
// The exclusive calls (SendExclusive, ReceiveExclusive) then announce
// themselves to Close with plain stores, and Close, which is rare, pays
// for the fence that orders them: without it, a store on x86-64 may still
// be in its core's store buffer when that core's next load, of the
// closing flag, completes. Registering a process of more than one thread
// waits for an RCU grace period, milliseconds: done by the first exclusive
// call, it would hold up every program's first round trip, so it runs in
// the background when the first connection is set up. Until it has ended,
// fastFence reports false and the calls take an atomic swap, which needs
// no fence.
func startFence() { fenceStart.Do(func() { go registerFence() }) }

var fenceStart sync.Once

// fenceState is 0 until registerFence has ended, then fenceYes or
// fenceNo. It never changes after that.
var fenceState atomic.Int32

const (
	fenceYes = 1
	fenceNo  = 2
)

// testBeforeRegister, if a test sets it before the process's first
// connection, runs at the start of registerFence: a test holds the
// registration back with it.
var testBeforeRegister func()

func registerFence() {
	if testBeforeRegister != nil {
		testBeforeRegister()
	}
	state := int32(fenceNo)
	if r, _, e := syscall.Syscall(sysMembarrier, membarrierQuery, 0, 0); e == 0 && r&membarrierPrivateExpedited != 0 {
		if _, _, e = syscall.Syscall(sysMembarrier, membarrierRegisterPrivateExpedited, 0, 0); e == 0 {
			state = fenceYes
		}
	}
	fenceState.Store(state)
}

// fenceAllThreads makes every running thread of this process execute a
// full memory barrier (the others did at their last context switch). It
// may be called only once fastFence has reported true.
func fenceAllThreads() {
	syscall.Syscall(sysMembarrier, membarrierPrivateExpedited, 0, 0)
}

// memfdCreate creates a sealable, close-on-exec memfd.
func memfdCreate(name string) (int, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	fd, _, e := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(p)), mfdCloexec|mfdAllowSealing, 0)
	if e != 0 {
		return -1, os.NewSyscallError("memfd_create", e)
	}
	return int(fd), nil
}

func fcntl(fd, cmd, arg int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), uintptr(arg))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// wakeSocketPair returns a connected pair of Unix stream sockets,
// close-on-exec and non-blocking: the wake-up sockets of one kind (data or
// space) of a ring pair, one end per side.
func wakeSocketPair() ([2]int, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0)
	if err != nil {
		return [2]int{-1, -1}, os.NewSyscallError("socketpair", err)
	}
	return [2]int{fds[0], fds[1]}, nil
}

// wakeSignal sends one byte on a wake-up socket: the peer's end becomes
// readable. MSG_DONTWAIT makes this one call non-blocking whatever the
// descriptor's flags, which the peer may share and change: it cannot make
// the send block (docs/ump.md, "Wake-up sockets"). Every failure is
// ignored: EAGAIN means the peer's end has unread bytes already, so a
// wake-up is pending; EPIPE and ECONNRESET mean the peer is gone, which the
// liveness socket reports. As the call never blocks, it is a RawSyscall:
// there is no reason to hand the P to another thread.
//
// Through syscall.Syscall a parked round trip is faster (entering a
// syscall wakes the runtime's sysmon thread, after which the kernel puts
// the woken peer on the waker's CPU rather than on the halted other one),
// but a stream is slower (the extra thread wake-ups preempt spinning
// peers, which then park more often). Streams and spinning round trips
// are the common case, so the send stays raw (measured: docs/results/).
func wakeSignal(fd int) {
	one := byte(1)
	syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&one)), 1,
		syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL, 0, 0)
}

// wakeDrain reads what is queued on a wake-up socket, with MSG_DONTWAIT
// for the reason wakeSignal gives, and reports whether the socket has
// ended: it reached its end of file (the peer's end is closed, so the peer
// closed or died), or failed otherwise. A peer that closes with bytes of
// ours unread makes the next receive fail with ECONNRESET, and only the
// one after it read end of file; a socket that was never connected (a
// hostile peer may pass one) fails with EINVAL, and would otherwise wake
// its waiter forever. It reads at most 16 buffers: a peer flooding its
// end cannot keep the waiter here, and leftover bytes only cost it a
// spurious wake-up.
func wakeDrain(fd int, buf *[64]byte) (ended bool) {
	for range 16 {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)),
			syscall.MSG_DONTWAIT, 0, 0)
		if e == syscall.EAGAIN || e == syscall.EINTR {
			return false
		}
		if e != 0 {
			return true
		}
		if n == 0 {
			return true
		}
		if n < uintptr(len(buf)) {
			return false
		}
	}
	return false
}

// wakeShutdown shuts the receiving half of one of our wake-up sockets: it
// becomes readable, at its end of file, which wakes a goroutine parked on
// it. It is how a side wakes its own waiters when the connection ends.
func wakeShutdown(fd int) { syscall.Shutdown(fd, syscall.SHUT_RD) }

// soDomain is SO_DOMAIN, which package syscall does not name.
const soDomain = 39

// checkWakeSockets reports whether fds, received from a possibly hostile
// peer, are Unix stream sockets, each a different socket from the others
// and from the liveness socket (inode sockIno), and makes them
// non-blocking. A wake-up socket never needs O_NONBLOCK, as every call on
// it passes MSG_DONTWAIT; it is set so that the runtime's netpoller takes
// the descriptor.
func checkWakeSockets(fds []int, sockIno uint64) ([]uint64, error) {
	seen := []uint64{sockIno}
	for _, fd := range fds {
		var err error
		if seen, err = checkSocket(fd, syscall.SOCK_STREAM, "wake-up", seen); err != nil {
			return nil, err
		}
	}
	return seen, nil
}

// checkSocket checks that fd, received from a possibly hostile peer, is a
// Unix socket of type typ (what names it in errors), a different socket
// from those whose inodes are in seen, to which it adds its own, and
// makes it non-blocking: only so that Go's netpoller takes it, as every
// call on it passes MSG_DONTWAIT.
func checkSocket(fd, typ int, what string, seen []uint64) ([]uint64, error) {
	got, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE)
	if err != nil {
		return nil, fmt.Errorf("%w: %s descriptor %d is not a socket: %v", ErrProtocol, what, fd, err)
	}
	dom, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, soDomain)
	if err != nil || got != typ || dom != syscall.AF_UNIX {
		return nil, fmt.Errorf("%w: %s descriptor %d is not a Unix socket of type %d (domain %d, type %d)", ErrProtocol, what, fd, typ, dom, got)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, os.NewSyscallError("fstat", err)
	}
	for _, ino := range seen {
		if st.Ino == ino {
			return nil, fmt.Errorf("%w: %s descriptor %d is the same socket as another descriptor of the ring pair", ErrProtocol, what, fd)
		}
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		return nil, os.NewSyscallError("fcntl", err)
	}
	return append(seen, st.Ino), nil
}

// checkMemfd returns the size of a shared-memory descriptor received from
// the peer, after checking that it cannot shrink under our mapping (a
// shrink would turn our reads into SIGBUS).
func checkMemfd(fd int) (int, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, os.NewSyscallError("fstat", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0, fmt.Errorf("%w: shared memory descriptor is not a regular file (mode %#o)", ErrProtocol, st.Mode)
	}
	seals, err := fcntl(fd, fGetSeals, 0)
	if err != nil {
		return 0, fmt.Errorf("%w: shared memory descriptor is not a memfd: %v", ErrProtocol, err)
	}
	if seals&(sealShrink|sealSeal) != sealShrink|sealSeal {
		return 0, fmt.Errorf("%w: shared memory is not sealed against shrinking (seals %#x)", ErrProtocol, seals)
	}
	if st.Size < 0 || st.Size > int64(headerSize+2*MaxRingSlots*SlotSize+2*MaxBulkSize) {
		return 0, fmt.Errorf("%w: shared memory size %d out of range", ErrProtocol, st.Size)
	}
	return int(st.Size), nil
}

func closeFDs(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
}

// osYield gives the CPU to another runnable thread, if one waits for it.
// The thread stays runnable, so the call does not block: a RawSyscall, like
// the wake-up calls.
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// pollFd is struct pollfd.
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const pollOut = 0x4 // POLLOUT

// poll waits at most d for an event on fds (ppoll(2), which every Linux
// architecture has), and returns how many have one; an interrupted wait
// returns 0.
func poll(fds []pollFd, d time.Duration) (int, error) {
	ts := syscall.NsecToTimespec(int64(d))
	n, _, e := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
		uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	if e == syscall.EINTR {
		return 0, nil
	}
	if e != 0 {
		return 0, os.NewSyscallError("ppoll", e)
	}
	return int(n), nil
}
