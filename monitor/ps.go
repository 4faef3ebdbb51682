package monitor

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// PsVersion is the version of the ps JSON schema (Snapshot.Version).
const PsVersion = 1

// Snapshot is the monitor's answer to ps: the JSON document of
// docs/monitor-protocol.md. Tokens are never included.
type Snapshot struct {
	// Version is PsVersion.
	Version int `json:"version"`
	// Monitor describes the monitor.
	Monitor MonitorInfo `json:"monitor"`
	// Domains lists the domains, the monitor itself (SelfDomainID) first,
	// then by id.
	Domains []DomainInfo `json:"domains"`
	// Truncated is set when domains were left out to fit the reply's
	// bound.
	Truncated bool `json:"truncated,omitempty"`
}

// MonitorInfo describes a monitor.
type MonitorInfo struct {
	// MachineID is the machine id, 16 hex digits (a JSON number would
	// lose bits in many readers).
	MachineID string    `json:"machine_id"`
	DomainID  uint64    `json:"domain_id"`
	PID       int       `json:"pid"`
	UID       uint32    `json:"uid"`
	Dir       string    `json:"dir"`
	Socket    string    `json:"socket"`
	Started   time.Time `json:"started"`
	Protocol  int       `json:"protocol"`
	Limits    Limits    `json:"limits"`
}

// Limits are the monitor's limits and the current counts they bound.
type Limits struct {
	MaxDomains      int    `json:"max_domains"`
	Domains         int    `json:"domains"` // current sessions, including those not past hello
	MaxExports      int    `json:"max_exports_per_domain"`
	MaxPendingBinds int    `json:"max_pending_binds_per_domain"`
	MaxFrame        uint32 `json:"max_frame"`
	Exports         int    `json:"exports"`     // current exports, the nameservice's included
	Connections     int    `json:"connections"` // current connection records
}

// DomainInfo describes a domain.
type DomainInfo struct {
	ID          uint64       `json:"id"`
	PID         int32        `json:"pid"`
	UID         uint32       `json:"uid"`
	Program     string       `json:"program"`
	Joined      time.Time    `json:"joined"`
	Exports     []ExportInfo `json:"exports"`
	Connections []ConnInfo   `json:"connections"`
}

// ExportInfo describes an export.
type ExportInfo struct {
	Name     string `json:"name"`
	Iface    string `json:"iface"`
	ExportID uint64 `json:"export_id"`
	MaxFrame uint32 `json:"max_frame"`
}

// ConnInfo describes a connection from one domain's side.
type ConnInfo struct {
	ConnID uint64 `json:"conn_id"`
	// Peer is the domain at the other end.
	Peer uint64 `json:"peer"`
	// Role is "client" (this domain bound) or "server" (it exported).
	Role     string `json:"role"`
	Name     string `json:"name"`
	ExportID uint64 `json:"export_id"`
	// Via is "local" or "ump".
	Via string `json:"via"`
}

// snapshot builds the monitor's Snapshot.
func (m *Monitor) snapshot() *Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	snap := &Snapshot{
		Version: PsVersion,
		Monitor: MonitorInfo{
			MachineID: fmt.Sprintf("%016x", m.machineID),
			DomainID:  SelfDomainID,
			PID:       m.pid,
			UID:       m.uid,
			Dir:       m.dir,
			Socket:    m.sockPath,
			Started:   m.started.UTC().Truncate(time.Millisecond),
			Protocol:  proto.ProtocolVersion,
			Limits: Limits{
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
	byID := map[uint64]*DomainInfo{}
	self := DomainInfo{
		ID: SelfDomainID, PID: int32(m.pid), UID: m.uid, Program: "chanos monitor",
		Joined: snap.Monitor.Started, Exports: []ExportInfo{}, Connections: []ConnInfo{},
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
		d := DomainInfo{
			ID: id, PID: s.pid, UID: s.uid, Program: s.program,
			Joined: s.born.UTC().Truncate(time.Millisecond), Exports: []ExportInfo{}, Connections: []ConnInfo{},
		}
		for _, e := range s.exports {
			d.Exports = append(d.Exports, exportInfo(e))
		}
		slices.SortFunc(d.Exports, func(a, b ExportInfo) int { return cmp.Compare(a.Name, b.Name) })
		snap.Domains = append(snap.Domains, d)
	}
	for i := range snap.Domains {
		byID[snap.Domains[i].ID] = &snap.Domains[i]
	}
	for _, c := range m.conns {
		if d := byID[c.client]; d != nil {
			d.Connections = append(d.Connections, ConnInfo{ConnID: c.id, Peer: c.server, Role: "client", Name: c.name, ExportID: c.export, Via: c.via.String()})
		}
		if d := byID[c.server]; d != nil && c.server != c.client {
			d.Connections = append(d.Connections, ConnInfo{ConnID: c.id, Peer: c.client, Role: "server", Name: c.name, ExportID: c.export, Via: c.via.String()})
		}
	}
	for i := range snap.Domains {
		slices.SortFunc(snap.Domains[i].Connections, func(a, b ConnInfo) int { return cmp.Compare(a.ConnID, b.ConnID) })
	}
	return snap
}

func exportInfo(e *export) ExportInfo {
	return ExportInfo{Name: e.name, Iface: e.iface, ExportID: e.id, MaxFrame: e.maxFrame}
}

// marshalSnapshot encodes snap as JSON of at most limit bytes, leaving
// out domains from the end (and setting Truncated) if it must.
func marshalSnapshot(snap *Snapshot, limit int) ([]byte, error) {
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
