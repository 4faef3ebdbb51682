package interop

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	calcv1 "github.com/chanos/chanos/internal/testkit/versions/calcv1"
	calcv2 "github.com/chanos/chanos/internal/testkit/versions/calcv2"
)

// Two versions of one interface, calc (testdata/versions): add's delta is
// an int64 in version 1 and an int32 in version 2. A client of one binds
// no server of the other: Connect fails with ErrInterfaceMismatch (C:
// CHANOS_ERR_MISMATCH), naming the interface and both fingerprints,
// instead of a first call that fails with "closed by the peer".

// sum is calc version 1's server.
type sum struct{ total int64 }

func (s *sum) Add(ctx context.Context, delta int64) (int64, error) {
	s.total += delta
	return s.total, nil
}

// mismatched checks that err is the refusal of a bind across versions.
func mismatched(t *testing.T, what, msg string, err error) {
	t.Helper()
	want := []string{"calc", fmt.Sprintf("%016x", calcv1.Fingerprint), fmt.Sprintf("%016x", calcv2.Fingerprint)}
	if err != nil && !errors.Is(err, chanos.ErrInterfaceMismatch) {
		t.Errorf("%s: %v; want chanos.ErrInterfaceMismatch", what, err)
	}
	if err != nil {
		msg = err.Error()
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: %q does not name %q", what, msg, w)
		}
	}
}

func TestVersionsGo(t *testing.T) {
	if calcv1.Fingerprint == calcv2.Fingerprint {
		t.Fatal("the two versions of calc have one fingerprint")
	}
	dir := startMonitor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	srv := join(t, dir)
	l, err := calcv1.Export(ctx, srv, "calc")
	if err != nil {
		t.Fatal(err)
	}
	go calcv1.Serve(ctx, l, &sum{})
	cli := join(t, dir)

	// The same version binds and calls.
	c1, err := calcv1.Connect(ctx, cli, "calc")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := c1.Add(ctx, 5); err != nil || s != 5 {
		t.Fatalf("add(5) = %d, %v", s, err)
	}
	c1.Close()

	// The other version is refused at Connect, by name and by iref.
	_, err = calcv2.Connect(ctx, cli, "calc")
	if err == nil {
		t.Fatal("a calc v2 client bound a calc v1 server")
	}
	t.Logf("Connect across versions: %v", err)
	mismatched(t, "Connect", "", err)
	_, err = calcv2.ConnectRef(ctx, cli, l.Ref())
	if err == nil {
		t.Fatal("a calc v2 client bound a calc v1 server by iref")
	}
	mismatched(t, "ConnectRef", "", err)

	// chanos names shows the export's fingerprint.
	out := run(t, dir, goBin(t, "chanos"), "names", "calc")
	if !strings.Contains(out, fmt.Sprintf("%016x", calcv1.Fingerprint)) {
		t.Errorf("chanos names does not show calc's fingerprint:\n%s", out)
	}
}

func TestVersionsC(t *testing.T) {
	peer := filepath.Join(cBuild(t), "tools", "chanos-version-peer")
	dir := startMonitor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A C client of version 2 against a Go server of version 1.
	srv := join(t, dir)
	l, err := calcv1.Export(ctx, srv, "calc1")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	out := runExit(t, dir, 1, peer, "connect", dir, "calc1")
	if !strings.HasPrefix(out, "connect: monitor: interface mismatch: ") {
		t.Errorf("the C client printed %q", out)
	}
	mismatched(t, "C connect", out, nil)

	// A C server of version 2: a Go client of version 1 is refused, one
	// of version 2 (the same .if compiled to Go) binds.
	start(t, dir, "exported", peer, "export", dir, "calc2")
	cli := join(t, dir)
	_, err = calcv1.Connect(ctx, cli, "calc2")
	if err == nil {
		t.Fatal("a calc v1 client bound a calc v2 server")
	}
	mismatched(t, "Connect to C", "", err)
	c2, err := calcv2.Connect(ctx, cli, "calc2")
	if err != nil {
		t.Fatalf("calc v2 from Go to C: %v", err)
	}
	c2.Close()
}
