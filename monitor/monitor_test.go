package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/seqpacket"
	"github.com/chanos/chanos/interfaces/nameservice"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

func TestDirPrecedence(t *testing.T) {
	t.Setenv(EnvDir, "/env/dir")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/42")
	check := func(flag, want string) {
		t.Helper()
		got, err := Dir(flag)
		if err != nil || got != want {
			t.Fatalf("Dir(%q) = %q, %v; want %q", flag, got, err, want)
		}
	}
	check("/flag/dir", "/flag/dir")
	check("", "/env/dir")
	t.Setenv(EnvDir, "")
	check("", "/run/user/42/chanos")
	t.Setenv("XDG_RUNTIME_DIR", "")
	check("", filepath.Join(os.TempDir(), "chanos-"+strconv.Itoa(os.Getuid())))
	// A relative flag is made absolute.
	wd, _ := os.Getwd()
	check("rel", filepath.Join(wd, "rel"))
}

func TestPrepareAndCheckDir(t *testing.T) {
	base := testkit.ShortDir(t)
	dir := filepath.Join(base, "a", "chanos")
	if err := PrepareDir(dir); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("created %v, %v; want mode 0700", fi.Mode(), err)
	}
	// Open to others: refused, by the monitor and by clients.
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o755)
	if err := PrepareDir(open); !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("0755 dir: %v", err)
	}
	if _, err := New(Config{Dir: open}); !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("New on a 0755 dir: %v", err)
	}
	if _, err := Dial(context.Background(), open, "t"); !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("Dial on a 0755 dir: %v", err)
	}
	// A symbolic link, a file.
	link := filepath.Join(base, "link")
	os.Symlink(dir, link)
	if err := CheckDir(link); !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("symlink: %v", err)
	}
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	if err := CheckDir(file); !errors.Is(err, ErrUnsafeDir) {
		t.Fatalf("file: %v", err)
	}
	// No monitor there: a clear error.
	if _, err := Dial(context.Background(), dir, "t"); !errors.Is(err, chanos.ErrNoMonitor) {
		t.Fatalf("Dial with no monitor: %v", err)
	}
	if _, err := Dial(context.Background(), filepath.Join(base, "missing"), "t"); !errors.Is(err, chanos.ErrNoMonitor) {
		t.Fatalf("Dial with no directory: %v", err)
	}
}

func TestCheckPeer(t *testing.T) {
	if err := checkPeer(&syscall.Ucred{Pid: 1, Uid: 1000}, 1000); err != nil {
		t.Fatal(err)
	}
	if err := checkPeer(&syscall.Ucred{Pid: 1, Uid: 0}, 1000); err == nil {
		t.Fatal("root accepted by a monitor of uid 1000")
	}
	if err := checkPeer(&syscall.Ucred{Pid: 1, Uid: 1001}, 1000); err == nil {
		t.Fatal("uid 1001 accepted by a monitor of uid 1000")
	}
	if err := checkPeer(nil, 1000); err == nil {
		t.Fatal("no credentials accepted")
	}
}

// A peer of another uid is dropped before hello, with the reason logged.
func TestOtherUIDRefused(t *testing.T) {
	tm := startMonitor(t, Config{}, func(m *Monitor) { m.uid = uint32(os.Getuid()) + 1 })
	_, err := Dial(testkit.Context(t), tm.dir, "intruder")
	if err == nil {
		t.Fatal("a peer of another uid got a session")
	}
	tm.logs.Wait(t, "connection refused", "reason=credentials", "is not the monitor's uid")
}

func TestAlreadyRunningAndStaleSocket(t *testing.T) {
	tm := startMonitor(t, Config{})
	if _, err := New(Config{Dir: tm.dir}); !errors.Is(err, seqpacket.ErrInUse) {
		t.Fatalf("second monitor: %v", err)
	}
	// A socket file left by a dead monitor is replaced.
	dir := filepath.Join(testkit.ShortDir(t), "chanos")
	PrepareDir(dir)
	ul, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: SocketPath(dir), Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	m2 := startMonitor(t, Config{Dir: dir})
	c := m2.dial(t, "after-stale")
	if c.DomainID() <= SelfDomainID {
		t.Fatalf("domain id %d", c.DomainID())
	}
}

