package monitor

import (
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"
	"unsafe"

	"github.com/chanos/chanos/interfaces/nameservice"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// WithDefaults returns c with every zero or negative limit replaced by its
// default, as New applies them.
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxDomains, DefaultMaxDomains)
	def(&c.MaxNSConns, DefaultMaxNSConns)
	def(&c.MaxTotalNSConns, DefaultMaxTotalNSConns)
	def(&c.MaxNames, DefaultMaxNames)
	def(&c.MaxTotalNames, DefaultMaxTotalNames)
	def(&c.MaxExports, DefaultMaxExports)
	def(&c.MaxTotalExports, DefaultMaxTotalExports)
	def(&c.MaxPendingBinds, DefaultMaxPendingBinds)
	def(&c.MaxTotalPendingBinds, DefaultMaxTotalPendingBinds)
	def(&c.MaxTotalWatches, DefaultMaxTotalWatches)
	def(&c.MaxConnRecords, DefaultMaxConnRecords)
	def(&c.MaxReplyQueue, DefaultMaxReplyQueue)
	def(&c.MaxReplyMemory, DefaultMaxReplyMemory)
	def(&c.MaxTotalReplyMemory, DefaultMaxTotalReplyMemory)
	if c.MaxFrame == 0 {
		c.MaxFrame = DefaultMaxFrame
	}
	for _, d := range []struct {
		v *time.Duration
		d time.Duration
	}{{&c.HelloTimeout, DefaultHelloTimeout}, {&c.IdleTimeout, DefaultIdleTimeout}, {&c.PingTimeout, DefaultPingTimeout}, {&c.HandOverTTL, HandOverTTL}} {
		if *d.v <= 0 {
			*d.v = d.d
		}
	}
	return c
}

// Least values of the byte quotas: a session's socket must carry the
// monitor's small frames, and a domain's reply memory at least a small
// ps document.
const (
	minReplyQueue  = 8 << 10
	minReplyMemory = psSlack + 3*(16<<10)
)

// check reports a configuration New cannot run with; c has its defaults.
func (c Config) check() error {
	switch {
	case c.MaxFrame < nameservice.MaxFrameSize:
		return fmt.Errorf("monitor: MaxFrame %d is below the nameservice's %d", c.MaxFrame, nameservice.MaxFrameSize)
	case c.MaxReplyQueue < minReplyQueue:
		return fmt.Errorf("monitor: MaxReplyQueue %d is below %d bytes", c.MaxReplyQueue, minReplyQueue)
	case c.MaxReplyMemory < minReplyMemory:
		return fmt.Errorf("monitor: MaxReplyMemory %d is below %d bytes", c.MaxReplyMemory, minReplyMemory)
	case c.MaxTotalReplyMemory < c.MaxReplyMemory:
		return fmt.Errorf("monitor: MaxTotalReplyMemory %d is below MaxReplyMemory %d", c.MaxTotalReplyMemory, c.MaxReplyMemory)
	}
	for _, p := range []struct {
		what       string
		per, total int
	}{
		{"nameservice connections", c.MaxNSConns, c.MaxTotalNSConns},
		{"names", c.MaxNames, c.MaxTotalNames},
		{"exports", c.MaxExports, c.MaxTotalExports},
		{"pending binds", c.MaxPendingBinds, c.MaxTotalPendingBinds},
	} {
		if p.total < p.per {
			return fmt.Errorf("monitor: the total of %s (%d) is below the quota of one domain (%d)", p.what, p.total, p.per)
		}
	}
	return nil
}

// The worst-case resident memory of each thing the quotas count: the
// constants of the bound of docs/quotas.md. They are upper estimates from
// the sizes of the structures involved, checked by TestMemoryBound, which
// attacks a monitor in a child process with every quota filled.
const (
	// BoundBase: the Go runtime, the program's code and data, the
	// nameservice's export, the janitor, and the connections being
	// refused (at most rejectors, with a 4 KiB buffer each).
	BoundBase = 24 << 20
	// BoundSession: one session, before or after hello: its goroutine's
	// stack, its connection (engine state, a 4 KiB receive buffer and a
	// 1 KiB control buffer), logger, program name and bookkeeping. Its
	// socket's buffers are the kernel's (MaxReplyQueue).
	BoundSession = 48 << 10
	// BoundNSConn: one nameservice connection besides its ring: its
	// goroutine, engine state, one list reply (64 KiB) being built and
	// encoded, and the ring's pages the monitor maps (nsRingBytes).
	BoundNSConn = 192<<10 + nsRingBytes
	// BoundName: one name set through the nameservice: the store's
	// entry, sorted index and class count, and the owner's record of it.
	BoundName = 1 << 10
	// BoundExport: one export: its record, token, name and interface,
	// and its entry in the store.
	BoundExport = 2 << 10
	// BoundWait: one bind or wait_for in progress: a goroutine, the call
	// frame's copy, the store's waiter, and a ring pair being made.
	BoundWait = 24 << 10
	// BoundWatch: one watch: its goroutine and the store's event buffer
	// (1024 events).
	BoundWatch = 96 << 10
	// BoundConnRecord: one connection record of ps, with its name.
	BoundConnRecord = 1 << 10
)

