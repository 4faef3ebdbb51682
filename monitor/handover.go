package monitor

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// Listeners as capabilities (docs/capabilities.md, "Listeners"): a domain
// hands one of its exports over to another domain of this machine, which
// then accepts its connections and owns its name, as L4 passes an IPC
// gate. The grant is a one-time iref whose token is not the export's: it
// lets one domain take the export over, not bind it.

// HandOverTTL is the default of Config.HandOverTTL: how long an export
// handed over waits for its adopter; then it is withdrawn.
const HandOverTTL = time.Minute

// transit is an export being handed over, under Monitor.mu.
type transit struct {
	token   [16]byte
	from    uint64        // the domain that handed it over
	adopted chan struct{} // closed when adopted, or withdrawn unadopted
	timer   *time.Timer
}

// exportKey is the key of e among its domain's exports: its name, or
// "#ID" for an export without one.
func exportKey(e *export) string {
	if e.name == "" {
		return fmt.Sprintf("#%d", e.id)
	}
	return e.name
}

// handOver detaches the caller's export c.Export and returns the grant
// that adopts it. Its name passes to the monitor until it is adopted.
func (s *session) handOver(ctx context.Context, c *proto.HandOverCall) (wire.Message, error) {
	m := s.m
	m.mu.Lock()
	e := m.exports[c.Export]
	if e == nil || e.domain != s || e.transit != nil {
		m.mu.Unlock()
		return nil, fail(proto.StatusNotFound, "hand_over: this domain has no export %d to hand over", c.Export)
	}
	t := &transit{from: s.id, adopted: make(chan struct{})}
	if _, err := rand.Read(t.token[:]); err != nil {
		m.mu.Unlock()
		return nil, fail(proto.StatusInternal, "hand_over: %v", err)
	}
	e.transit = t
	delete(s.exports, exportKey(e))
	m.mu.Unlock()
	if e.name != "" {
		if err := m.store.Transfer(ctx, e.name, names.Owner(s.id), names.Owner(SelfDomainID)); err != nil {
			m.mu.Lock()
			e.transit = nil
			s.exports[exportKey(e)] = e
			m.mu.Unlock()
			return nil, fail(proto.StatusInternal, "hand_over %q: the name: %v", e.name, err)
		}
	}
	m.mu.Lock()
	t.timer = time.AfterFunc(m.cfg.HandOverTTL, func() { m.expireHandOver(e, t) })
	m.mu.Unlock()
	s.log.Info("hand over", "name", exportKey(e), "export", e.id)
	return &proto.HandOverReply{Grant: wire.Iref{Machine: m.machineID, Export: e.id, Token: t.token}}, nil
}

// expireHandOver withdraws e if t's grant was not used in time.
func (m *Monitor) expireHandOver(e *export, t *transit) {
	m.mu.Lock()
	if e.transit != t {
		m.mu.Unlock()
		return
	}
	e.transit = nil
	delete(m.exports, e.id)
	m.mu.Unlock()
	m.log.Info("an export handed over was not adopted in time; withdrawn", "name", exportKey(e), "export", e.id)
	if e.name != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.store.Remove(ctx, e.name, names.Owner(SelfDomainID)); err != nil && !errors.Is(err, names.ErrNotFound) {
			m.log.Warn("withdraw an export handed over", "name", e.name, "err", err)
		}
	}
	// The binds that waited learn of the withdrawal once the name has
	// gone too.
	close(t.adopted)
}

// adopt makes the caller the exporting domain of the export c.Grant
// names, and owner of its name.
func (s *session) adopt(ctx context.Context, c *proto.AdoptCall) (wire.Message, error) {
	m := s.m
	if c.Grant.Machine != m.machineID {
		return nil, fail(proto.StatusNoRoute, "adopt: the grant is for an export of machine %016x; an export is adopted on its own machine", c.Grant.Machine)
	}
	m.mu.Lock()
	e := m.exports[c.Grant.Export]
	var t *transit
	if e != nil {
		t = e.transit
	}
	switch {
	case t == nil:
		m.mu.Unlock()
		return nil, fail(proto.StatusNotFound, "adopt: export %d is not being handed over (adopted already, or withdrawn)", c.Grant.Export)
	case subtle.ConstantTimeCompare(t.token[:], c.Grant.Token[:]) != 1:
		m.mu.Unlock()
		return nil, fail(proto.StatusDenied, "adopt: a wrong grant for export %d", c.Grant.Export)
	case e.iface != c.Iface:
		m.mu.Unlock()
		return nil, fail(proto.StatusMismatch, "adopt: export %d is of interface %q, not %q", e.id, e.iface, c.Iface)
	case e.fingerprint != 0 && c.Fingerprint != 0 && e.fingerprint != c.Fingerprint:
		m.mu.Unlock()
		return nil, fail(proto.StatusMismatch, "adopt: interface %s: the export's fingerprint is %016x, the adopter's %016x", c.Iface, e.fingerprint, c.Fingerprint)
	case len(s.exports) >= m.cfg.MaxExports:
		m.mu.Unlock()
		return nil, exhausted("adopt: this domain has %d exports, its quota (--max-exports)", m.cfg.MaxExports)
	}
	// Taken by this call: a second adopt finds no transit.
	e.transit = nil
	t.timer.Stop()
	m.mu.Unlock()
	if e.name != "" {
		if err := m.store.Transfer(ctx, e.name, names.Owner(SelfDomainID), names.Owner(s.id)); err != nil {
			m.mu.Lock()
			delete(m.exports, e.id)
			close(t.adopted)
			m.mu.Unlock()
			m.store.Remove(context.Background(), e.name, names.Owner(SelfDomainID))
			return nil, fail(proto.StatusInternal, "adopt %q: the name: %v (the export is withdrawn)", e.name, err)
		}
	}
	m.mu.Lock()
	if m.closed || m.domains[s.id] != s {
		delete(m.exports, e.id)
		close(t.adopted)
		m.mu.Unlock()
		if e.name != "" {
			m.store.Remove(context.Background(), e.name, names.Owner(s.id))
		}
		return nil, errCancelled
	}
	e.domain = s
	s.exports[exportKey(e)] = e
	close(t.adopted)
	m.mu.Unlock()
	s.log.Info("adopt", "name", exportKey(e), "export", e.id, "from", t.from)
	return &proto.AdoptReply{Ref: e.ref, Name: e.name, MaxFrame: e.maxFrame, Private: e.policy.private}, nil
}

// awaitAdoption waits, for a bind, until the export e being handed over
// is adopted (true) or withdrawn, or ctx ends.
func (m *Monitor) awaitAdoption(ctx context.Context, e *export) bool {
	m.mu.Lock()
	t := e.transit
	m.mu.Unlock()
	if t == nil {
		return true
	}
	select {
	case <-t.adopted:
	case <-ctx.Done():
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exports[e.id] == e && e.transit == nil
}