func TestHello(t *testing.T) {
	tm := startMonitor(t, Config{})
	a := tm.dial(t, "a")
	b := tm.dial(t, "b")
	if a.DomainID() == b.DomainID() || a.DomainID() <= SelfDomainID || b.DomainID() <= SelfDomainID {
		t.Fatalf("domain ids %d and %d", a.DomainID(), b.DomainID())
	}
	if a.MachineID() == 0 || a.MachineID() != b.MachineID() || a.MachineID() != tm.MachineID() {
		t.Fatalf("machine ids %x, %x, monitor %x", a.MachineID(), b.MachineID(), tm.MachineID())
	}
	tm.logs.Wait(t, "domain joined", "program=a")

	// A version the monitor does not speak: an error reply says so, then
	// the session ends.
	pc, err := seqpacket.Dial(testkit.Context(t), tm.Socket(), proto.MaxFrameSize)
	if err != nil {
		t.Fatal(err)
	}
	c := NewClient(pc)
	defer c.Close()
	future := uint32(proto.ProtocolVersion + 1)
	err = c.call(testkit.Context(t), &proto.HelloCall{Version: future, Program: "future"}, &proto.HelloReply{})
	wantStatus(t, "hello of a later version", err, proto.StatusInvalid)
	<-c.Done()
	tm.logs.Wait(t, "connection dropped before hello", fmt.Sprintf("unsupported protocol version %d", future))
}

