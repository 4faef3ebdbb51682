package monitor

import (
	"context"
	"log/slog"
	"time"

	proto "github.com/chanos/chanos/internal/protocol/monitor"
)

// The janitor is one goroutine that, a few times per ping timeout (at
// most once a second), looks at every session: it pings those idle for
// the idle timeout, marks unresponsive those that leave the ping unread
// for the ping timeout, takes back the reply memory of large replies once
// their domains have read them, and flushes the counts of the
// rate-limited logs.
//
// What a ping proves. The monitor sends an idle session a ping message
// and watches its socket: when the kernel holds nothing the domain has
// not read (SIOCOUTQ), the domain has read the ping, and that is its
// answer; a call from the domain answers too. A Go domain reads its
// socket in the Domain's own goroutine, whatever the program's goroutines
// do, so a program that joined and sleeps keeps answering. libchanos has
// no thread: a C domain answers whenever the program calls into it (any
// call on the domain; chanos_domain_poll). A squatter that said hello and
// never reads never answers. Nothing on the socket tells a squatter from
// a C program asleep in sleep(3), so an unresponsive session is not
// dropped for that alone: only when the monitor is full and a new domain
// wants its place, or when the monitor's reply memory runs out and it
// holds some (docs/quotas.md).

func (m *Monitor) tick() time.Duration {
	d := min(m.cfg.IdleTimeout, m.cfg.PingTimeout) / 4
	return min(max(d, 5*time.Millisecond), time.Second)
}

// janitor runs until the monitor stops.
func (m *Monitor) janitor() {
	defer m.wg.Done()
	t := time.NewTicker(m.tick())
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			m.rlog.Close()
			return
		case <-t.C:
		}
		m.sweep(time.Now())
	}
}

// sweep checks every session that has said hello once.
func (m *Monitor) sweep(now time.Time) {
	m.mu.Lock()
	list := make([]*session, 0, len(m.domains))
	for _, s := range m.domains {
		list = append(list, s)
	}
	m.mu.Unlock()
	for _, s := range list {
		if s.ctx.Err() != nil {
			continue
		}
		s.refreshReply()
		s.checkLiveness(now)
	}
}

// checkLiveness pings s when it has been idle for the idle timeout, and
// marks it unresponsive when a ping stays unread for the ping timeout.
// Only the janitor calls it.
func (s *session) checkLiveness(now time.Time) {
	m := s.m
	last := time.Unix(0, s.lastActive.Load())
	if s.pingSince.IsZero() {
		if now.Sub(last) < m.cfg.IdleTimeout {
			return
		}
		outq, err := s.outq()
		if err != nil {
			return
		}
		s.pingSince = now
		if outq == 0 {
			s.sendPing()
		}
		// Otherwise what the domain has not read yet serves as the ping.
		return
	}
	answered := last.After(s.pingSince)
	if !answered {
		if outq, err := s.outq(); err == nil && outq == 0 {
			answered = true
		}
	}
	if answered {
		s.pingSince = time.Time{}
		s.lastActive.Store(now.UnixNano())
		if s.unresponsiveSince.Swap(0) != 0 {
			s.log.Info("session answers again")
		}
		return
	}
	if now.Sub(s.pingSince) >= m.cfg.PingTimeout && s.unresponsiveSince.Load() == 0 {
		s.unresponsiveSince.Store(now.UnixNano())
		m.rlog.Log(slog.LevelInfo, "unresponsive", "session unresponsive: it did not read the monitor's ping",
			"pid", s.pid, "domain", s.id, "program", s.program, "ping_timeout", m.cfg.PingTimeout)
	}
}

// sendPing sends s a ping, from a goroutine of its own (one at a time per
// session) so that a send that must wait holds up no one else.
func (s *session) sendPing() {
	if !s.pinging.CompareAndSwap(false, true) {
		return
	}
	s.pingSeq++
	seq := s.pingSeq
	m := s.m
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		s.pinging.Store(false)
		return
	}
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		defer s.pinging.Store(false)
		ctx, cancel := context.WithTimeout(s.ctx, m.cfg.PingTimeout)
		defer cancel()
		if err := s.conn.Send(ctx, &proto.Ping{Seq: seq}); err != nil {
			s.log.Debug("ping not sent", "err", err)
		}
	}()
}
