package hostile

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
)

// Row E: a client killed with -9 in the middle of an rpc whose handler is
// running. The handler's context must be cancelled at once, whether the
// handler runs inline (the default) or concurrently, the server must go on
// serving its other clients, and the connection's descriptors must be
// released once the handler has returned.

// blockForever is the echo argument the servers never answer on their
// own: the Go one waits for the handler's context to end, the C one
// leaves the call unanswered.
const blockForever = 1<<40 + 7

func init() {
	roles["slow-server"] = slowServer
	roles["blocked-caller"] = blockedCaller
}

func TestPeerDeathMidRPC(t *testing.T) {
	const attack = "E: client killed -9 while its rpc's handler runs"
	for _, mode := range []string{"inline", "concurrent"} {
		t.Run("go-server-"+mode, func(t *testing.T) {
			dir, _ := testkit.StartMonitor(t)
			args := []string{"-dir", dir, "-name", "slow"}
			if mode == "concurrent" {
				args = append(args, "-concurrent")
			}
			s := testkit.Start(t, testkit.Self("slow-server", args...))
			s.Expect(t, "serving")
			d := join(t, dir)
			if err := serves(testkit.Context(t), d, "slow"); err != nil {
				t.Fatal(err)
			}
			var before, after usage
			record(t, attack, "go server, handler "+mode, &before, &after)
			before = measure(t, s.Cmd.Process.Pid)
			c := testkit.Start(t, testkit.Self("blocked-caller", "-dir", dir, "-name", "slow"))
			c.Expect(t, "calling")
			s.Expect(t, "blocked")
			c.Kill()
			if l := lineWithin(s, time.Second); l != "cancelled" {
				t.Fatalf("the handler's context was not cancelled within 1 s of the client's death (the server printed %q)", l)
			}
			if err := serves(testkit.Context(t), d, "slow"); err != nil {
				t.Fatalf("the server stopped serving: %v", err)
			}
			after = settled(t, s.Cmd.Process.Pid, before)
		})
	}
	t.Run("c-server", func(t *testing.T) {
		build := testkit.CBuild(t, "examples/pingpong_server")
		dir, _ := testkit.StartMonitor(t)
		v := startServer(t, dir, "slow", filepath.Join(build, "examples", "pingpong_server"),
			"-name", "slow", "-no-reply-to", fmt.Sprint(uint64(blockForever)))
		d := join(t, dir)
		var before, after usage
		record(t, attack, "c server", &before, &after)
		before = measure(t, v.proc.Cmd.Process.Pid)
		c := testkit.Start(t, testkit.Self("blocked-caller", "-dir", dir, "-name", "slow"))
		c.Expect(t, "calling")
		for want := fmt.Sprintf("unanswered echo %d", uint64(blockForever)); v.proc.Line(t) != want; {
		}
		c.Kill()
		keepsServing(t, time.Second, func(ctx context.Context) error { return serves(ctx, d, "slow") })
		after = settled(t, v.proc.Cmd.Process.Pid, before)
	})
}

// lineWithin returns the next line c prints within d, or "" if none.
func lineWithin(c *testkit.Child, d time.Duration) string {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if l := c.Remaining(); len(l) > 0 {
			return l[0]
		}
	}
	return ""
}

// settled waits, at most a second, for pid's descriptors to come back to
// before's count, and returns its usage then; it fails the test if they
// do not.
func settled(t *testing.T, pid int, before usage) usage {
	t.Helper()
	var u usage
	for end := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		u = measure(t, pid)
		if u.FDs <= before.FDs {
			return u
		}
		if time.Now().After(end) {
			t.Fatalf("the victim holds %d descriptors a second after its client died, %d before", u.FDs, before.FDs)
		}
	}
}

// slowServer serves pingpong under -name; an echo of blockForever prints
// "blocked" and waits for its context to end, then prints "cancelled".
func slowServer(args []string) error {
	fs := flag.NewFlagSet("slow-server", flag.ContinueOnError)
	dir := fs.String("dir", "", "monitor directory")
	name := fs.String("name", "", "export name")
	concurrent := fs.Bool("concurrent", false, "serve each connection's rpcs concurrently")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(*dir), chanos.WithProgram("slow-server"))
	if err != nil {
		return err
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, *name)
	if err != nil {
		return err
	}
	fmt.Println("serving")
	var opts []chanos.ServeOption
	if *concurrent {
		opts = append(opts, chanos.Concurrent(8))
	}
	return pingpong.Serve(ctx, l, slow{}, opts...)
}

type slow struct{ pingpong.UnimplementedServer }

func (slow) Echo(ctx context.Context, v uint64) (uint64, error) {
	if v != blockForever {
		return v, nil
	}
	fmt.Println("blocked")
	<-ctx.Done()
	fmt.Println("cancelled")
	return 0, ctx.Err()
}

// blockedCaller calls echo(blockForever) on -name and waits for ever.
func blockedCaller(args []string) error {
	fs := flag.NewFlagSet("blocked-caller", flag.ContinueOnError)
	dir := fs.String("dir", "", "monitor directory")
	name := fs.String("name", "", "service")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(*dir), chanos.WithProgram("blocked-caller"))
	if err != nil {
		return err
	}
	c, err := pingpong.Connect(ctx, d, *name)
	if err != nil {
		return err
	}
	fmt.Println("calling")
	_, err = c.Echo(ctx, blockForever)
	fmt.Fprintln(os.Stderr, "blocked-caller: the echo returned:", err)
	select {}
}