func TestExportBindWithdraw(t *testing.T) {
	tm := startMonitor(t, Config{})
	base := snapshotResources(t)
	ctx := testkit.Context(t)
	func() {
		srv, err := Dial(ctx, tm.dir, "server")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		cli, err := Dial(ctx, tm.dir, "client")
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()

		ref, err := srv.Export(ctx, "kv", "kv", 4096)
		if err != nil {
			t.Fatal(err)
		}
		if ref.Machine != srv.MachineID() || ref.Export == 0 || ref.Token == [16]byte{} {
			t.Fatalf("iref %v", ref)
		}
		ref2, err := srv.Export(ctx, "kv2", "kv", 4096)
		if err != nil || ref2.Token == ref.Token || ref2.Export == ref.Export {
			t.Fatalf("second export %v, %v (first %v)", ref2, err, ref)
		}

		// A taken name is an error, never an overwrite.
		_, err = cli.Export(ctx, "kv", "kv", 4096)
		wantStatus(t, "export of a taken name", err, proto.StatusExists)
		_, err = srv.Export(ctx, "kv", "kv", 4096)
		wantStatus(t, "export twice", err, proto.StatusExists)
		_, err = cli.Export(ctx, nameservice.ServiceName, "kv", 4096)
		wantStatus(t, "export of nameservice", err, proto.StatusExists)
		for _, bad := range []struct {
			name, iface string
			frame       uint32
		}{
			{"", "kv", 4096}, {"a b", "kv", 4096}, {"x\n", "kv", 4096},
			{"ok", "", 4096}, {"ok", "k v", 4096}, {"ok", "kv", 0}, {"ok", "kv", 15}, {"ok", "kv", DefaultMaxFrame + 1},
		} {
			_, err = cli.Export(ctx, bad.name, bad.iface, bad.frame)
			wantStatus(t, "export "+strconv.Quote(bad.name)+" "+strconv.Quote(bad.iface), err, proto.StatusInvalid)
		}

		// Bind checks the interface, then connects the two domains.
		_, err = cli.Bind(ctx, "kv", "pingpong", false)
		wantStatus(t, "bind with the wrong interface", err, proto.StatusMismatch)
		_, err = cli.Bind(ctx, "nope", "kv", false)
		wantStatus(t, "bind to a missing name", err, proto.StatusNotFound)
		_, err = cli.Bind(ctx, "bad name", "kv", false)
		wantStatus(t, "bind to an invalid name", err, proto.StatusInvalid)

		bound, err := cli.Bind(ctx, "kv", "kv", false)
		if err != nil {
			t.Fatal(err)
		}
		if bound.Via != proto.InterconnectUMP || bound.Ref != ref.WithoutToken() || bound.ConnID == 0 || bound.MaxFrame != 4096 || len(bound.Fds) != UMPFDs {
			t.Fatalf("bind reply %+v", bound)
		}
		in := <-srv.Incoming()
		if in.ConnID != bound.ConnID || in.Client != cli.DomainID() || in.Ref != ref || in.Via != proto.InterconnectUMP || in.MaxFrame != 4096 || len(in.Fds) != UMPFDs {
			t.Fatalf("incoming %+v, bind reply %+v", in, bound)
		}
		cc, sc := openPair(t, bound, in)
		exchange(t, cc, sc, "hello over the ring")

		// Binding to one's own export is local: no descriptors.
		self, err := srv.Bind(ctx, "kv", "kv", false)
		if err != nil || self.Via != proto.InterconnectLocal || len(self.Fds) != 0 || self.Ref != ref.WithoutToken() {
			t.Fatalf("self bind %+v, %v", self, err)
		}

		// ps shows it all.
		snap, err := cli.Ps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Version != chanos.PsVersion || snap.Monitor.MachineID == "" || snap.Monitor.Limits.MaxDomains != DefaultMaxDomains || snap.Monitor.Limits.Domains != 2 {
			t.Fatalf("ps monitor %+v", snap.Monitor)
		}
		var sd, cd *chanos.DomainInfo
		for i := range snap.Domains {
			switch snap.Domains[i].ID {
			case srv.DomainID():
				sd = &snap.Domains[i]
			case cli.DomainID():
				cd = &snap.Domains[i]
			}
		}
		if snap.Domains[0].ID != SelfDomainID || snap.Domains[0].Exports[0].Name != nameservice.ServiceName {
			t.Fatalf("ps: the monitor is not first: %+v", snap.Domains[0])
		}
		if sd == nil || cd == nil || sd.Program != "server" || sd.PID != int32(os.Getpid()) || len(sd.Exports) != 2 || sd.Exports[0].Name != "kv" || sd.Exports[0].ExportID != ref.Export {
			t.Fatalf("ps domains %+v", snap.Domains)
		}
		if len(cd.Connections) != 1 || cd.Connections[0] != (chanos.ConnInfo{ConnID: bound.ConnID, Peer: srv.DomainID(), Role: "client", Name: "kv", ExportID: ref.Export, Via: "ump"}) {
			t.Fatalf("ps client connections %+v", cd.Connections)
		}
		if len(sd.Connections) != 2 || sd.Connections[0].Role != "server" || sd.Connections[1].Via != "local" {
			t.Fatalf("ps server connections %+v", sd.Connections)
		}

		// Withdraw: owner only, and then the name is gone.
		wantStatus(t, "withdraw by another domain", cli.Withdraw(ctx, "kv"), proto.StatusNotFound)
		if err := srv.Withdraw(ctx, "kv"); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, "withdraw twice", srv.Withdraw(ctx, "kv"), proto.StatusNotFound)
		_, err = cli.Bind(ctx, "kv", "kv", false)
		wantStatus(t, "bind after withdraw", err, proto.StatusNotFound)
		if _, err := cli.Export(ctx, "kv", "kv", 4096); err != nil {
			t.Fatalf("export of a withdrawn name: %v", err)
		}
		// The connection bound before carries on.
		exchange(t, cc, sc, "still here")

		// Both sessions end; the connection still works: the data path
		// does not go through the monitor.
		srv.Close()
		cli.Close()
		testkit.Eventually(t, "the sessions to end", func() bool { return tm.sessionCount() == 0 })
		exchange(t, cc, sc, "after the sessions")
		cc.Close()
		sc.Close()
	}()
	tm.checkNoLeaks(t, base)
}

