package monitor

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/chanos/genrt"
	"github.com/chanos/chanos/interconnect"
	machproto "github.com/chanos/chanos/internal/protocol/machine"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// The ps document is written domain by domain into a buffer of its
// bound, so that building it takes memory in proportion to that bound,
// not to the monitor's state: a domain that does not fit is left out
// (truncated), and the rest with it.
//
// What a ps may make the monitor allocate, and so reserves before it
// starts (psReservation): the document (limit bytes), the frame that
// carries it (as much again, encoded by the connection engine) and
// headroom for the growth of those buffers (as much again, at most), the
// ids of the domains and of one domain's connection records, sorted, and
// psSlack for one domain's copied entries and one item being encoded.
const psSlack = 64 << 10

// psTail is the room kept at the end of the document to close it.
const psTail = len(`],"truncated":true}`)

// psLimit returns the bound of the ps document for s: the protocol's,
// one packet of its socket (header and length included), and what the
// domain's reply memory can hold.
func (m *Monitor) psLimit(s *session) int {
	fixed := psSlack + m.psIndexBytes()
	return max(min(proto.MaxPsJSONLen, s.maxPacket-wire.HeaderSize-4, (m.cfg.MaxReplyMemory-fixed)/3), 0)
}

// psIndexBytes bounds the sorted ids a ps copies: every domain's, and one
// domain's connection records (a server's may be every client's).
func (m *Monitor) psIndexBytes() int {
	return 8*(m.cfg.MaxDomains+1) + 8*m.cfg.MaxDomains*m.cfg.MaxConnRecords
}

// psReservation is the reply memory a ps whose document is bounded by
// limit reserves.
func (m *Monitor) psReservation(limit int) int {
	return 3*limit + psSlack + m.psIndexBytes()
}

// ps answers a ps call itself (it returns genrt.Replied): it reserves the
// worst case of its reply, builds the document, makes room for it in the
// socket and sends it, then keeps the reply's bytes reserved until the
// domain has read them (refreshReply).
func (s *session) ps(ctx context.Context, in *chanos.Incoming, machine uint64) (wire.Message, error) {
	m := s.m
	remote := machine != 0 && machine != m.machineID
	var conn *chanos.Conn
	if remote {
		m.mu.Lock()
		conn = m.machineConns[machine]
		m.mu.Unlock()
		if conn == nil {
			return nil, fail(proto.StatusNoRoute, "ps of machine %016x: this machine has no control link to it", machine)
		}
	}
	s.refreshReply()
	m.mu.Lock()
	unread := s.replyUnread
	m.mu.Unlock()
	if unread > 0 {
		return nil, exhausted("ps: this domain has not read its previous ps reply (%d bytes) yet", unread)
	}
	if q, err := s.outq(); err == nil && q > m.cfg.MaxReplyQueue/2 {
		return nil, exhausted("ps: %d bytes of earlier replies to this domain are unread (its reply queue is %d bytes, --max-reply-queue)", q, m.cfg.MaxReplyQueue)
	}
	limit := m.psLimit(s)
	if remote {
		limit = min(limit, machproto.MaxPsJSONLen)
	}
	need := m.psReservation(limit)
	if err := m.reserveReply(s, need); err != nil {
		return nil, err
	}
	var b []byte
	var err error
	if remote {
		var r machproto.PsReply
		if err = conn.Call(ctx, &machproto.PsCall{}, &r); err != nil {
			m.releaseReply(s, need)
			if ctx.Err() != nil {
				return nil, errCancelled
			}
			return nil, fail(proto.StatusNoRoute, "ps of machine %016x: %v", machine, err)
		}
		if len(r.JSON) > limit {
			m.releaseReply(s, need)
			return nil, fail(proto.StatusLimit, "ps of machine %016x: %d bytes, over this domain's %d", machine, len(r.JSON), limit)
		}
		b = r.JSON
	} else if b, err = m.psDocument(limit); err != nil {
		m.releaseReply(s, need)
		return nil, fail(proto.StatusInternal, "%v", err)
	}
	frameLen := wire.HeaderSize + 4 + len(b)
	raised := false
	if outq, err := s.outq(); err == nil && outq+frameLen+sockSlack > m.cfg.MaxReplyQueue/2 {
		s.setSendBuffer(outq + frameLen + sockSlack + m.cfg.MaxReplyQueue)
		raised = true
	}
	err = s.conn.Reply(ctx, in, &proto.PsReply{JSON: b}, nil)
	keep := 0
	if err == nil {
		keep = min(frameLen, need)
	}
	m.mu.Lock()
	s.replyMem -= need - keep
	m.replyMem -= need - keep
	if keep > 0 {
		s.replyUnread, s.replySent = keep, time.Now()
	}
	m.mu.Unlock()
	if keep == 0 && raised {
		s.setSendBuffer(m.cfg.MaxReplyQueue)
	}
	if err != nil && interconnect.IsEnd(err) {
		return genrt.Replied, err
	}
	return genrt.Replied, nil
}

