package chanos

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/chanos/chanos/wire"
)

// An Event is a waitable, signalable object: the user-space form of an
// interrupt object (seed 002's IRQ objects). It holds a count, which
// Signal adds to and Wait takes; a goroutine waiting on it needs no
// goroutine of its own: it sleeps in the kernel on the descriptor while
// few others do, else the runtime's netpoller parks it (see Wait). An
// Event is a capability: it travels in messages (a cap or
// give_away_cap argument) to another domain on the machine, which then
// waits on or signals the same object (EventFromCap).
//
// Events are kernel objects behind a descriptor: an eventfd (NewEvent), a
// timerfd (NewTimerEvent), or any pollable descriptor (EventFromFile), and
// a signal's delivery adapts to one (NewSignalEvent). docs/capabilities.md
// describes the model.
//
// Counting (the default): Wait returns the count and resets it to 0, so
// that two Signals before a Wait are one wake-up that says 2. Semaphore
// (NewEvent(Semaphore())): Wait takes 1, and the count's rest stays, so
// that each Signal is one wake-up.
//
// An Event is safe for concurrent use; Waits are served one at a time.
type Event struct {
	fd   *eventFD // never in the netpoller (see eventFD)
	name string
	kind eventKind
	wmu  sync.Mutex // one Wait at a time: its context sets the read deadline
	// user, for an Event over a caller's descriptor (EventFromFile), is
	// that descriptor's file: the caller reads it after a Wait, and Close
	// closes it.
	user *os.File

	// pf is a duplicate of fd in the runtime's netpoller, for the waits
	// that park the goroutine rather than a thread (C, and the Waits
	// beyond threadWaits), made for the first of them.
	pmu sync.Mutex
	pf  *os.File

	// wake ends a Wait blocked in ppoll (its context's end, Close): an
	// eventfd, made by the first such Wait.
	wakeMu sync.Mutex
	wake   *eventFD

	cmu    sync.Mutex
	ch     chan uint64   // C's, made on first use
	closed chan struct{} // closed by Close
	once   sync.Once
	stop   func() bool // a signal adapter's
}

type eventKind uint8

const (
	kindCounter  eventKind = iota // an eventfd: 8-byte counts
	kindTimer                     // a timerfd: 8-byte counts, signalled by the kernel alone
	kindPollable                  // any descriptor: Wait waits for readability
)

// EventOption configures NewEvent.
type EventOption func(*eventConfig)

type eventConfig struct {
	semaphore bool
	initial   uint32
}

// Semaphore makes Wait take 1 from the count rather than all of it.
func Semaphore() EventOption { return func(c *eventConfig) { c.semaphore = true } }

// InitialCount sets the count the Event starts with.
func InitialCount(n uint32) EventOption { return func(c *eventConfig) { c.initial = n } }

// ErrNotEvent: a capability or descriptor given to EventFromCap is not an
// event object.
var ErrNotEvent = errors.New("chanos: not an event object")

// Linux's eventfd and timerfd flags.
const (
	efdSemaphore = 0x1
	efdCloexec   = syscall.O_CLOEXEC
	efdNonblock  = syscall.O_NONBLOCK
	tfdCloexec   = syscall.O_CLOEXEC
	tfdNonblock  = syscall.O_NONBLOCK

	clockMonotonic = 1 // CLOCK_MONOTONIC
)

// NewEvent returns a new Event, backed by an eventfd.
func NewEvent(opts ...EventOption) (*Event, error) {
	var c eventConfig
	for _, o := range opts {
		o(&c)
	}
	flags := efdCloexec | efdNonblock
	if c.semaphore {
		flags |= efdSemaphore
	}
	fd, _, e := syscall.Syscall(syscall.SYS_EVENTFD2, uintptr(c.initial), uintptr(flags), 0)
	if e != 0 {
		return nil, fmt.Errorf("chanos: new event: %w", os.NewSyscallError("eventfd2", e))
	}
	return newEvent(int(fd), "chanos-event", kindCounter), nil
}

