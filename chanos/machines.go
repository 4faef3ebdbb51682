package chanos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/chanos/chanos/internal/protocol/monitor"
)

// ErrNoRoute: the name or iref is of an export on another machine of the
// cluster, and this machine has no route to it: binding across machines
// needs the net interconnect, which is not built yet. The error says which
// machine. It is returned at once; a Connect never waits for such a route.
var ErrNoRoute = errors.New("chanos: no route to machine")

// MachineInfo describes one machine of the monitor's cluster, as the
// machines call returns it (docs/monitor-protocol.md).
type MachineInfo struct {
	// ID is the machine's id, as irefs carry it (16 hex digits).
	ID string `json:"id"`
	// Name is the machine's name for people: its credential's.
	Name string `json:"name"`
	// Addr is where its control link listens (host:port), "" if nowhere.
	Addr string `json:"addr,omitempty"`
	// Identity is the key id of its public key ("" out of a cluster).
	Identity string `json:"identity,omitempty"`
	// Version is the chanos version its monitor runs.
	Version string `json:"version,omitempty"`
	// State is "up" for a machine whose lease is alive, and "revoked"
	// or "expired" for one whose credential no longer counts (a
	// revocation list revoked it, or it expired) while its lease is still
	// alive: the listing machine has ended its connections with it. The
	// machines whose lease has expired are not listed.
	State string `json:"state"`
	// Domains and CPU are its load: the domains joined to its monitor,
	// and the share of its CPUs' time that was busy (0 to 1), as of its
	// last update.
	Domains int     `json:"domains"`
	CPU     float64 `json:"cpu"`
	// Self marks the machine whose monitor answered.
	Self bool `json:"self,omitempty"`
}

// MachineList is the machines document.
type MachineList struct {
	// Cluster is the cluster's name, "" for a machine in none.
	Cluster string `json:"cluster"`
	// Machines are sorted by id.
	Machines []MachineInfo `json:"machines"`
}

// Machines asks the monitor for the machines of its cluster: every
// machine registered in the cluster, or this machine alone when its
// monitor is in none.
func (d *Domain) Machines(ctx context.Context) (*MachineList, error) {
	var r monitor.MachinesReply
	if err := d.call(ctx, &monitor.MachinesCall{}, &r); err != nil {
		return nil, fmt.Errorf("chanos: machines: %w", err)
	}
	var l MachineList
	if err := json.Unmarshal(r.JSON, &l); err != nil {
		return nil, fmt.Errorf("chanos: machines: %w", err)
	}
	return &l, nil
}