// psHead is the document's beginning: the domains follow.
type psHead struct {
	Version int                `json:"version"`
	Monitor chanos.MonitorInfo `json:"monitor"`
}

// monitorInfo describes the monitor, with its limits and counts.
func (m *Monitor) monitorInfo() chanos.MonitorInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	unresponsive := 0
	for _, s := range m.domains {
		if _, live := m.sessions[s]; live && s.unresponsiveSince.Load() != 0 {
			unresponsive++
		}
	}
	c := &m.cfg
	return chanos.MonitorInfo{
		MachineID: fmt.Sprintf("%016x", m.machineID),
		DomainID:  SelfDomainID,
		PID:       m.pid,
		UID:       m.uid,
		Dir:       m.dir,
		Socket:    m.sockPath,
		Started:   m.started.UTC().Truncate(time.Millisecond),
		Protocol:  proto.ProtocolVersion,
		Limits: chanos.Limits{
			MaxDomains:           c.MaxDomains,
			Domains:              len(m.sessions),
			MaxExports:           c.MaxExports,
			MaxPendingBinds:      c.MaxPendingBinds,
			MaxFrame:             c.MaxFrame,
			Exports:              len(m.exports),
			Connections:          len(m.conns),
			MaxTotalExports:      c.MaxTotalExports,
			MaxNSConns:           c.MaxNSConns,
			MaxTotalNSConns:      c.MaxTotalNSConns,
			NSConns:              m.nsConnCount,
			MaxNames:             c.MaxNames,
			MaxTotalNames:        c.MaxTotalNames,
			Names:                m.names,
			MaxTotalPendingBinds: c.MaxTotalPendingBinds,
			PendingBinds:         int(m.waits.Load()),
			MaxTotalWatches:      c.MaxTotalWatches,
			Watches:              m.watches,
			MaxConnRecords:       c.MaxConnRecords,
			MaxReplyQueue:        c.MaxReplyQueue,
			MaxReplyMemory:       c.MaxReplyMemory,
			MaxTotalReplyMemory:  c.MaxTotalReplyMemory,
			ReplyMemory:          m.replyMem,
			Unresponsive:         unresponsive,
			MemoryBound:          c.MemoryBound(),
		},
	}
}

// psDomain is one domain's entry, copied out under the lock.
type psDomain struct {
	info    chanos.DomainInfo // without exports and connections
	exports []chanos.ExportInfo
	conns   []chanos.ConnInfo
}

// domainEntry copies domain id's entry, with at most maxItems exports and
// as many connections (the first by name and by id; a domain with more
// would not fit anyway). It reports false if the domain has gone.
func (m *Monitor) domainEntry(id uint64, maxItems int) (psDomain, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var d psDomain
	var recs []*connRec
	if id == SelfDomainID {
		d.info = chanos.DomainInfo{ID: SelfDomainID, PID: int32(m.pid), UID: m.uid, Program: "chanos monitor",
			Joined: m.started.UTC().Truncate(time.Millisecond)}
		if m.ns != nil {
			d.exports = append(d.exports, exportInfo(m.ns))
		}
		if m.spawnd != nil {
			d.exports = append(d.exports, exportInfo(m.spawnd.exp))
		}
	} else {
		s := m.domains[id]
		if _, live := m.sessions[s]; s == nil || !live {
			// Gone, or evicted (out of sessions at once, so that its place
			// is a newcomer's) while its goroutine still cleans up.
			return d, false
		}
		d.info = chanos.DomainInfo{ID: id, PID: s.pid, UID: s.uid, Program: s.program,
			Joined: s.born.UTC().Truncate(time.Millisecond), Unresponsive: s.unresponsiveSince.Load() != 0}
		d.exports = make([]chanos.ExportInfo, 0, len(s.exports))
		for _, e := range s.exports {
			d.exports = append(d.exports, exportInfo(e))
		}
		slices.SortFunc(d.exports, func(a, b chanos.ExportInfo) int { return cmp.Compare(a.Name, b.Name) })
		d.exports = d.exports[:min(len(d.exports), maxItems)]
		for _, cid := range s.records {
			if rec := m.conns[cid]; rec != nil && rec.client == id && !rec.inbound {
				recs = append(recs, rec)
			}
		}
	}
	for _, rec := range m.served[id] {
		recs = append(recs, rec)
	}
	slices.SortFunc(recs, func(a, b *connRec) int { return cmp.Compare(a.id, b.id) })
	recs = recs[:min(len(recs), maxItems)]
	d.conns = make([]chanos.ConnInfo, 0, len(recs))
	for _, c := range recs {
		ci := chanos.ConnInfo{ConnID: c.id, Peer: c.client, Role: "server", Name: c.name, ExportID: c.export, Via: c.via.String()}
		if c.client == id && !c.inbound {
			ci.Peer, ci.Role = c.server, "client"
		}
		if c.machine != 0 {
			ci.Machine = machineText(c.machine)
			ci.AuthOnly = c.authOnly
		}
		d.conns = append(d.conns, ci)
	}
	return d, true
}