func newEvent(fd int, name string, kind eventKind) *Event {
	return &Event{fd: &eventFD{fd: fd}, name: name, kind: kind, closed: make(chan struct{})}
}

// NewTimerEvent returns an Event that the kernel signals after d, and
// then every period if period is not 0: a timerfd, whose count is the
// number of expirations since the last Wait.
func NewTimerEvent(d, period time.Duration) (*Event, error) {
	if d <= 0 {
		return nil, fmt.Errorf("chanos: timer event: the first expiry must be positive, not %v", d)
	}
	fd, _, e := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, uintptr(clockMonotonic), uintptr(tfdCloexec|tfdNonblock), 0)
	if e != 0 {
		return nil, fmt.Errorf("chanos: timer event: %w", os.NewSyscallError("timerfd_create", e))
	}
	spec := [2]syscall.Timespec{syscall.NsecToTimespec(int64(period)), syscall.NsecToTimespec(int64(d))}
	if _, _, e := syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0); e != 0 {
		syscall.Close(int(fd))
		return nil, fmt.Errorf("chanos: timer event: %w", os.NewSyscallError("timerfd_settime", e))
	}
	return newEvent(int(fd), "chanos-timer", kindTimer), nil
}

// NewSignalEvent returns an Event signalled each time the process
// receives one of sigs (os/signal.Notify, as the Go runtime owns signal
// delivery): its count is the number of signals since the last Wait. It
// costs a goroutine, which Close stops.
func NewSignalEvent(sigs ...os.Signal) (*Event, error) {
	e, err := NewEvent()
	if err != nil {
		return nil, err
	}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	e.stop = func() bool {
		signal.Stop(ch)
		close(done)
		return true
	}
	go func() {
		for {
			select {
			case <-ch:
				e.Signal()
			case <-done:
				return
			}
		}
	}()
	return e, nil
}

// EventFromFile returns an Event over f, any descriptor the kernel can
// poll (a UIO device's interrupt descriptor, a GPIO line, a socket), which
// the Event takes over: Wait returns once f is readable, without reading
// it (the caller reads what f's kind gives), and its count is 1. Signal
// is refused.
func EventFromFile(f *os.File) (*Event, error) {
	fd, err := wire.DupFD(f)
	if err != nil {
		return nil, fmt.Errorf("chanos: event from %s: %w", f.Name(), err)
	}
	e := newEvent(fd, f.Name(), kindPollable)
	e.user = f
	return e, nil
}

// EventFromCap returns the Event a capability received in a message
// carries, taking it over: an eventfd or timerfd descriptor (the Event
// counts), as another domain sent with an Event. Any other descriptor is
// closed and refused with ErrNotEvent.
func EventFromCap(c wire.Cap) (*Event, error) {
	if e, ok := c.(*Event); ok { // within one process, the value itself
		return e, nil
	}
	f, ok := c.(*os.File)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("%w: a %T", ErrNotEvent, c)
	}
	link, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fdOf(f)))
	kind, name := kindCounter, "chanos-event"
	switch link {
	case "anon_inode:[eventfd]":
	case "anon_inode:[timerfd]":
		kind, name = kindTimer, "chanos-timer"
	default:
		f.Close()
		return nil, fmt.Errorf("%w: the descriptor is %q", ErrNotEvent, link)
	}
	// The Event keeps a duplicate, out of the netpoller, and f goes.
	fd, err := wire.DupFD(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("chanos: event from a capability: %w", err)
	}
	// The sender's copy shares the flag, and an Event never blocks a
	// thread in a read either way, but a received descriptor may have
	// come blocking.
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("chanos: event from a capability: %w", os.NewSyscallError("fcntl", err))
	}
	return newEvent(fd, name, kind), nil
}

// fdOf returns f's descriptor without (*os.File).Fd's switch to blocking.
func fdOf(f *os.File) int {
	fd := -1
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(u uintptr) { fd = int(u) })
	}
	return fd
}

// Signal adds 1 to the count, waking a waiter.
func (e *Event) Signal() error { return e.Add(1) }

