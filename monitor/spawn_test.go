package monitor

import (
	"sync"
	"testing"

	spawnif "github.com/chanos/chanos/interfaces/spawn"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// The spawn service is the monitor's own export, spawnd.<machine>: it is
// counted in its class, listed by ps under the monitor's domain, and its
// connections are bounded per domain; closing them leaves nothing behind.
func TestSpawndExport(t *testing.T) {
	tm := startMonitor(t, Config{})
	base := snapshotResources(t)
	ctx := testkit.Context(t)
	func() {
		c, err := Dial(ctx, tm.dir, "client")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ns, err := c.Nameservice(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		if n, err := ns.GetCount(ctx, spawnif.ServicePrefix); err != nil || n != 1 {
			t.Fatalf("get_count(spawnd): %d, %v", n, err)
		}
		name := spawnif.ServiceName(tm.MachineID())
		// The class is the monitors' own: a domain can neither set nor
		// export a name of it, so the count stays that of the machines.
		if code, err := ns.Set(ctx, "spawnd.42", iref(1)); err != nil || code != NSNotOwner {
			t.Fatalf("set spawnd.42: code %d, %v; want not_owner", code, err)
		}
		_, err = c.Export(ctx, "spawnd.43", "spawn", 1024)
		wantStatus(t, "export of spawnd.43", err, proto.StatusDenied)
		if code, err := ns.Set(ctx, "spawnd.x", iref(1)); err != nil || code != NSOK {
			t.Fatalf("set spawnd.x (another class): code %d, %v", code, err)
		}
		if code, err := ns.Remove(ctx, "spawnd.x"); err != nil || code != NSOK {
			t.Fatalf("remove spawnd.x: code %d, %v", code, err)
		}
		var fds [][]wire.Cap
		for range spawnMaxConns {
			r, err := c.Bind(ctx, name, spawnif.InterfaceName, false)
			if err != nil {
				t.Fatal(err)
			}
			if r.Via != proto.InterconnectUMP || len(r.Fds) == 0 {
				t.Fatalf("bind %s: via %v, %d descriptors", name, r.Via, len(r.Fds))
			}
			fds = append(fds, r.Fds)
		}
		_, err = c.Bind(ctx, name, spawnif.InterfaceName, false)
		wantStatus(t, "a bind beyond the domain's spawn connections", err, proto.StatusLimit)
		_, err = c.Bind(ctx, name, "nameservice", false)
		wantStatus(t, "a bind of spawnd as another interface", err, proto.StatusMismatch)
		snap, err := c.Ps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, d := range snap.Domains {
			for _, e := range d.Exports {
				found = found || (d.ID == SelfDomainID && e.Name == name && e.Iface == spawnif.InterfaceName)
			}
		}
		if !found {
			t.Fatalf("ps does not list %s among the monitor's exports: %+v", name, snap.Domains)
		}
		// Closing the attacher's descriptors ends the connections.
		for _, f := range fds {
			closeCaps(f)
		}
		testkit.Eventually(t, "the spawn connections to end", func() bool {
			tm.mu.Lock()
			defer tm.mu.Unlock()
			return len(tm.spawnd.conns) == 0
		})
	}()
	tm.checkNoLeaks(t, base)
}

// Binds of the spawn service made at once by one domain get no more
// connections than its quota: each takes its place before its ring pair is
// made.
func TestSpawndConcurrentBindsWithinQuota(t *testing.T) {
	tm := startMonitor(t, Config{})
	ctx := testkit.Context(t)
	name := spawnif.ServiceName(tm.MachineID())
	c := tm.dial(t, "client")
	for round := 0; round < 20; round++ {
		const n = 3 * spawnMaxConns
		var (
			mu  sync.Mutex
			fds [][]wire.Cap
			wg  sync.WaitGroup
		)
		start := make(chan struct{})
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r, err := c.Bind(ctx, name, spawnif.InterfaceName, false)
				if err != nil {
					if got := StatusOf(err); got != proto.StatusLimit {
						t.Errorf("a bind beyond the domain's spawn connections: %v (status %v), want status %v", err, got, proto.StatusLimit)
					}
					return
				}
				mu.Lock()
				fds = append(fds, r.Fds)
				mu.Unlock()
			}()
		}
		close(start)
		wg.Wait()
		for _, f := range fds {
			closeCaps(f)
		}
		if len(fds) > spawnMaxConns {
			t.Fatalf("round %d: one domain got %d spawn service connections, its quota is %d", round, len(fds), spawnMaxConns)
		}
		testkit.Eventually(t, "the spawn connections to end", func() bool {
			tm.mu.Lock()
			defer tm.mu.Unlock()
			return len(tm.spawnd.conns) == 0 && len(tm.spawnd.byDom) == 0
		})
	}
}
