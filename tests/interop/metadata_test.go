package interop

import (
	"context"
	"fmt"
	"maps"
	"os"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/internal/testkit"
)

// A C handler sees the Go client that calls it, as the monitor knows it
// (chanos_conn_peer), and the metadata of each call (chanos_conn_meta);
// calls without metadata bring none.
func TestPeerAndMetadataCServerGoClient(t *testing.T) {
	prog := cProg(t, "peer_test")
	dir := startMonitor(t)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	srv := spawn(t, dir, prog, "serve", "c.peer")
	if l := srv.Line(t); l != "serving c.peer" {
		t.Fatalf("peer_test printed %q", l)
	}
	d, err := chanos.Join(ctx, chanos.WithDir(dir), chanos.WithProgram("go-metadata-client"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := pingpong.Connect(ctx, d, "c.peer")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Echo(chanos.WithMetadata(ctx, chanos.Metadata{"add": "40", "other": "x"}), 2); err != nil || v != 42 {
		t.Errorf("echo(2) with add=40 = %d, %v; want 42", v, err)
	}
	if v, err := c.Echo(ctx, 2); err != nil || v != 2 {
		t.Errorf("echo(2) without metadata = %d, %v; want 2", v, err)
	}
	var reply chanos.Metadata
	got, err := c.Bounce(chanos.CaptureReplyMetadata(chanos.WithMetadata(ctx, chanos.Metadata{"trace-id": "t-123"}), &reply), nil)
	want := fmt.Sprintf("domain=%d pid=%d uid=%d program=go-metadata-client trace=t-123", d.ID(), os.Getpid(), os.Getuid())
	if err != nil || string(got) != want {
		t.Errorf("bounce = %q, %v; want %q", got, err, want)
	}
	if !maps.Equal(reply, chanos.Metadata{"served-by": "c"}) {
		t.Errorf("bounce's reply metadata = %v, want the C handler's served-by=c", reply)
	}
	got, err = c.Bounce(ctx, nil)
	if err != nil || string(got[len(got)-len("trace=-"):]) != "trace=-" {
		t.Errorf("bounce without metadata = %q, %v", got, err)
	}
	c.Close()
	if !srv.wait(t, 0) {
		t.FailNow()
	}
}

// traceServer answers bounce with the metadata trace-id of the call, or
// "-", and gives a call with a trace-id the reply metadata echoed=it.
type traceServer struct{ pingpong.UnimplementedServer }

func (traceServer) Bounce(ctx context.Context, payload []byte) ([]byte, error) {
	md, ok := chanos.MetadataFrom(ctx)
	if !ok {
		return []byte("-"), nil
	}
	if err := chanos.SetReplyMetadata(ctx, chanos.Metadata{"echoed": md["trace-id"]}); err != nil {
		return nil, err
	}
	return []byte(md["trace-id"]), nil
}

// A C client's metadata (chanos_conn_set_meta) reaches a Go handler, and
// calls after it is cleared carry none; the Go handler's reply metadata
// reaches the C client (chanos_conn_meta after the call).
func TestMetadataCClientGoServer(t *testing.T) {
	prog := cProg(t, "peer_test")
	dir := startMonitor(t)
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Limit)
	defer cancel()
	l, err := pingpong.Export(ctx, join(t, dir), "go.trace")
	if err != nil {
		t.Fatal(err)
	}
	go pingpong.Serve(ctx, l, traceServer{})
	if out := run(t, dir, prog, "call", "go.trace"); out != "with c-trace echoed=c-trace\nwithout - echoed=-\n" {
		t.Fatalf("peer_test call printed %q", out)
	}
}