// Add adds n (1 to 2^64-2) to the count. A count that would overflow is
// refused with an error rather than waiting for a Wait to make room.
func (e *Event) Add(n uint64) error {
	if e.kind != kindCounter {
		return fmt.Errorf("chanos: signal of %s: only its source signals it", e)
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], n)
	var werr error
	if err := e.fd.use(func(fd int) {
		// Never waits: a full count fails with EAGAIN at once. Another
		// domain that shares the open file may have cleared O_NONBLOCK,
		// and no write of an eventfd takes RWF_NOWAIT: the flag is set
		// again first (see readNowait).
		if werr = syscall.SetNonblock(fd, true); werr == nil {
			_, werr = syscall.Write(fd, b[:])
		}
	}); err != nil {
		return fmt.Errorf("chanos: signal event: %w", err)
	}
	if werr != nil {
		if werr == syscall.EAGAIN {
			return fmt.Errorf("chanos: signal event: the count is full")
		}
		return fmt.Errorf("chanos: signal event: %w", werr)
	}
	return nil
}

// threadWaits bounds the Waits that block an OS thread. A Wait sleeps in
// ppoll(2) on the Event's descriptor, so that the kernel wakes its thread
// directly, as it wakes a raw read(2) of an eventfd; the netpoller's
// wake-up goes through epoll and the scheduler, about three times as long
// across processes (`chanos bench caps`, event-wake parked). Each such
// Wait holds a thread, so only a few at a time may: the others are parked
// by the netpoller, which holds none.
var threadWaits = make(chan struct{}, 4)

// Wait waits until the count is not 0, or ctx ends, and takes it: all of
// it for a counting Event (returned), 1 for a semaphore, and 1 for an
// Event over a pollable descriptor, which is then readable. The waiting
// goroutine sleeps in the kernel on the Event's descriptor while few
// others do (threadWaits), else the netpoller parks it.
func (e *Event) Wait(ctx context.Context) (uint64, error) {
	return e.wait(ctx, true)
}

// wait is Wait; onThread allows the wait that blocks a thread.
func (e *Event) wait(ctx context.Context, onThread bool) (uint64, error) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if onThread {
		select {
		case threadWaits <- struct{}{}:
			n, err, done := e.waitOnThread(ctx)
			<-threadWaits
			if done {
				return n, err
			}
		default:
		}
	}
	pf, err := e.pollFile()
	if err != nil {
		return 0, fmt.Errorf("chanos: wait on event: %w", err)
	}
	if ctx.Done() != nil {
		// ctx's end ends the netpoller's wait through the read deadline.
		stop := context.AfterFunc(ctx, func() { pf.SetReadDeadline(time.Unix(1, 0)) })
		defer func() {
			stop()
			pf.SetReadDeadline(time.Time{})
		}()
	}
	for {
		n, err := e.parkedTake(pf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			// The deadline an earlier Wait's context set as it ended.
			pf.SetReadDeadline(time.Time{})
			continue
		}
		return n, err
	}
}

// pollFile returns the Event's duplicate in the netpoller, made on first
// use.
func (e *Event) pollFile() (*os.File, error) {
	e.pmu.Lock()
	defer e.pmu.Unlock()
	if e.pf == nil {
		select {
		case <-e.closed:
			return nil, ErrClosed
		default:
		}
		// os.NewFile gives the netpoller only a descriptor that is
		// non-blocking when it looks, and a peer that shares the open
		// file may have cleared the flag (see readNowait): it is set
		// first, and looked at again after, a few times.
		for range 8 {
			fd, err := e.fd.dup()
			if err != nil {
				return nil, err
			}
			if err := syscall.SetNonblock(fd, true); err != nil {
				syscall.Close(fd)
				return nil, os.NewSyscallError("fcntl", err)
			}
			f := os.NewFile(uintptr(fd), e.name)
			if f.SetReadDeadline(time.Time{}) == nil {
				e.pf = f
				return f, nil
			}
			f.Close()
		}
		return nil, errors.New("another domain keeps clearing the descriptor's O_NONBLOCK")
	}
	return e.pf, nil
}