func exportInfo(e *export) chanos.ExportInfo {
	return chanos.ExportInfo{
		Name: e.name, Iface: e.iface, ExportID: e.id, MaxFrame: e.maxFrame,
		Fingerprint: fingerprintText(e.fingerprint),
		Private:     e.policy.private, AllowUIDs: e.policy.uids, AllowPrograms: e.policy.programs,
	}
}

// psMinItem is less than the JSON of any export or connection entry.
const psMinItem = 48

// psDocument writes the ps document, of at most limit bytes: the monitor,
// then the domains by id for as long as they fit. Domains left out set
// "truncated".
func (m *Monitor) psDocument(limit int) ([]byte, error) {
	head, err := json.Marshal(psHead{Version: chanos.PsVersion, Monitor: m.monitorInfo()})
	if err != nil {
		return nil, err
	}
	const open = `,"domains":[`
	if len(head)-1+len(open)+psTail > limit {
		return nil, fmt.Errorf("ps: the monitor's own description exceeds %d bytes", limit)
	}
	buf := make([]byte, 0, limit)
	buf = append(buf, head[:len(head)-1]...) // without its closing brace
	buf = append(buf, open...)
	m.mu.Lock()
	ids := make([]uint64, 0, len(m.domains)+1)
	for id := range m.domains {
		ids = append(ids, id)
	}
	m.mu.Unlock()
	slices.Sort(ids)
	ids = slices.Insert(ids, 0, SelfDomainID)
	// A domain may take the room of the closing "]}" as long as it is the
	// last; if another does not fit after it, it goes too, to leave the
	// room of the longer closing that says "truncated".
	room := limit - len("]}")
	truncated, first, prev := false, true, -1
	for _, id := range ids {
		d, ok := m.domainEntry(id, max(room-len(buf), 0)/psMinItem+1)
		if !ok {
			continue // gone meanwhile
		}
		mark := len(buf)
		if !first {
			buf = append(buf, ',')
		}
		if buf, ok = appendDomain(buf, &d, room); !ok {
			buf, truncated = buf[:mark], true
			if len(buf)+psTail > limit && prev >= 0 {
				buf = buf[:prev]
			}
			break
		}
		first, prev = false, mark
	}
	buf = append(buf, ']')
	if truncated {
		buf = append(buf, `,"truncated":true`...)
	}
	return append(buf, '}'), nil
}

// appendDomain appends d's JSON to buf, as encoding/json writes a
// chanos.DomainInfo, unless it would pass room bytes: then it reports
// false (buf holds part of it).
func appendDomain(buf []byte, d *psDomain, room int) ([]byte, bool) {
	add := func(v any) bool {
		b, err := json.Marshal(v)
		if err != nil || len(buf)+len(b) > room {
			return false
		}
		buf = append(buf, b...)
		return true
	}
	lit := func(s string) bool {
		if len(buf)+len(s) > room {
			return false
		}
		buf = append(buf, s...)
		return true
	}
	i := d.info
	ok := lit(fmt.Sprintf(`{"id":%d,"pid":%d,"uid":%d,"program":`, i.ID, i.PID, i.UID)) &&
		add(i.Program) && lit(`,"joined":`) && add(i.Joined) && lit(`,"exports":[`)
	for k := range d.exports {
		ok = ok && (k == 0 || lit(",")) && add(&d.exports[k])
	}
	ok = ok && lit(`],"connections":[`)
	for k := range d.conns {
		ok = ok && (k == 0 || lit(",")) && add(&d.conns[k])
	}
	if i.Unresponsive {
		ok = ok && lit(`],"unresponsive":true}`)
	} else {
		ok = ok && lit("]}")
	}
	return buf, ok
}

// fingerprintText writes a fingerprint as ps shows it: 16 hex digits (a
// JSON number would lose its low bits), or "" for none.
func fingerprintText(fp uint64) string {
	if fp == 0 {
		return ""
	}
	return fmt.Sprintf("%016x", fp)
}
