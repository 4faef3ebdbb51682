package monitor

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interfaces/pingpong"
	spawnif "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// TestClusterHooks runs a monitor as a machine of a cluster would (a
// fixed machine id, a store shared with other machines, the cluster's
// machines), with a Go domain: irefs carry the id, every machine serves
// its own nameservice, a bind of another machine's export fails with
// ErrNoRoute, machines lists the cluster, and a name lost by the store
// sends its domain through the monitor-loss path, after which it
// exports the name again.
func TestClusterHooks(t *testing.T) {
	const self, other = 0x5a1b, 0x5a1c
	store := names.NewMemory()
	defer store.Close()
	machines := []chanos.MachineInfo{
		{ID: "0000000000005a1b", Name: "m1", State: "up"},
		{ID: "0000000000005a1c", Name: "m2", State: "up"},
	}
	tm := startMonitor(t, Config{MachineID: self, Store: store, SharedStore: true, Cluster: "lab",
		Machines: func() []chanos.MachineInfo { return slices.Clone(machines) }})
	ctx := testkit.Context(t)
	events := make(chan chanos.MonitorEvent, 4)
	d, err := chanos.Join(ctx, chanos.WithDir(tm.dir), chanos.OnMonitor(func(ev chanos.MonitorEvent) { events <- ev }))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Machine() != self {
		t.Fatalf("the domain's machine is %x, want %x", d.Machine(), self)
	}

	// The nameservice is the monitor's own, and no name in the store.
	ns, err := nameservice.Connect(ctx, d, nameservice.ServiceName)
	if err != nil {
		t.Fatalf("connect to the nameservice with a shared store: %v", err)
	}
	ns.Close()
	if _, err := store.Get(ctx, nameservice.ServiceName); !errors.Is(err, names.ErrNotFound) {
		t.Fatalf("the shared store holds the name %q: %v", nameservice.ServiceName, err)
	}

	l, err := pingpong.Export(ctx, d, "kv")
	if err != nil {
		t.Fatal(err)
	}
	if ref := l.Raw().Ref(); ref.Machine != self {
		t.Fatalf("the export's iref is of machine %x, want %x", ref.Machine, self)
	}
	// An export of another machine: no route, at once.
	if err := store.Set(ctx, "far", wire.Iref{Machine: other, Export: 7}, names.Owner(999)); err != nil {
		t.Fatal(err)
	}
	if _, err := pingpong.Connect(ctx, d, "far"); !errors.Is(err, chanos.ErrNoRoute) || chanos.CodeOf(err) != chanos.CodeUnavailable {
		t.Fatalf("connect to a name of another machine: %v, want ErrNoRoute", err)
	}
	if _, err := pingpong.ConnectRef(ctx, d, wire.Iref{Machine: other, Export: 7, Token: [16]byte{1}}); !errors.Is(err, chanos.ErrNoRoute) {
		t.Fatalf("connect to an iref of another machine: %v, want ErrNoRoute", err)
	}

	list, err := d.Machines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list.Cluster != "lab" || len(list.Machines) != 2 || !list.Machines[0].Self || list.Machines[1].Self || list.Machines[1].Name != "m2" {
		t.Fatalf("machines: %+v", list)
	}

	// The store lost kv (the machine's lease expired): the domain is told
	// through the monitor-loss path and exports kv again.
	tm.NameLost(names.Owner(d.ID()), "kv")
	if ev := testkit.Await(t, "the loss", events); !ev.Lost || !errors.Is(ev.Err, chanos.ErrMonitorLost) {
		t.Fatalf("first event %+v, want the session lost", ev)
	}
	if ev := testkit.Await(t, "the rejoin", events); ev.Lost || ev.Err != nil {
		t.Fatalf("second event %+v, want a rejoin with every name exported again", ev)
	}
	testkit.Eventually(t, "kv exported again", func() bool {
		ref, err := store.Get(ctx, "kv")
		return err == nil && ref.Machine == self
	})
	if tm.logs.Count("a name was lost by the store", "name=kv") != 1 {
		t.Fatalf("the loss is not logged:\n%s", tm.logs)
	}
}

// TestMachinesAlone: a monitor in no cluster lists itself alone.
func TestMachinesAlone(t *testing.T) {
	tm := startMonitor(t, Config{})
	ctx := testkit.Context(t)
	d, err := chanos.Join(ctx, chanos.WithDir(tm.dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	list, err := d.Machines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list.Cluster != "" || len(list.Machines) != 1 || !list.Machines[0].Self || list.Machines[0].Domains != 1 || list.Machines[0].State != "up" {
		t.Fatalf("machines of a lone monitor: %+v", list)
	}
}

// The store lost the spawn service's name, which the monitor holds (the
// machine's lease expired): the monitor sets it again once it is free,
// here after another owner held it a while.
func TestSpawnNameLostIsSetAgain(t *testing.T) {
	const self = 0x5a1d
	store := names.NewMemory()
	defer store.Close()
	tm := startMonitor(t, Config{MachineID: self, Store: store, SharedStore: true, Cluster: "lab"})
	ctx := testkit.Context(t)
	name := spawnif.ServiceName(self)
	ref, err := store.Get(ctx, name)
	if err != nil {
		t.Fatalf("the spawn service's name at start: %v", err)
	}
	if err := store.Remove(ctx, name, names.Owner(SelfDomainID)); err != nil {
		t.Fatal(err)
	}
	// Another owner holds it first (an earlier run of the machine, say).
	if err := store.Set(ctx, name, wire.Iref{Machine: self, Export: 999}, names.Owner(777)); err != nil {
		t.Fatal(err)
	}
	tm.NameLost(names.Owner(SelfDomainID), name)
	tm.NameLost(names.Owner(SelfDomainID), name) // once trying is enough
	time.Sleep(1500 * time.Millisecond)          // a try or two finds it taken
	if err := store.Remove(ctx, name, names.Owner(777)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the spawn service's name set again", func() bool {
		got, err := store.Get(ctx, name)
		return err == nil && got == ref
	})
	if tm.logs.Count("the store lost the spawn service's name", "name="+name) != 2 {
		t.Fatalf("the loss is not logged as the spawn service's:\n%s", tm.logs)
	}
}