// waitOnThread is Wait sleeping in ppoll(2) on the Event's descriptor and
// its wake descriptor, which ctx's end and Close signal; done is false if
// it could not (no wake descriptor), and the netpoller should wait.
func (e *Event) waitOnThread(ctx context.Context) (n uint64, err error, done bool) {
	wake, err := e.wakeFile()
	if err != nil {
		return 0, nil, false
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { poke(wake) })
		defer stop()
	}
	for {
		select {
		case <-e.closed:
			return 0, fmt.Errorf("chanos: wait on event: %w", ErrClosed), true
		default:
		}
		if err := ctx.Err(); err != nil {
			return 0, err, true
		}
		// ppoll first: it returns at once if the count is set already,
		// and the usual wait makes one system call fewer.
		if err := sleepOn(e.fd, wake); err != nil {
			select {
			case <-e.closed:
				return 0, fmt.Errorf("chanos: wait on event: %w", ErrClosed), true
			default:
			}
			return 0, fmt.Errorf("chanos: wait on event: %w", err), true
		}
		if n, err := e.takeNow(); err != errEmpty {
			return n, err, true
		}
	}
}

// wakeFile returns the Event's wake descriptor, made on first use.
func (e *Event) wakeFile() (*eventFD, error) {
	e.wakeMu.Lock()
	defer e.wakeMu.Unlock()
	select {
	case <-e.closed:
		return nil, ErrClosed
	default:
	}
	if e.wake == nil {
		fd, _, errno := syscall.Syscall(syscall.SYS_EVENTFD2, 0, uintptr(efdCloexec|efdNonblock), 0)
		if errno != 0 {
			return nil, os.NewSyscallError("eventfd2", errno)
		}
		e.wake = &eventFD{fd: int(fd)}
	}
	return e.wake, nil
}

// poke signals the wake descriptor f.
func poke(f *eventFD) {
	one := [8]byte{1}
	f.use(func(fd int) { syscall.Write(fd, one[:]) })
}

// sleepOn blocks the calling thread in ppoll(2) until f or wake is
// readable, and empties wake. Both descriptors are held while it sleeps,
// so that a Close meanwhile cannot free their numbers.
func sleepOn(f, wake *eventFD) error {
	var perr error
	err := f.use(func(fd int) {
		if err := wake.use(func(wfd int) {
			pfd := []pollFD{{fd: int32(fd), events: 0x1 | 0x2}, {fd: int32(wfd), events: 0x1}} // POLLIN | POLLPRI
			for {
				errno := ppoll(pfd)
				if errno == syscall.EINTR {
					continue
				}
				if errno != 0 {
					perr = os.NewSyscallError("ppoll", errno)
					return
				}
				break
			}
			if pfd[1].revents != 0 {
				var b [8]byte
				syscall.Read(wfd, b[:])
			}
		}); err != nil {
			perr = err
		}
	})
	if err != nil {
		return err
	}
	return perr
}

// TryWait is Wait without the wait: false when the count is 0.
func (e *Event) TryWait() (uint64, bool, error) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	n, err := e.takeNow()
	if err == errEmpty {
		return 0, false, nil
	}
	return n, err == nil, err
}

var errEmpty = errors.New("empty")

// takeNow takes the count if it is not 0, else returns errEmpty.
func (e *Event) takeNow() (uint64, error) {
	var n uint64
	var rerr error
	if err := e.fd.use(func(fd int) { n, rerr = e.takeFrom(fd) }); err != nil {
		return 0, fmt.Errorf("chanos: wait on event: %w", err)
	}
	return n, e.takeErr(rerr)
}

// parkedTake takes the count from pf, the Event's duplicate in the
// netpoller, parking the goroutine until it is not 0.
func (e *Event) parkedTake(pf *os.File) (uint64, error) {
	rc, err := pf.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("chanos: wait on event: %w", err)
	}
	var n uint64
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, rerr = e.takeFrom(int(fd))
		return rerr != errEmpty
	})
	if err != nil {
		select {
		case <-e.closed:
			return 0, fmt.Errorf("chanos: wait on event: %w", ErrClosed)
		default:
		}
		return 0, fmt.Errorf("chanos: wait on event: %w", err)
	}
	return n, e.takeErr(rerr)
}