// MemoryBound returns the most resident memory, in bytes, the monitor
// configured by c reaches whatever its domains do, by the formula of
// docs/quotas.md:
//
//	BoundBase
//	+ MaxDomains           × BoundSession
//	+ MaxTotalNSConns      × BoundNSConn
//	+ MaxTotalNames        × BoundName
//	+ MaxTotalExports      × BoundExport
//	+ MaxTotalPendingBinds × BoundWait
//	+ MaxTotalWatches      × BoundWatch
//	+ MaxDomains × MaxConnRecords × BoundConnRecord
//	+ MaxTotalReplyMemory
//
// Go's collector may let garbage add to it: `chanos monitor` sets the
// runtime's soft memory limit (debug.SetMemoryLimit) to this bound, so
// that it collects harder rather than pass it. The kernel's socket
// buffers, not resident in the monitor, add at most MaxDomains ×
// MaxReplyQueue (the large replies are within MaxTotalReplyMemory).
func (c Config) MemoryBound() int64 {
	c = c.WithDefaults()
	n := int64(BoundBase) +
		int64(c.MaxDomains)*BoundSession +
		int64(c.MaxTotalNSConns)*BoundNSConn +
		int64(c.MaxTotalNames)*BoundName +
		int64(c.MaxTotalExports)*BoundExport +
		int64(c.MaxTotalPendingBinds)*BoundWait +
		int64(c.MaxTotalWatches)*BoundWatch +
		int64(c.MaxDomains)*int64(c.MaxConnRecords)*BoundConnRecord +
		int64(c.MaxTotalReplyMemory) +
		spawnMemoryBound(c.Spawn)
	return n
}

// FDBound returns the most file descriptors the monitor configured by c
// holds: its listener and store, a socket per session and per connection
// being refused, five per nameservice connection (the ring's four
// eventfds and its liveness socket; the memory is mapped, not held open)
// and up to twelve per bind in progress (a ring pair for both sides).
// The monitor must be allowed that many (ulimit -n); New warns when it is
// not.
func (c Config) FDBound() int {
	c = c.WithDefaults()
	return 32 + c.MaxDomains + maxRejectors + 5*c.MaxTotalNSConns + 12*c.MaxTotalPendingBinds + spawnFDBound(c.Spawn)
}

// The nameservice's rings, which the monitor makes smaller than ump's
// defaults (a 4 MiB bulk region each way) since its frames are small and
// few: 256 slots of 64 bytes and a 128 KiB bulk region (two 64 KiB list
// replies) each way.
const (
	nsRingSlots = 256
	nsRingBulk  = 128 << 10
	nsRingBytes = 2*nsRingSlots*64 + 2*nsRingBulk + 4096
)

// exhausted is the refusal of a request whose reservation failed: a
// limit status whose detail starts "resource exhausted:" and names the
// quota.
func exhausted(format string, args ...any) *rpcError {
	return fail(proto.StatusLimit, "resource exhausted: "+format, args...)
}

// NSQuota is the nameservice's errval for a quota reached: a set beyond
// the names of its domain or of the monitor (docs/nameservice.md).
const NSQuota wire.Errval = 9

// ErrNSQuota is what NSError returns for NSQuota.
var ErrNSQuota = errors.New("nameservice: resource exhausted: a quota of names was reached")

// ---- reply memory ----

