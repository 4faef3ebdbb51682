package monitor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/chanos/chanos/interconnect/ump"
)

// envHelperDir makes the test binary run as a domain (TestHelperDomain)
// of the monitor in the directory it names.
const envHelperDir = "CHANOS_MONITOR_TEST_HELPER_DIR"

// TestHelperDomain is not a test: run by TestKilledDomain in a child
// process, it is a domain that exports "victim", sets "victim.alias"
// through the nameservice, echoes on every connection bound to it, says
// "ready" and waits to be killed.
func TestHelperDomain(t *testing.T) {
	dir := os.Getenv(envHelperDir)
	if dir == "" {
		t.Skip("run by TestKilledDomain")
	}
	if err := helperDomain(dir); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
}

func helperDomain(dir string) error {
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
				fmt.Println("error:", err)
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
	ctx := ctxT(t)
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

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperDomain$")
	cmd.Env = append(os.Environ(), envHelperDir+"="+tm.dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("helper said %q, %v", line, err)
	}

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
		found = found || (d.PID == int32(cmd.Process.Pid) && len(d.Exports) == 1 && d.Exports[0].Name == "victim")
	}
	if !found {
		t.Fatalf("ps does not show the victim: %+v", snap.Domains)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

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
	tm.logs.waitLog(t, "domain left", "program=victim", "exports_withdrawn=[victim]")

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
