package monitor

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect/ump"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

func TestMain(m *testing.M) {
	code := testkit.Run(m, testkit.Roles{roleDomain: helperDomain, roleSleeper: helperSleeper})
	if chanosBin != "" {
		os.RemoveAll(filepath.Dir(chanosBin))
	}
	os.Exit(code)
}

// testMonitor is a monitor served in the test's process.
type testMonitor struct {
	*Monitor
	logs *testkit.Output
	dir  string
}

// startMonitor starts a monitor with cfg in a new directory. When the
// test ends it stops the monitor and checks that Serve returned nil and
// the socket is gone. setup, if not nil, runs between New and Serve.
func startMonitor(t testing.TB, cfg Config, setup ...func(*Monitor)) *testMonitor {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(testkit.ShortDir(t), "chanos")
	}
	logs := &testkit.Output{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range setup {
		f(m)
	}
	testkit.Serve(t, m, logs)
	return &testMonitor{Monitor: m, logs: logs, dir: m.Dir()}
}

// dial opens a session as program; it is closed when the test ends.
func (tm *testMonitor) dial(t *testing.T, program string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, tm.dir, program)
	if err != nil {
		t.Fatalf("dial as %s: %v", program, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// idle reports whether the monitor holds no session, connection record
// or nameservice connection, and only the nameservice's export.
func (m *Monitor) idle() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions) == 0 && len(m.domains) == 0 && len(m.conns) == 0 &&
		len(m.nsConns) == 0 && len(m.exports) == 1
}

func (m *Monitor) sessionCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

// resources is what a leak check compares: goroutines and descriptors of
// the test process (monitor and clients together).
type resources struct {
	goroutines int
	fds        int
}

func snapshotResources(t *testing.T) resources {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return resources{goroutines: runtime.NumGoroutine(), fds: len(ents)}
}

// checkNoLeaks waits until the monitor is idle and the process is back
// to the goroutines and descriptors of base: every session, bind,
// nameservice connection and watch has ended and closed what it held.
func (tm *testMonitor) checkNoLeaks(t *testing.T, base resources) {
	t.Helper()
	testkit.Eventually(t, "the monitor to be idle", tm.idle)
	var now resources
	limit := time.Now().Add(testkit.Limit)
	for {
		now = snapshotResources(t)
		if now.goroutines <= base.goroutines && now.fds <= base.fds {
			return
		}
		if time.Now().After(limit) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("leak: %d goroutines and %d descriptors, %d and %d before\n%s", now.goroutines, now.fds, base.goroutines, base.fds, buf)
		}
		time.Sleep(time.Millisecond)
	}
}

// wantStatus checks that err is an error reply with status want.
func wantStatus(t *testing.T, what string, err error, want proto.Status) {
	t.Helper()
	if got := StatusOf(err); got != want {
		t.Fatalf("%s: got %v (status %v), want status %v", what, err, got, want)
	}
}

// openPair opens both sides of a ump connection from a bind reply's and
// an incoming message's descriptors.
func openPair(t *testing.T, bound *proto.BindReply, in *proto.Incoming) (client, server *ump.Conn) {
	t.Helper()
	o := &ump.Options{MaxMessageSize: int(bound.MaxFrame)}
	server, err := OpenUMP(ump.Creator, in.Fds, o)
	if err != nil {
		closeCaps(bound.Fds)
		t.Fatalf("open the server's side: %v", err)
	}
	client, err = OpenUMP(ump.Attacher, bound.Fds, o)
	if err != nil {
		server.Close()
		t.Fatalf("open the client's side: %v", err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// exchange sends msg each way over a and b and checks it arrives.
func exchange(t *testing.T, a, b *ump.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, dir := range [][2]*ump.Conn{{a, b}, {b, a}} {
		if err := dir[0].Send(ctx, []byte(msg)); err != nil {
			t.Fatalf("send: %v", err)
		}
		got, err := dir[1].Receive(ctx)
		if err != nil || string(got) != msg {
			t.Fatalf("receive: %q, %v; want %q", got, err, msg)
		}
	}
}

// encode encodes m as a frame with call id id.
func encode(t *testing.T, m wire.Message, id uint32) []byte {
	t.Helper()
	var buf wire.Buffer
	if err := m.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	wire.SetCallID(buf.B, id)
	return buf.B
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