// takeErr wraps what takeFrom returned, but errEmpty.
func (e *Event) takeErr(err error) error {
	if err != nil && err != errEmpty {
		return fmt.Errorf("chanos: wait on event: %w", err)
	}
	return err
}

// takeFrom takes the count from fd, one of the Event's descriptors, or
// returns errEmpty. An Event over a pollable descriptor counts 1 when
// the descriptor is readable, and leaves the reading to its caller.
func (e *Event) takeFrom(fd int) (uint64, error) {
	if e.kind == kindPollable {
		if !readable(fd) {
			return 0, errEmpty
		}
		return 1, nil
	}
	var b [8]byte
	k, err := readNowait(fd, b[:])
	switch {
	case err == syscall.EAGAIN:
		return 0, errEmpty
	case err != nil:
		return 0, err
	case k != 8:
		return 0, fmt.Errorf("read %d bytes", k)
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

// readable reports whether fd has data (or an urgent condition) now.
func readable(fd int) bool {
	pfd := [1]struct {
		fd      int32
		events  int16
		revents int16
	}{{fd: int32(fd), events: 0x1 | 0x2}} // POLLIN | POLLPRI
	ts := syscall.Timespec{}
	n, _, _ := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd[0])), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return n == 1
}

// C returns a channel that receives what each Wait takes, for select. It
// costs a goroutine, started on the first call, that waits on the Event
// until Close; the channel is closed then. Use Wait where no select is
// needed: it costs no goroutine.
func (e *Event) C() <-chan uint64 {
	e.cmu.Lock()
	defer e.cmu.Unlock()
	if e.ch == nil {
		e.ch = make(chan uint64)
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-e.closed
			cancel()
		}()
		go func() {
			defer close(e.ch)
			for {
				// The netpoller's wait: a channel may wait long, and
				// should hold no thread meanwhile.
				n, err := e.wait(ctx, false)
				if err != nil {
					return
				}
				select {
				case e.ch <- n:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return e.ch
}

// Close releases the Event; a Wait in progress returns ErrClosed. Another
// domain that holds the same object keeps it.
func (e *Event) Close() error {
	var err error
	e.once.Do(func() {
		close(e.closed)
		if e.stop != nil {
			e.stop()
		}
		e.wakeMu.Lock()
		if e.wake != nil {
			poke(e.wake)
			// Once the sleeping Wait has left: it holds the descriptor.
			e.wake.close()
		}
		e.wakeMu.Unlock()
		e.pmu.Lock()
		if e.pf != nil {
			e.pf.Close()
		}
		e.pmu.Unlock()
		err = e.fd.close()
		if e.user != nil {
			if uerr := e.user.Close(); err == nil {
				err = uerr
			}
		}
	})
	return err
}

// Dup returns a copy of the Event: the same object, behind a descriptor
// of its own, which the copy's Close closes (a cap sent within one
// process travels as such a copy).
func (e *Event) Dup() (wire.Cap, error) { return e.Copy() }

// Copy returns another Event of the same object, on a descriptor of its
// own: signalling either wakes the waiters of both. Each is closed on its
// own; a give_away_cap(event) argument takes a copy when the caller keeps
// its Event.
func (e *Event) Copy() (*Event, error) {
	fd, err := e.fd.dup()
	if err != nil {
		return nil, fmt.Errorf("chanos: copy %s: %w", e, err)
	}
	return newEvent(fd, e.name, e.kind), nil
}

// SyscallConn gives the Event's descriptor to whoever sends it in a
// message (the ump interconnect duplicates it).
func (e *Event) SyscallConn() (syscall.RawConn, error) { return e.fd, nil }

// String names the Event's kind.
func (e *Event) String() string {
	return "chanos.Event(" + strings.TrimPrefix(e.name, "chanos-") + ")"
}