// reserveReply reserves n bytes of reply memory for s, against its
// domain's quota and the monitor's total. When the total is short it
// first takes back what domains have read, then drops sessions that have
// left a large reply unread past the ping timeout, and tries again.
func (m *Monitor) reserveReply(s *session, n int) error {
	for attempt := 0; ; attempt++ {
		m.mu.Lock()
		switch {
		case s.replyMem+n > m.cfg.MaxReplyMemory:
			held := s.replyMem
			m.mu.Unlock()
			if attempt == 0 && s.refreshReply() {
				continue
			}
			return exhausted("reply memory of this domain: %d bytes held by earlier replies it has not read, %d more needed, quota %d (--max-reply-memory)", held, n, m.cfg.MaxReplyMemory)
		case m.replyMem+n > m.cfg.MaxTotalReplyMemory:
			held := m.replyMem
			m.mu.Unlock()
			if attempt == 0 {
				m.reclaimReplyMemory()
				continue
			}
			m.rlog.Log(slog.LevelWarn, "reply-memory", "request refused: resource exhausted", "quota", "max-total-reply-memory",
				"held", held, "needed", n, "max", m.cfg.MaxTotalReplyMemory)
			return exhausted("reply memory of the monitor: %d of %d bytes held, %d more needed (--max-total-reply-memory)", held, m.cfg.MaxTotalReplyMemory, n)
		}
		s.replyMem += n
		m.replyMem += n
		m.mu.Unlock()
		return nil
	}
}

// releaseReply gives back n bytes of s's reply memory.
func (m *Monitor) releaseReply(s *session, n int) {
	m.mu.Lock()
	s.replyMem -= n
	m.replyMem -= n
	m.mu.Unlock()
}

// reclaimReplyMemory takes back the reply memory of large replies that
// their domains have read, and drops the sessions that have left one
// unread for longer than the ping timeout: they do not read their
// socket, and hold memory that others need.
func (m *Monitor) reclaimReplyMemory() {
	m.mu.Lock()
	var held []*session
	for s := range m.sessions {
		if s.replyUnread > 0 {
			held = append(held, s)
		}
	}
	m.mu.Unlock()
	for _, s := range held {
		if s.refreshReply() {
			continue
		}
		m.mu.Lock()
		since := s.replySent
		m.mu.Unlock()
		if since.IsZero() || time.Since(since) <= m.cfg.PingTimeout {
			continue
		}
		s.evict("its large reply stayed unread for longer than the ping timeout, and the monitor needs the reply memory it holds")
		// Closing its socket frees the reply: give its memory back now,
		// not when the session's goroutine has cleaned up.
		m.mu.Lock()
		s.replyMem -= s.replyUnread
		m.replyMem -= s.replyUnread
		s.replyUnread, s.replySent = 0, time.Time{}
		m.mu.Unlock()
	}
}

// refreshReply releases the reply memory of s's large reply once the
// domain has read it (its socket holds fewer bytes than the reply), and
// lowers the socket's send buffer to MaxReplyQueue again. It reports
// whether it released anything.
func (s *session) refreshReply() bool {
	m := s.m
	m.mu.Lock()
	unread := s.replyUnread
	m.mu.Unlock()
	if unread == 0 {
		return false
	}
	outq, err := s.outq()
	if err != nil || outq >= unread {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s.replyUnread != unread { // released meanwhile
		return false
	}
	s.replyUnread = 0
	s.replySent = time.Time{}
	s.replyMem -= unread
	m.replyMem -= unread
	// Under the lock: a ps that finds nothing unread any more raises the
	// buffer after this, never before.
	s.setSendBuffer(m.cfg.MaxReplyQueue)
	return true
}

// ---- the session's socket ----

// outq returns how many bytes the session's socket holds that the domain
// has not read (SIOCOUTQ: the kernel's accounting, overhead included).
func (s *session) outq() (int, error) {
	rc, err := s.uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		n, ierr = ioctlInt(int(fd), syscall.TIOCOUTQ)
	}); err != nil {
		return 0, err
	}
	return n, ierr
}

// setSendBuffer sets the session socket's send buffer so that the kernel
// holds up to n bytes for the domain (it doubles what it is given).
func (s *session) setSendBuffer(n int) {
	setSendBuffer(s.uc.SyscallConn, n)
}

func setSendBuffer(sc func() (syscall.RawConn, error), n int) int {
	rc, err := sc()
	if err != nil {
		return 0
	}
	got := 0
	rc.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, (n+1)/2)
		got, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	})
	return got
}

func ioctlInt(fd int, req uint) (int, error) {
	var v int32
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(&v)))
	if e != 0 {
		return 0, e
	}
	return int(v), nil
}
