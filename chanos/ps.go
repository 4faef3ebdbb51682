package chanos

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/chanos/chanos/internal/protocol/monitor"
)

// PsVersion is the version of the ps JSON schema (Snapshot.Version).
const PsVersion = 1

// Snapshot is the monitor's answer to ps: the JSON document of
// docs/monitor-protocol.md, as Domain.Ps returns it. Tokens are never
// included.
type Snapshot struct {
	// Version is PsVersion.
	Version int `json:"version"`
	// Monitor describes the monitor.
	Monitor MonitorInfo `json:"monitor"`
	// Domains lists the domains, the monitor itself (domain id 1) first,
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

	// The quotas of docs/quotas.md, for all domains together and per
	// domain, and what is in use of those counted in total.
	MaxTotalExports      int   `json:"max_exports,omitempty"`
	MaxNSConns           int   `json:"max_ns_conns_per_domain,omitempty"`
	MaxTotalNSConns      int   `json:"max_ns_conns,omitempty"`
	NSConns              int   `json:"ns_conns"`
	MaxNames             int   `json:"max_names_per_domain,omitempty"`
	MaxTotalNames        int   `json:"max_names,omitempty"`
	Names                int   `json:"names"` // set through the nameservice
	MaxTotalPendingBinds int   `json:"max_pending_binds,omitempty"`
	PendingBinds         int   `json:"pending_binds"` // binds and nameservice waits in progress
	MaxTotalWatches      int   `json:"max_watches,omitempty"`
	Watches              int   `json:"watches"`
	MaxConnRecords       int   `json:"max_conn_records_per_domain,omitempty"`
	MaxReplyQueue        int   `json:"max_reply_queue_per_domain,omitempty"`
	MaxReplyMemory       int   `json:"max_reply_memory_per_domain,omitempty"`
	MaxTotalReplyMemory  int   `json:"max_reply_memory,omitempty"`
	ReplyMemory          int   `json:"reply_memory"`
	Unresponsive         int   `json:"unresponsive"` // sessions that left a ping unread
	MemoryBound          int64 `json:"memory_bound,omitempty"`
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
	// Unresponsive is set while the domain leaves the monitor's ping
	// unread (docs/quotas.md, "Idle sessions"): it may be dropped when
	// the monitor runs short of sessions or of reply memory.
	Unresponsive bool `json:"unresponsive,omitempty"`
}

// ExportInfo describes an export.
type ExportInfo struct {
	Name     string `json:"name"`
	Iface    string `json:"iface"`
	ExportID uint64 `json:"export_id"`
	MaxFrame uint32 `json:"max_frame"`
	// Fingerprint is the export's interface fingerprint, 16 hex digits,
	// or empty where the exporter declared none (docs/idl.md).
	Fingerprint string `json:"fingerprint,omitempty"`
	// Private is set for a private export: bound by iref only.
	Private bool `json:"private,omitempty"`
	// AllowUIDs and AllowPrograms are the export's allow-lists, if any.
	AllowUIDs     []uint32 `json:"allow_uids,omitempty"`
	AllowPrograms []string `json:"allow_programs,omitempty"`
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
	// Via is "local", "ump" or "net".
	Via string `json:"via"`
	// Machine, for a connection between machines, is the other machine's
	// id (hex): Peer is a domain there.
	Machine string `json:"machine,omitempty"`
	// AuthOnly marks a connection between machines that is authenticated
	// but not encrypted (both machines' monitors run --net-auth-only).
	AuthOnly bool `json:"auth_only,omitempty"`
}

// Ps asks the monitor for its ps document: the monitor, its domains,
// their exports and connections.
func (d *Domain) Ps(ctx context.Context) (*Snapshot, error) { return d.PsOf(ctx, 0) }

// PsOf asks for the ps document of machine, another machine of the
// cluster (as Machines lists them; 0 is this one): this monitor asks that
// machine's over their control link. Another machine's document is at
// most 256 KiB (Truncated says when domains were left out); a machine
// this one has no control link to gives an error matching ErrNoRoute.
func (d *Domain) PsOf(ctx context.Context, machine uint64) (*Snapshot, error) {
	var r monitor.PsReply
	if err := d.call(ctx, &monitor.PsCall{Machine: machine}, &r); err != nil {
		return nil, fmt.Errorf("chanos: ps: %w", err)
	}
	var s Snapshot
	if err := json.Unmarshal(r.JSON, &s); err != nil {
		return nil, fmt.Errorf("chanos: ps: %w", err)
	}
	return &s, nil
}
