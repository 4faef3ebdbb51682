package monitor

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/internal/buildinfo"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
)

// machines answers the machines call: the cluster's machines as
// Config.Machines lists them, or this machine alone. Machines beyond the
// protocol's bound on the document are left out, the last ones first.
func (m *Monitor) machines() (*proto.MachinesReply, error) {
	self := fmt.Sprintf("%016x", m.machineID)
	var list []chanos.MachineInfo
	if m.cfg.Machines != nil {
		list = m.cfg.Machines()
	} else {
		host, _ := os.Hostname()
		list = []chanos.MachineInfo{{ID: self, Name: host, Version: buildinfo.Version(), State: "up", Domains: m.Domains()}}
	}
	for i := range list {
		list[i].Self = list[i].ID == self
	}
	doc := chanos.MachineList{Cluster: m.cfg.Cluster, Machines: list}
	for {
		b, err := json.Marshal(doc)
		if err != nil {
			return nil, fail(proto.StatusInternal, "machines: %v", err)
		}
		if len(b) <= proto.MaxMachinesJSONLen {
			return &proto.MachinesReply{JSON: b}, nil
		}
		doc.Machines = slices.Clip(doc.Machines[:len(doc.Machines)-1])
	}
}