func TestBindWait(t *testing.T) {
	tm := startMonitor(t, Config{})
	base := snapshotResources(t)
	ctx := testkit.Context(t)
	func() {
		srv, _ := Dial(ctx, tm.dir, "server")
		defer srv.Close()
		cli, _ := Dial(ctx, tm.dir, "client")
		defer cli.Close()

		// A waiting bind completes when the name appears; meanwhile the
		// session's other calls are served.
		type result struct {
			r   *proto.BindReply
			err error
		}
		done := make(chan result, 1)
		go func() {
			r, err := cli.Bind(ctx, "later", "kv", true)
			done <- result{r, err}
		}()
		testkit.Eventually(t, "the bind to wait", func() bool {
			tm.mu.Lock()
			defer tm.mu.Unlock()
			return tm.domains[cli.DomainID()].pendingBinds() == 1
		})
		if _, err := cli.Ps(ctx); err != nil {
			t.Fatalf("ps while a bind waits: %v", err)
		}
		if _, err := srv.Export(ctx, "later", "kv", 1024); err != nil {
			t.Fatal(err)
		}
		res := <-done
		if res.err != nil || res.r.Via != proto.InterconnectUMP {
			t.Fatalf("waiting bind: %+v, %v", res.r, res.err)
		}
		in := <-srv.Incoming()
		cc, sc := openPair(t, res.r, in)
		exchange(t, cc, sc, "waited")

		// At the call's deadline: not_found.
		dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err := cli.Bind(dctx, "never", "kv", true)
		cancel()
		if StatusOf(err) != proto.StatusNotFound && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("bind past its deadline: %v", err)
		}

		// Cancelled by the caller: no reply, and the session carries on.
		cctx, cancel := context.WithCancel(ctx)
		go func() {
			testkit.Eventually(t, "the bind to wait", func() bool {
				tm.mu.Lock()
				defer tm.mu.Unlock()
				return tm.domains[cli.DomainID()].pendingBinds() == 1
			})
			cancel()
		}()
		if _, err := cli.Bind(cctx, "never", "kv", true); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled bind: %v", err)
		}
		testkit.Eventually(t, "the cancelled bind to end", func() bool {
			tm.mu.Lock()
			defer tm.mu.Unlock()
			return tm.domains[cli.DomainID()].pendingBinds() == 0
		})
		if _, err := cli.Ps(ctx); err != nil {
			t.Fatalf("ps after a cancelled bind: %v", err)
		}

		// Without a deadline, a waiting bind lasts until the session ends.
		go cli.Bind(context.Background(), "never", "kv", true)
		testkit.Eventually(t, "the bind to wait", func() bool {
			tm.mu.Lock()
			defer tm.mu.Unlock()
			return tm.domains[cli.DomainID()].pendingBinds() == 1
		})
		cc.Close()
		sc.Close()
	}()
	tm.checkNoLeaks(t, base)
}

// A bind to an export whose domain is gone fails with not_found.
func TestBindToDepartedServer(t *testing.T) {
	tm := startMonitor(t, Config{})
	ctx := testkit.Context(t)
	srv := tm.dial(t, "server")
	cli := tm.dial(t, "client")
	if _, err := srv.Export(ctx, "kv", "kv", 1024); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	testkit.Eventually(t, "the server's session to end", func() bool { return tm.sessionCount() == 1 })
	_, err := cli.Bind(ctx, "kv", "kv", false)
	wantStatus(t, "bind to a departed server", err, proto.StatusNotFound)
	tm.logs.Wait(t, "domain left", "program=server", "exports_withdrawn=[kv]")
}

func TestLimits(t *testing.T) {
	tm := startMonitor(t, Config{MaxExports: 2, MaxPendingBinds: 1})
	ctx := testkit.Context(t)
	c := tm.dial(t, "greedy")
	c.Export(ctx, "e1", "kv", 1024)
	c.Export(ctx, "e2", "kv", 1024)
	_, err := c.Export(ctx, "e3", "kv", 1024)
	wantStatus(t, "export over the limit", err, proto.StatusLimit)
	go c.Bind(context.Background(), "never", "kv", true)
	testkit.Eventually(t, "the bind to wait", func() bool {
		tm.mu.Lock()
		defer tm.mu.Unlock()
		return tm.domains[c.DomainID()].pendingBinds() == 1
	})
	_, err = c.Bind(ctx, "never2", "kv", true)
	wantStatus(t, "bind over the limit", err, proto.StatusLimit)
}

