package ump

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
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

	efdCloexec  = syscall.O_CLOEXEC
	efdNonblock = syscall.O_NONBLOCK

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

// eventfdCreate creates a non-blocking, close-on-exec eventfd.
func eventfdCreate() (int, error) {
	fd, _, e := syscall.Syscall(sysEventfd2, 0, efdCloexec|efdNonblock, 0)
	if e != 0 {
		return -1, os.NewSyscallError("eventfd2", e)
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

// eventfdSignal adds 1 to an eventfd. The descriptor is non-blocking, and
// a failure (only possible if the counter is saturated, which means the
// waiter is already woken) is ignored. It uses RawSyscall: the write never
// blocks, so there is no reason to hand the P to another thread.
//
// Through syscall.Syscall a parked round trip is faster (entering a
// syscall wakes the runtime's sysmon thread, after which the kernel puts
// the woken peer on the waker's CPU rather than on the halted other one),
// but a stream is slower (the extra thread wake-ups preempt spinning
// peers, which then park more often). Streams and spinning round trips
// are the common case, so the write stays raw (measured:
// docs/results/).
func eventfdSignal(fd int) {
	one := uint64(1)
	syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&one)), 8)
}

// checkEventfd reports whether fd is an eventfd, as a peer might pass any
// descriptor at all, and makes it non-blocking.
func checkEventfd(fd int) error {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return err
	}
	if link != "anon_inode:[eventfd]" {
		return fmt.Errorf("%w: descriptor %d is %q, not an eventfd", ErrProtocol, fd, link)
	}
	return syscall.SetNonblock(fd, true)
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
