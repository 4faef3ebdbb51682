package etcd

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/etcdtest"
)

// ids returns the ids of the machines r lists.
func ids(r *Registry) string {
	var out []uint64
	for _, m := range r.Machines() {
		out = append(out, m.ID)
	}
	return fmt.Sprint(out)
}

// TestRegistry: machines register and see each other; one may not take
// another's id; a machine that leaves vanishes from the list, and one
// whose lease was lost registers again under its fresh lease.
func TestRegistry(t *testing.T) {
	t.Parallel() // it mostly waits out leases and elections
	ec := etcdtest.Start(t, etcdtest.Options{})
	ctx := testkit.Context(t)
	cluster := freshCluster()
	a := open(t, ec.Endpoints(), cluster, 1, short)
	b := open(t, ec.Endpoints(), cluster, 2)
	infoA := MachineInfo{Name: "a", Addr: "10.0.0.1:7070", Identity: "sha256:aa", Version: "test"}
	if err := a.Registry().Register(ctx, infoA); err != nil {
		t.Fatal(err)
	}
	changed := b.Registry().Changed()
	if err := b.Registry().Register(ctx, MachineInfo{Name: "b", Addr: "10.0.0.2:7070"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "a to see both machines", func() bool { return ids(a.Registry()) == "[1 2]" })
	if got := ids(b.Registry()); got != "[1 2]" {
		t.Fatalf("b sees %s", got)
	}
	testkit.Await(t, "b's change notification", changed)
	infoA.ID = 1
	if got := b.Registry().Machines()[0]; got != infoA {
		t.Fatalf("b reads a as %+v, want %+v", got, infoA)
	}

	if err := a.Registry().SetLoad(ctx, Load{Domains: 3, CPU: 0.5}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "b to see a's load", func() bool {
		return b.Registry().Machines()[0].Load == Load{Domains: 3, CPU: 0.5}
	})

	// Another machine with a's id is refused while a lives.
	impostor := open(t, ec.Endpoints(), cluster, 1)
	if err := impostor.Registry().Register(ctx, MachineInfo{Name: "impostor"}); !errors.Is(err, ErrMachineTaken) {
		t.Fatalf("impostor's register: %v, want ErrMachineTaken", err)
	}
	impostor.Close()

	// a's lease is lost while it is frozen; it comes back registered.
	oldLease := a.Session().Lease()
	a.Session().setPaused(true)
	testkit.Eventually(t, "a to vanish while frozen", func() bool { return ids(b.Registry()) == "[2]" })
	a.Session().setPaused(false)
	testkit.Eventually(t, "a to register again", func() bool { return ids(b.Registry()) == "[1 2]" })
	if l := a.Session().Lease(); l == oldLease {
		t.Fatal("a came back under its lost lease")
	}

	// b leaves cleanly: it vanishes at once, without waiting for a TTL.
	left := time.Now()
	b.Close()
	testkit.Eventually(t, "b to vanish", func() bool { return ids(a.Registry()) == "[1]" })
	t.Logf("a machine that left vanished from the others %v after its Close", time.Since(left).Round(time.Millisecond))
}
