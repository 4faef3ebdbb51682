package interop

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

// The monitor's admission (docs/quotas.md) as C domains meet it: a join
// to a full monitor fails with CHANOS_ERR_MONITOR_FULL and says so, and a
// C program that joined and sleeps, leaving the monitor's pings unread,
// keeps its place while squatters are evicted.

func domainPeer(t *testing.T) string {
	return filepath.Join(cBuild(t), "tools", "chanos-domain-peer")
}

// A C domain's join to a full monitor fails, "monitor full" (not a lost
// monitor or a broken pipe), as a Go domain's does; once a place is free
// it joins.
func TestCJoinMonitorFull(t *testing.T) {
	peer := domainPeer(t)
	dir := startMonitor(t, "--max-domains", "1")
	ctx := testkit.Context(t)
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("member"))
	if err != nil {
		t.Fatal(err)
	}
	if out := runExit(t, dir, 1, peer, "join", dir); !strings.Contains(out, "join: monitor full") {
		t.Fatalf("the C domain's join to a full monitor printed %q, want \"join: monitor full...\"", out)
	}
	_, err = chanos.Join(ctx, chanos.WithDir(dir))
	if !errors.Is(err, chanos.ErrMonitorFull) || !strings.Contains(err.Error(), "monitor full: 1 of 1 sessions") {
		t.Fatalf("the Go domain's join to a full monitor: %v; want ErrMonitorFull, \"monitor full: 1 of 1 sessions\"", err)
	}
	d.Close()
	testkit.Eventually(t, "the C domain to join the monitor with a free place", func() bool {
		cmd := exec.Command(peer, "join", dir)
		cmd.Env = cEnv(dir)
		out, err := cmd.CombinedOutput()
		if exitCode(err) == sanitizerExit {
			t.Fatalf("a sanitizer reported an error:\n%s", out)
		}
		return err == nil && strings.HasPrefix(string(out), "joined ")
	})
}

// A C program that joined, exported and went to sleep(3) reads nothing:
// it leaves the monitor's pings unread, and counts as unresponsive. It is
// not dropped for that: when the monitor is full, the joins that come take
// the places of the squatters (unresponsive sessions that hold nothing),
// and the sleeper, which holds an export, keeps its place and its name.
func TestCSleepingDomainKeepsItsPlace(t *testing.T) {
	peer := domainPeer(t)
	dir := startMonitor(t, "--max-domains", "4", "--idle-timeout", "100ms", "--ping-timeout", "500ms")
	ctx := testkit.Context(t)
	sleeper := spawnProc(t, false, dir, peer, "sleep", dir, "sleepy")
	if line := sleeper.Line(t); !strings.HasPrefix(line, "joined ") {
		t.Fatalf("the sleeper printed %q", line)
	}
	defer sleeper.kill(t)
	// Three squatters: hello, then nothing read, ever.
	for range 3 {
		uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: filepath.Join(dir, "monitor.sock"), Net: "unixpacket"})
		if err != nil {
			t.Fatal(err)
		}
		defer uc.Close()
		var b wire.Buffer
		(&proto.HelloCall{Version: proto.ProtocolVersion, Program: "squatter"}).Encode(&b)
		wire.SetCallID(b.B, 1)
		if _, err := uc.Write(b.B); err != nil {
			t.Fatal(err)
		}
		if _, err := uc.Read(make([]byte, 256)); err != nil {
			t.Fatal(err)
		}
	}
	// Once a session has left a ping unread, a join takes the place of a
	// squatter; the other squatters, which joined a moment later, are
	// marked a moment later, and the next joins take their places within
	// a second.
	var joined []*chanos.Domain
	defer func() {
		for _, d := range joined {
			d.Close()
		}
	}()
	join := func() error {
		d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("newcomer"))
		if err == nil {
			joined = append(joined, d)
		}
		return err
	}
	testkit.Eventually(t, "a join to take the place of a squatter", func() bool {
		err := join()
		if err != nil && !errors.Is(err, chanos.ErrMonitorFull) {
			t.Fatalf("join: %v", err)
		}
		return err == nil
	})
	for i := range 2 {
		if err := testkit.Within(t, 2*time.Second, "a join to a monitor full of unresponsive sessions", func() error {
			limit := time.Now().Add(time.Second)
			for {
				err := join()
				if !errors.Is(err, chanos.ErrMonitorFull) || time.Now().After(limit) {
					return err
				}
				time.Sleep(time.Millisecond)
			}
		}); err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
	}
	snap, err := joined[0].Ps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kept := false
	for _, d := range snap.Domains {
		switch d.Program {
		case "squatter":
			t.Fatalf("a squatter kept its place over a newcomer: %+v", d)
		case "c-domain-peer":
			kept = len(d.Exports) == 1 && d.Exports[0].Name == "sleepy"
			if !d.Unresponsive {
				t.Errorf("the sleeping C domain reads its pings? %+v", d)
			}
		}
	}
	if !kept {
		t.Fatalf("the sleeping C domain lost its place or its export: %+v", snap.Domains)
	}
	// Its name still binds: the connection waits for it in its socket.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if c, err := chanos.Connect(cctx, joined[1], "sleepy", chanos.Interface{Name: "kv", MaxFrameSize: 1024}); err != nil {
		t.Fatalf("bind the sleeper's export: %v", err)
	} else {
		c.Close()
	}
}
