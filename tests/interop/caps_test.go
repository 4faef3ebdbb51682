package interop

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
	files "github.com/chanos/chanos/internal/testkit/files"
)

// Descriptors in messages between Go and C domains (docs/ump.md,
// "Descriptors"), over the interface files (testdata/caps/files.if): a
// cap is copied, a give_away_cap moves (the sender's copy is closed once
// sent), and neither side keeps a descriptor it was not meant to.

func capsPeer(t *testing.T) string { return filepath.Join(cBuild(t), "tools", "chanos-caps-peer") }

// settledFDs waits for this process's descriptor count to come back to
// at most want (goroutines that close a connection's last descriptors
// may still be running), and returns the count.
func settledFDs(t *testing.T, want int) int {
	t.Helper()
	n := testkit.OpenFDs(t)
	for deadline := time.Now().Add(5 * time.Second); n > want && time.Now().Before(deadline); n = testkit.OpenFDs(t) {
		time.Sleep(10 * time.Millisecond)
	}
	return n
}

// sizedFile makes a file of n bytes.
func sizedFile(t *testing.T, n int) *os.File {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "cap")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(n)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFDsCServerGoClient(t *testing.T) {
	dir := startMonitor(t)
	srv := spawn(t, dir, capsPeer(t), "serve", "c.files")
	if l := srv.Line(t); l != "serving c.files" {
		t.Fatalf("chanos-caps-peer printed %q", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	d := join(t, dir)
	f := sizedFile(t, 12345)
	before := testkit.OpenFDs(t)
	c, err := files.Connect(ctx, d, "c.files")
	if err != nil {
		t.Fatal(err)
	}
	if size, err := c.Stat(ctx, f); err != nil || size != 12345 {
		t.Fatalf("stat = %d, %v; want 12345", size, err)
	}
	gf, err := c.Dup(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := gf.Stat(); err != nil || st.Size() != 12345 {
		t.Fatalf("the descriptor dup handed back: %v, %v", st, err)
	}
	gf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := c.Send(ctx, &files.Share{FD: w, Tag: 42}); err != nil {
		t.Fatal(err)
	}
	// w was given away: closed here once sent, so the pipe ends when the
	// server has written and closed its copy.
	if _, err := w.Write([]byte{1}); err == nil {
		t.Fatal("the give_away_cap is still open on the sending side")
	}
	text, err := io.ReadAll(r)
	if err != nil || string(text) != "42" {
		t.Fatalf("share: the server wrote %q, %v", text, err)
	}
	// An event object: the C server signals the same object.
	ev, err := chanos.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	if err := c.Send(ctx, &files.Ring{Event: ev, Times: 3}); err != nil {
		t.Fatal(err)
	}
	if n, err := ev.Wait(ctx); err != nil || n != 3 {
		t.Fatalf("the event the C server signalled: %d, %v; want 3", n, err)
	}
	// A channel endpoint: a fresh pingpong connection, handed over; the C
	// server serves it once the files connection has ended.
	mine, ep, err := chanos.NewEndpoint(pingpong.Interface)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Send(ctx, &files.Hand{Endpoint: ep, Iface: "pingpong"}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	pc := pingpong.NewConn(mine)
	if v, err := pc.Echo(ctx, 41); err != nil || v != 41 {
		t.Fatalf("echo over the handed connection = %d, %v", v, err)
	}
	pc.Close()
	if n := settledFDs(t, before); n > before {
		t.Errorf("descriptors leaked in the Go client: %d before, %d after", before, n)
	}
	if !srv.wait(t, 0) {
		t.FailNow()
	}
}

// goFiles is the Go server of files.
type goFiles struct{}

func (goFiles) Share(ctx context.Context, from *files.Client, m files.Share) error {
	defer m.FD.Close()
	_, err := m.FD.WriteString(strconv.FormatUint(m.Tag, 10))
	return err
}

func (goFiles) Stat(ctx context.Context, fd *os.File) (uint64, error) {
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return 0, chanos.Errorf(chanos.CodeInvalidArgument, "stat: %v", err)
	}
	return uint64(st.Size()), nil
}

// Pass closes the untyped descriptor it is given.
func (goFiles) Pass(ctx context.Context, from *files.Client, m files.Pass) error {
	return m.Any.Close()
}

// Dup gives the descriptor it was sent back: the reply's send closes it.
func (goFiles) Dup(ctx context.Context, fd *os.File) (*os.File, error) { return fd, nil }

// Hand opens the pingpong endpoint it is given and serves it (echo
// answers its argument) until its peer closes it.
func (goFiles) Hand(ctx context.Context, from *files.Client, m files.Hand) error {
	c, err := chanos.OpenEndpoint(m.Endpoint, pingpong.Interface)
	if err != nil {
		return err
	}
	p := pingpong.NewConn(c)
	go func() {
		defer p.Close()
		p.Serve(context.Background(), echoServer{})
	}()
	return nil
}

// echoServer answers echo with its argument.
type echoServer struct{ pingpong.UnimplementedServer }

func (echoServer) Echo(ctx context.Context, v uint64) (uint64, error) { return v, nil }

func (goFiles) Ring(ctx context.Context, from *files.Client, m files.Ring) error {
	defer m.Event.Close()
	return m.Event.Add(m.Times)
}

func TestFDsGoServerCClient(t *testing.T) {
	dir := startMonitor(t)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	d := join(t, dir)
	l, err := files.Export(ctx, d, "go.files")
	if err != nil {
		t.Fatal(err)
	}
	f := sizedFile(t, 4321)
	before := testkit.OpenFDs(t)
	served := make(chan error, 1)
	go func() { served <- files.Serve(ctx, l, goFiles{}) }()
	out := run(t, dir, capsPeer(t), "call", "go.files", f.Name())
	want := "size 4321\ndup size 4321\nshare 42\nring 2\nendpoint echo 77\nleaked fds 0\n"
	if out != want {
		t.Fatalf("chanos-caps-peer call printed %q, want %q", out, want)
	}
	l.Close()
	if err := testkit.Await(t, "Serve's end", served); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Logf("Serve: %v", err)
	}
	if n := settledFDs(t, before); n > before {
		t.Errorf("descriptors leaked in the Go server: %d before, %d after", before, n)
	}
}

// Descriptors in flight are never stranded: a Go domain gives away the
// write ends of pipes to a C server that has stopped reading, and the
// server is killed -9 with them queued (in its caps socket, or received
// and not yet handled); each pipe's read end then reaches its end of file,
// which it does only once no copy of the write end is left anywhere.
func TestFDsInFlightWhenThePeerIsKilled(t *testing.T) {
	dir := startMonitor(t)
	srv := spawn(t, dir, capsPeer(t), "serve", "c.files")
	if l := srv.Line(t); l != "serving c.files" {
		t.Fatalf("chanos-caps-peer printed %q", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	d := join(t, dir)
	before := testkit.OpenFDs(t)
	c, err := files.Connect(ctx, d, "c.files")
	if err != nil {
		t.Fatal(err)
	}
	srv.Cmd.Process.Signal(syscall.SIGSTOP)
	var reads []*os.File
	for i := range 20 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		reads = append(reads, r)
		if err := c.Send(ctx, &files.Share{FD: w, Tag: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	srv.kill(t)
	for i, r := range reads {
		r.SetReadDeadline(time.Now().Add(10 * time.Second))
		rest, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("pipe %d: %v: a copy of its write end outlived the killed peer", i, err)
		}
		if len(rest) > 0 && string(rest) != strconv.Itoa(i) {
			t.Fatalf("pipe %d: read %q", i, rest)
		}
		r.Close()
	}
	c.Close()
	if n := settledFDs(t, before); n > before {
		t.Errorf("descriptors leaked in the Go client: %d before, %d after", before, n)
	}
}
