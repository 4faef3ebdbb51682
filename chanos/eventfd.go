package chanos

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/chanos/chanos/wire"
)

// eventFD is an Event's descriptor, held as a number rather than as an
// *os.File. An *os.File over a non-blocking descriptor joins the
// runtime's netpoller (epoll), and then every Signal of the object, by
// any domain, also wakes the netpoller's thread, even though nobody
// waits there: a thread woken for nothing on each signal, which on two
// CPUs doubled the signal-to-wake of a Wait that sleeps in ppoll(2)
// (`chanos bench caps`, event-wake parked). The netpoller gets a
// duplicate of its own only when a wait needs it (Event.pollFile).
//
// Its uses hold mu for reading, so that Close, which takes it for
// writing, never frees the number while a system call still uses it.
type eventFD struct {
	mu     sync.RWMutex
	fd     int
	closed bool
}

// use calls fn with the descriptor, held open meanwhile.
func (f *eventFD) use(fn func(fd int)) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return ErrClosed
	}
	fn(f.fd)
	return nil
}

// close closes the descriptor once every use has returned.
func (f *eventFD) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	return syscall.Close(f.fd)
}

// dup returns a close-on-exec duplicate of the descriptor, which the
// caller owns.
func (f *eventFD) dup() (int, error) { return wire.DupRaw(f) }

// Control implements syscall.RawConn: a sender of the Event in a
// message duplicates the descriptor through it.
func (f *eventFD) Control(fn func(fd uintptr)) error {
	return f.use(func(fd int) { fn(uintptr(fd)) })
}

// Read implements syscall.RawConn: fn is called until it returns true,
// the thread sleeping in ppoll(2) until the descriptor is readable
// between calls.
func (f *eventFD) Read(fn func(fd uintptr) bool) error {
	return f.wait(0x1, fn) // POLLIN
}

// Write implements syscall.RawConn, as Read for writability.
func (f *eventFD) Write(fn func(fd uintptr) bool) error {
	return f.wait(0x4, fn) // POLLOUT
}

func (f *eventFD) wait(events int16, fn func(fd uintptr) bool) error {
	var perr error
	err := f.use(func(fd int) {
		for !fn(uintptr(fd)) {
			pfd := []pollFD{{fd: int32(fd), events: events}}
			if errno := ppoll(pfd); errno != 0 && errno != syscall.EINTR {
				perr = os.NewSyscallError("ppoll", errno)
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return perr
}

// pollFD is poll(2)'s struct pollfd.
type pollFD struct {
	fd      int32
	events  int16
	revents int16
}

// ppoll sleeps in ppoll(2) until one of fds is ready, with no timeout and
// the thread's signal mask.
func ppoll(fds []pollFD) syscall.Errno {
	_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), 0, 0, 0, 0)
	return errno
}

// rwfNowait is preadv2's RWF_NOWAIT: the read fails with EAGAIN rather
// than wait, whatever the open file's O_NONBLOCK says.
const rwfNowait = 0x8

// noNowait is set once the kernel refuses RWF_NOWAIT for an Event's
// descriptor (before about Linux 5.12 for an eventfd).
var noNowait atomic.Bool

// readNowait reads into b from fd without waiting. An Event's descriptor
// may be shared with other domains, and its O_NONBLOCK flag with them (it
// belongs to the open file): a broken or hostile peer can clear it, and a
// plain read of an empty count would then block the thread for good. A
// kernel without RWF_NOWAIT for the descriptor gets the flag set again
// before the read instead, which leaves the moment between the two
// system calls to a peer that clears it again (docs/capabilities.md).
func readNowait(fd int, b []byte) (int, error) {
	if !noNowait.Load() {
		iov := syscall.Iovec{Base: &b[0]}
		iov.SetLen(len(b))
		off := -1
		n, _, e := syscall.Syscall6(sysPreadv2, uintptr(fd), uintptr(unsafe.Pointer(&iov)), 1, uintptr(off), 0, rwfNowait)
		switch e {
		case 0:
			return int(n), nil
		case syscall.EOPNOTSUPP, syscall.EINVAL, syscall.ENOSYS:
			noNowait.Store(true)
		default:
			return 0, e
		}
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		return 0, err
	}
	return syscall.Read(fd, b)
}
