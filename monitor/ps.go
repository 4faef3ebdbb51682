package monitor

import (
	"cmp"
	"encoding/json"
	"fmt"
	"github.com/chanos/chanos/chanos"
	"slices"
	"time"

	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// snapshot builds the monitor's chanos.Snapshot.
func (m *Monitor) snapshot() *chanos.Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	snap := &chanos.Snapshot{
		Version: chanos.PsVersion,
		Monitor: chanos.MonitorInfo{
			MachineID: fmt.Sprintf("%016x", m.machineID),
			DomainID:  SelfDomainID,
			PID:       m.pid,
			UID:       m.uid,
			Dir:       m.dir,
			Socket:    m.sockPath,
			Started:   m.started.UTC().Truncate(time.Millisecond),
			Protocol:  proto.ProtocolVersion,
			Limits: chanos.Limits{
				MaxDomains:      m.cfg.MaxDomains,
				Domains:         len(m.sessions),
				MaxExports:      m.cfg.MaxExports,
				MaxPendingBinds: m.cfg.MaxPendingBinds,
				MaxFrame:        m.cfg.MaxFrame,
				Exports:         len(m.exports),
				Connections:     len(m.conns),
			},
		},
	}
	byID := map[uint64]*chanos.DomainInfo{}
	self := chanos.DomainInfo{
		ID: SelfDomainID, PID: int32(m.pid), UID: m.uid, Program: "chanos monitor",
		Joined: snap.Monitor.Started, Exports: []chanos.ExportInfo{}, Connections: []chanos.ConnInfo{},
	}
	if m.ns != nil {
		self.Exports = append(self.Exports, exportInfo(m.ns))
	}
	snap.Domains = append(snap.Domains, self)
	ids := make([]uint64, 0, len(m.domains))
	for id := range m.domains {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		s := m.domains[id]
		d := chanos.DomainInfo{
			ID: id, PID: s.pid, UID: s.uid, Program: s.program,
			Joined: s.born.UTC().Truncate(time.Millisecond), Exports: []chanos.ExportInfo{}, Connections: []chanos.ConnInfo{},
		}
		for _, e := range s.exports {
			d.Exports = append(d.Exports, exportInfo(e))
		}
		slices.SortFunc(d.Exports, func(a, b chanos.ExportInfo) int { return cmp.Compare(a.Name, b.Name) })
		snap.Domains = append(snap.Domains, d)
	}
	for i := range snap.Domains {
		byID[snap.Domains[i].ID] = &snap.Domains[i]
	}
	for _, c := range m.conns {
		if d := byID[c.client]; d != nil {
			d.Connections = append(d.Connections, chanos.ConnInfo{ConnID: c.id, Peer: c.server, Role: "client", Name: c.name, ExportID: c.export, Via: c.via.String()})
		}
		if d := byID[c.server]; d != nil && c.server != c.client {
			d.Connections = append(d.Connections, chanos.ConnInfo{ConnID: c.id, Peer: c.client, Role: "server", Name: c.name, ExportID: c.export, Via: c.via.String()})
		}
	}
	for i := range snap.Domains {
		slices.SortFunc(snap.Domains[i].Connections, func(a, b chanos.ConnInfo) int { return cmp.Compare(a.ConnID, b.ConnID) })
	}
	return snap
}

func exportInfo(e *export) chanos.ExportInfo {
	return chanos.ExportInfo{
		Name: e.name, Iface: e.iface, ExportID: e.id, MaxFrame: e.maxFrame,
		Private: e.policy.private, AllowUIDs: e.policy.uids, AllowPrograms: e.policy.programs,
	}
}

// marshalSnapshot encodes snap as JSON of at most limit bytes, leaving
// out domains from the end (and setting Truncated) if it must.
func marshalSnapshot(snap *chanos.Snapshot, limit int) ([]byte, error) {
	for {
		b, err := json.Marshal(snap)
		if err != nil {
			return nil, err
		}
		if len(b) <= limit {
			return b, nil
		}
		if len(snap.Domains) <= 1 {
			return nil, fmt.Errorf("ps: the monitor's own description exceeds %d bytes", limit)
		}
		// Cut in proportion to the excess, by at least one domain.
		n := len(snap.Domains)
		keep := min(n-1, int(int64(n)*int64(limit)/int64(len(b))))
		snap.Domains = snap.Domains[:max(keep, 1)]
		snap.Truncated = true
	}
}

func (s *session) ps() (wire.Message, error) {
	// The document must fit the reply's bound and one packet of the
	// session's socket (header and length included).
	limit := min(proto.MaxPsJSONLen, s.maxPacket-wire.HeaderSize-4)
	b, err := marshalSnapshot(s.m.snapshot(), limit)
	if err != nil {
		return nil, fail(proto.StatusInternal, "%v", err)
	}
	return &proto.PsReply{JSON: b}, nil
}
