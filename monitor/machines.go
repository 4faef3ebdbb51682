package monitor

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"slices"

	"github.com/chanos/chanos/chanos"
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
		list = []chanos.MachineInfo{{ID: self, Name: host, Version: Version(), State: "up", Domains: m.Domains()}}
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

// Version returns the chanos version this binary was built from: its
// module's version, or its VCS revision, or "devel".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "devel-" + s.Value[:12]
		}
	}
	return "devel"
}
