package monitor

import (
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"time"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/interconnect/seqpacket"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// Refusing a connection costs the monitor a bounded amount of work: at
// most maxRejectors connections at a time wait, each at most rejectWait,
// for the hello they are answered with "monitor full"; beyond that a
// connection is answered only if its hello is already there, and closed.
// Either way the monitor reads one packet of at most MaxCallFrame bytes
// from it.
const (
	maxRejectors = 16
	rejectWait   = time.Second
)

// helloGrace is how long a connection may go without saying hello before
// it may be evicted to admit another when the monitor is full (it is
// dropped anyway after the hello timeout).
const helloGrace = time.Second

// errEvicted ends a session dropped to make room for others.
var errEvicted = errors.New("evicted")

// admit checks a new connection's peer and the session cap, and starts
// its session. When the monitor is full it evicts an unresponsive session
// if there is one, and otherwise answers the connection's hello with
// "monitor full: N of N sessions".
func (m *Monitor) admit(pc *seqpacket.Conn) {
	cred, err := pc.PeerCred()
	if err == nil {
		err = checkPeer(cred, m.uid)
	}
	if err != nil {
		m.rlog.Log(slog.LevelWarn, "credentials", "connection refused", "reason", "credentials", "err", err)
		pc.Close()
		return
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		pc.Close()
		return
	}
	var victim *session
	var why string
	if len(m.sessions) >= m.cfg.MaxDomains {
		victim, why = m.evictableLocked(time.Now())
		if victim == nil {
			n := len(m.sessions)
			detail := fmt.Sprintf("monitor full: %d of %d sessions", n, m.cfg.MaxDomains)
			waiting := false
			select {
			case m.rejectors <- struct{}{}:
				waiting = true
				m.wg.Add(1)
			default:
			}
			m.mu.Unlock()
			m.rlog.Log(slog.LevelWarn, "monitor-full", "connection refused: too many domains", "pid", cred.Pid,
				"max_domains", m.cfg.MaxDomains, "sessions", n, "hint", "raise the cap with --max-domains")
			if !waiting {
				refuse(pc, detail, 0, nil)
				pc.Close()
				return
			}
			go func() {
				defer m.wg.Done()
				// The place is free before the peer reads its answer, so
				// that a client that retries one connection at a time
				// always finds one and is answered, however late this
				// goroutine runs again once the answer is sent.
				refuse(pc, detail, rejectWait, func() { <-m.rejectors })
				pc.Close()
			}()
			return
		}
		// The victim's place is the newcomer's from now: it no longer
		// counts, though its goroutine still ends and cleans up.
		delete(m.sessions, victim)
	}
	maxPacket := m.maxPacket
	if m.testMaxPacket > 0 {
		maxPacket = min(maxPacket, m.testMaxPacket)
	}
	pc.SetSendLimit(maxPacket)
	setSendBuffer(pc.UnixConn().SyscallConn, m.cfg.MaxReplyQueue)
	s := newSession(m, pc, cred, maxPacket)
	m.sessions[s] = struct{}{}
	m.wg.Add(1)
	m.mu.Unlock()
	if victim != nil {
		victim.evict(why)
	}
	go s.run()
}

// evictableLocked picks the session to drop to admit a new one, and says
// why: a connection that has not said hello within helloGrace, else an
// unresponsive session (docs/quotas.md, "Idle sessions"), those that hold
// nothing (no export, nameservice connection or bind in progress) before
// the others, which go only once unresponsive for a further ping timeout,
// and among equals the one that joined last: a flood of
// squatters is newer than the domains it would crowd out. Nil if none.
func (m *Monitor) evictableLocked(now time.Time) (*session, string) {
	var best *session
	bestRank := 0
	for s := range m.sessions {
		rank := 0
		switch {
		case s.id == 0 && now.Sub(s.born) > helloGrace:
			rank = 3
		case s.id != 0 && s.unresponsiveSince.Load() != 0:
			since := time.Unix(0, s.unresponsiveSince.Load())
			switch {
			case len(s.exports) == 0 && s.nsConns == 0 && s.pendingBinds() == 0:
				rank = 2
			case now.Sub(since) >= m.cfg.PingTimeout:
				// A session that holds something waits one more ping
				// timeout before it may go: squatters pinged a moment
				// after it must be marked first, or the domain whose
				// ping expired first would be dropped in their place.
				rank = 1
			default:
				continue
			}
		default:
			continue
		}
		if rank > bestRank || (rank == bestRank && s.born.After(best.born)) {
			best, bestRank = s, rank
		}
	}
	switch bestRank {
	case 0:
		return nil, ""
	case 3:
		return best, "no hello yet, and the monitor is full"
	}
	return best, "unresponsive (it did not read the monitor's ping), and the monitor is full"
}

// evict ends s to make room for others, with a rate-limited warning.
func (s *session) evict(why string) {
	s.m.mu.Lock()
	id, program := s.id, s.program
	s.m.mu.Unlock()
	s.m.rlog.Log(slog.LevelWarn, "evicted", "session evicted", "pid", s.pid, "domain", id, "program", program, "reason", why)
	s.end(fmt.Errorf("%w: %s", errEvicted, why))
}

// refuse answers a refused connection's hello with an error reply of
// status limit whose detail is detail; the caller closes it. It waits up
// to wait for the hello (not at all if wait is 0), and reads nothing but
// that one packet: a refused peer costs one bounded read. done, if not
// nil, is called once the wait is over, before the answer is sent.
func refuse(pc *seqpacket.Conn, detail string, wait time.Duration, done func()) {
	uc := pc.UnixConn()
	var frame []byte
	if wait > 0 {
		uc.SetReadDeadline(time.Now().Add(wait))
		f, caps, err := pc.Receive()
		if done != nil {
			done()
		}
		wire.CloseCaps(caps)
		if err != nil {
			return
		}
		frame = f
	} else {
		// Only what is there already: one try, without waiting. Without
		// room for a control message, the kernel closes any descriptors
		// that came with the packet.
		rc, err := uc.SyscallConn()
		if err != nil {
			return
		}
		buf := make([]byte, MaxCallFrame)
		n := 0
		rc.Read(func(fd uintptr) bool {
			n, _, _, _, err = syscall.Recvmsg(int(fd), buf, nil, syscall.MSG_DONTWAIT)
			return true
		})
		if err != nil || n <= 0 {
			return
		}
		frame = buf[:n]
	}
	var in interconnect.Incoming
	if in.SetFrame(frame, nil) != nil || in.Kind != wire.KindCall || in.Header.Msg != proto.MsgHello {
		return
	}
	var b wire.Buffer
	if wire.AppendErrorReply(&b, proto.MsgHello, wire.Status{Code: wire.Errval(proto.StatusLimit), Detail: detail}) != nil {
		return
	}
	wire.SetCallID(b.B, in.Header.CallID)
	uc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	pc.Send(b.B, nil)
}