// Shutdown: the socket goes, sessions end, Serve returns nil.
func TestShutdown(t *testing.T) {
	dir := filepath.Join(testkit.ShortDir(t), "chanos")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan *Monitor, 1)
	go func() {
		m, err := New(Config{Dir: dir, Logger: discardLogger()})
		if err != nil {
			done <- err
			return
		}
		ready <- m
		done <- m.Serve(ctx)
	}()
	var m *Monitor
	select {
	case m = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	c, err := Dial(testkit.Context(t), dir, "to be shut down")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go c.Bind(context.Background(), "never", "kv", true)
	ns, err := c.Nameservice(testkit.Context(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	<-c.Done()
	if _, err := os.Lstat(m.Socket()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after shutdown: %v", err)
	}
	if _, _, err := ns.Get(testkit.Context(t), "x"); err == nil {
		t.Fatal("nameservice still answers after shutdown")
	}
	// Run does the same in one call.
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := Run(ctx2, Config{Dir: dir, Logger: discardLogger()}); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// ps stays within its bound by leaving domains out, and says so.
func TestPsDocumentTruncates(t *testing.T) {
	tm := startMonitor(t, Config{})
	ctx := testkit.Context(t)
	for i := range 20 {
		c := tm.dial(t, "some program with a long name")
		if _, err := c.Export(ctx, fmt.Sprintf("svc.%d", i), "kv", 1024); err != nil {
			t.Fatal(err)
		}
	}
	full, err := tm.psDocument(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	var snap chanos.Snapshot
	if err := json.Unmarshal(full, &snap); err != nil || snap.Truncated || len(snap.Domains) != 21 {
		t.Fatalf("the whole document: %v, truncated %v, %d domains", err, snap.Truncated, len(snap.Domains))
	}
	for _, limit := range []int{len(full), len(full) - 1, len(full) / 2, len(full) / 4} {
		b, err := tm.psDocument(limit)
		if err != nil {
			t.Fatal(err)
		}
		var cut chanos.Snapshot
		if err := json.Unmarshal(b, &cut); err != nil || len(b) > limit {
			t.Fatalf("limit %d: %d bytes, %v\n%s", limit, len(b), err, b)
		}
		if want := limit < len(full); cut.Truncated != want || (want && len(cut.Domains) >= 21) || len(cut.Domains) == 0 {
			t.Fatalf("limit %d: truncated %v, %d domains", limit, cut.Truncated, len(cut.Domains))
		}
	}
	if _, err := tm.psDocument(100); err == nil {
		t.Fatal("a limit below the monitor's own description: no error")
	}
}

func TestRemoteError(t *testing.T) {
	// A detail with a NUL and over the bound is cleaned, not refused.
	long := string(make([]byte, 3000))
	var re *chanos.RemoteError
	if err := remote("monitor.ps", fail(proto.StatusInvalid, "%s", long)); !errors.As(err, &re) ||
		re.Code != wire.Errval(proto.StatusInvalid) || len(re.Detail) > wire.MaxStatusDetail || strings.Contains(re.Detail, "\x00") {
		t.Fatalf("%+v", re)
	}
	// Any other error is internal.
	if err := remote("monitor.ps", errors.New("boom")); !errors.As(err, &re) || re.Code != wire.Errval(proto.StatusInternal) || re.Detail != "boom" {
		t.Fatalf("%+v", re)
	}
}

// A ps document larger than a socket's default send buffer (208 KiB)
// still arrives; one larger than a packet can carry is cut short.
func TestLargePs(t *testing.T) {
	for _, c := range []struct {
		name      string
		maxPacket int
		truncated bool
	}{
		{"fits", 0, false},
		{"cut", 100_000, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tm := startMonitor(t, Config{MaxExports: 5000, MaxTotalExports: 5000}, func(m *Monitor) { m.testMaxPacket = c.maxPacket })
			ctx := testkit.Context(t)
			big := tm.dial(t, "big")
			for i := range 4000 {
				if _, err := big.Export(ctx, fmt.Sprintf("a.rather.long.service.name.%05d", i), "kv", 1024); err != nil {
					t.Fatal(err)
				}
			}
			b, err := big.PsJSON(ctx)
			if err != nil {
				t.Fatalf("ps: %v", err)
			}
			var snap chanos.Snapshot
			if err := json.Unmarshal(b, &snap); err != nil {
				t.Fatal(err)
			}
			if snap.Truncated != c.truncated || (c.maxPacket > 0 && len(b) > c.maxPacket) || (!c.truncated && len(b) < 300_000) {
				t.Fatalf("%d bytes, truncated %v, %d domains", len(b), snap.Truncated, len(snap.Domains))
			}
			if _, err := big.Ps(ctx); err != nil {
				t.Fatalf("the session after a large ps: %v", err)
			}
		})
	}
}
