package monitor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/internal/testkit"
)

// roleDomain is the role, played by the test binary in a child process
// that TestKilledDomain kills, of a domain of the monitor in the directory
// its argument names: it exports "victim", sets "victim.alias" through
// the nameservice, echoes on every connection bound to it, says "ready"
// and waits to be killed.
const roleDomain = "domain"

func helperDomain(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want the monitor's directory, got %q", args)
	}
	dir := args[0]
	ctx := context.Background()
	c, err := Dial(ctx, dir, "victim")
	if err != nil {
		return err
	}
	ref, err := c.Export(ctx, "victim", "echo", 1024)
	if err != nil {
		return err
	}
	ns, err := c.Nameservice(ctx)
	if err != nil {
		return err
	}
	if code, err := ns.Set(ctx, "victim.alias", ref); err != nil || code != NSOK {
		return fmt.Errorf("set: %d, %v", code, err)
	}
	go func() {
		for in := range c.Incoming() {
			u, err := OpenUMP(ump.Creator, in.Fds, &ump.Options{MaxMessageSize: int(in.MaxFrame)})
			if err != nil {
				fmt.Fprintln(os.Stderr, "domain:", err)
				os.Exit(1)
			}
			go func() {
				for {
					m, err := u.Receive(ctx)
					if err != nil {
						return
					}
					u.Send(ctx, m)
				}
			}()
		}
	}()
	fmt.Println("ready")
	select {}
}

// A domain killed with SIGKILL loses its exports and names, a new domain
// can take the name, and its peers see it die.
func TestKilledDomain(t *testing.T) {
	tm := startMonitor(t, Config{})
	ctx := testkit.Context(t)
	cli := tm.dial(t, "client")
	watcher, err := cli.Nameservice(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	if err := watcher.Watch(ctx, "victim"); err != nil {
		t.Fatal(err)
	}
	// The ring is served in order: once a later rpc has its reply, the
	// watch is in place.
	if _, _, err := watcher.Get(ctx, "victim"); err != nil {
		t.Fatal(err)
	}

	victim := testkit.Start(t, testkit.Self(roleDomain, tm.dir))
	victim.Expect(t, "ready")

	// Bind to it and talk.
	bound, err := cli.Bind(ctx, "victim", "echo", false)
	if err != nil {
		t.Fatal(err)
	}
	u, err := OpenUMP(ump.Attacher, bound.Fds, &ump.Options{MaxMessageSize: int(bound.MaxFrame)})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.Send(ctx, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if m, err := u.Receive(ctx); err != nil || string(m) != "ping" {
		t.Fatalf("echo: %q, %v", m, err)
	}
	snap, _ := cli.Ps(ctx)
	found := false
	for _, d := range snap.Domains {
		found = found || (d.PID == int32(victim.Cmd.Process.Pid) && len(d.Exports) == 1 && d.Exports[0].Name == "victim")
	}
	if !found {
		t.Fatalf("ps does not show the victim: %+v", snap.Domains)
	}

	victim.Kill()

	// Both its names go: the export's and the one it set.
	removed := map[string]bool{}
	for len(removed) < 2 {
		ch, ok := <-watcher.Changed()
		if !ok {
			t.Fatalf("watch ended: %v", watcher.Err())
		}
		if ch.Removed {
			removed[ch.Name] = true
		}
	}
	if !removed["victim"] || !removed["victim.alias"] {
		t.Fatalf("removed %v", removed)
	}
	tm.logs.Wait(t, "domain left", "program=victim", "exports_withdrawn=[victim]")

	// Its peer sees it die.
	if _, err := u.Receive(ctx); !errors.Is(err, ump.ErrPeerDied) {
		t.Fatalf("receive from the killed domain: %v", err)
	}
	// A new domain can take the name.
	heir := tm.dial(t, "heir")
	if _, err := heir.Export(ctx, "victim", "echo", 1024); err != nil {
		t.Fatalf("export of the dead domain's name: %v", err)
	}
	if _, code, err := watcher.Get(ctx, "victim.alias"); err != nil || code != NSNotFound {
		t.Fatalf("get of the dead domain's alias: %v, %v", code, err)
	}
}
