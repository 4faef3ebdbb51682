package hostile

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

func init() {
	roles["private-server"] = privateServer
}

// Row D: a stopped (SIGSTOP) monitor. Calls to it fail with a clear
// error within the domain's call timeout rather than hang, and
// connections already bound, which do not go through the monitor, keep
// serving.
func TestStoppedMonitor(t *testing.T) {
	const attack = "D: monitor stopped (SIGSTOP)"
	for _, lang := range []string{"go", "c"} {
		t.Run(lang+"-server", func(t *testing.T) {
			dir, mon := testkit.StartMonitor(t)
			v := server(t, lang, dir, "victim")
			var before, after usage
			record(t, attack, lang+" server, and a Go domain calling the monitor", &before, &after)
			before = measure(t, v.proc.Cmd.Process.Pid)
			ctx := testkit.Context(t)
			d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("hostile-bystander"), chanos.WithCallTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			c, err := pingpong.Connect(ctx, d, v.name)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			stop(t, mon.Cmd.Process.Pid)
			defer mon.Cmd.Process.Signal(syscall.SIGCONT)

			// The bound connection does not need the monitor.
			keepsServing(t, time.Second, func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				_, err := c.Echo(ctx, 7)
				return err
			})
			// Calls to the monitor whose context has no deadline end with
			// ErrMonitorTimeout, within the call timeout (and a bind's
			// second of grace).
			ctx = context.Background()
			for what, call := range map[string]func() error{
				"connect": func() error { _, err := pingpong.Connect(ctx, d, v.name); return err },
				"export":  func() error { _, err := pingpong.Export(ctx, d, "another"); return err },
				"ps":      func() error { _, err := d.Ps(ctx); return err },
				"join": func() error {
					_, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithCallTimeout(time.Second))
					return err
				},
			} {
				start := time.Now()
				err := call()
				if !errors.Is(err, chanos.ErrMonitorTimeout) {
					t.Errorf("%s with the monitor stopped: %v, want ErrMonitorTimeout", what, err)
				}
				if took := time.Since(start); took > 3*time.Second {
					t.Errorf("%s took %v to fail", what, took)
				}
			}
			mon.Cmd.Process.Signal(syscall.SIGCONT)
			keepsServing(t, time.Second, func(ctx context.Context) error { return serves(ctx, d, v.name) })
			c.Close()
			after = settled(t, v.proc.Cmd.Process.Pid, before)
		})
	}
}

// stop stops pid with SIGSTOP and waits until it is stopped.
func stop(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the monitor to stop", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		return len(f) > 0 && f[0] == "T"
	})
}

// Row F: names are not capabilities if reading one gives the token that
// binds it. A same-uid outsider reads the name of a private export
// through the nameservice (get, list, watch), then tries to bind it by
// name, by the iref it read, and by a forged iref: every bind is denied,
// and no answer shows the token. The client given the iref in confidence
// binds and is served.
func TestNamesAreCapabilities(t *testing.T) {
	const attack = "F: read a name's token and bind a private export"
	for _, lang := range []string{"go", "c"} {
		t.Run(lang+"-server", func(t *testing.T) {
			dir, _ := testkit.StartMonitor(t)
			var p *testkit.Child
			if lang == "go" {
				p = testkit.Start(t, testkit.Self("private-server", "-dir", dir, "-name", "vault"))
			} else {
				build := testkit.CBuild(t, "examples/pingpong_server")
				cmd := execIn(dir, filepath.Join(build, "examples", "pingpong_server"), "-name", "vault", "-private", "-print-ref")
				p = testkit.Start(t, cmd)
			}
			var ref wire.Iref
			for {
				if l := p.Line(t); strings.HasPrefix(l, "iref ") {
					ref = parseIref(t, strings.TrimPrefix(l, "iref "))
					break
				}
			}
			var before, after usage
			record(t, attack, lang+" server's private export", &before, &after)
			before = measure(t, p.Cmd.Process.Pid)
			ctx := testkit.Context(t)
			d := join(t, dir)
			ns, err := nameservice.Connect(ctx, d, nameservice.ServiceName)
			if err != nil {
				t.Fatal(err)
			}
			defer ns.Close()
			if err := ns.Send(ctx, &nameservice.Watch{Prefix: "vault"}); err != nil {
				t.Fatal(err)
			}
			read, errv, err := ns.Get(ctx, "vault")
			if err != nil || errv != 0 {
				t.Fatalf("get: %v, %v", errv, err)
			}
			if read.Token != [16]byte{} || read.WithoutToken() != ref.WithoutToken() {
				t.Fatalf("get returned %v for an export whose iref is %v: it must name it without its token", read, ref.WithoutToken())
			}
			page, _, err := ns.List(ctx, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(page), hex.EncodeToString(ref.Token[:])) {
				t.Fatal("list shows the token")
			}
			forged := ref
			forged.Token[0] ^= 1
			for what, bind := range map[string]func() error{
				"by name":          func() error { _, err := pingpong.Connect(ctx, d, "vault"); return err },
				"by the read iref": func() error { _, err := pingpong.ConnectRef(ctx, d, read); return err },
				"by a forged iref": func() error { _, err := pingpong.ConnectRef(ctx, d, forged); return err },
			} {
				if err := bind(); !errors.Is(err, chanos.ErrDenied) {
					t.Errorf("bind %s: %v, want ErrDenied", what, err)
				}
			}
			// The holder of the capability is served, within a second.
			keepsServing(t, time.Second, func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				c, err := pingpong.ConnectRef(ctx, d, ref)
				if err != nil {
					return err
				}
				defer c.Close()
				_, err = c.Echo(ctx, 1)
				return err
			})
			after = measure(t, p.Cmd.Process.Pid)
		})
	}
}

// parseIref parses MACHINE:EXPORT:TOKEN in hex, as chanos_iref_format
// writes it.
func parseIref(t *testing.T, s string) wire.Iref {
	t.Helper()
	f := strings.Split(s, ":")
	if len(f) != 3 {
		t.Fatalf("iref %q: want MACHINE:EXPORT:TOKEN", s)
	}
	var r wire.Iref
	var err1, err2 error
	r.Machine, err1 = strconv.ParseUint(f[0], 16, 64)
	r.Export, err2 = strconv.ParseUint(f[1], 16, 64)
	tok, err3 := hex.DecodeString(f[2])
	if err1 != nil || err2 != nil || err3 != nil || len(tok) != 16 {
		t.Fatalf("iref %q: bad field", s)
	}
	copy(r.Token[:], tok)
	return r
}

// privateServer exports pingpong privately under -name, prints its iref
// as chanos_iref_format does, and serves.
func privateServer(args []string) error {
	fs := flag.NewFlagSet("private-server", flag.ContinueOnError)
	dir := fs.String("dir", "", "monitor directory")
	name := fs.String("name", "", "export name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithDir(*dir), chanos.WithProgram("private-server"))
	if err != nil {
		return err
	}
	defer d.Close()
	l, err := pingpong.Export(ctx, d, *name, chanos.Private())
	if err != nil {
		return err
	}
	r := l.Raw().Ref()
	fmt.Printf("iref %016x:%016x:%x\n", r.Machine, r.Export, r.Token[:])
	return pingpong.Serve(ctx, l, slow{})
}
