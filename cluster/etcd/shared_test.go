package etcd

import (
	"errors"
	"testing"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/etcdtest"
)

// TestShared: a value one machine replaces reaches the other through its
// watch; a replace from a stale revision is refused; a machine opening the
// value later loads it.
func TestShared(t *testing.T) {
	t.Parallel() // each test has its own etcd
	ec := etcdtest.Start(t, etcdtest.Options{})
	ctx := testkit.Context(t)
	cluster := freshCluster()
	a, b := open(t, ec.Endpoints(), cluster, 1), open(t, ec.Endpoints(), cluster, 2)
	sa, err := a.Shared(ctx, "list")
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	sb, err := b.Shared(ctx, "list")
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if v, rev := sa.Value(); v != nil || rev != 0 {
		t.Fatalf("a new value: %q at %d, want none", v, rev)
	}
	changed := sb.Changed()
	if err := sa.Replace(ctx, 0, []byte("one")); err != nil {
		t.Fatal(err)
	}
	testkit.Await(t, "b sees the change", changed)
	v, rev := sb.Value()
	if string(v) != "one" || rev == 0 {
		t.Fatalf("b sees %q at %d, want one", v, rev)
	}
	if err := sb.Replace(ctx, 0, []byte("two")); !errors.Is(err, ErrConflict) {
		t.Fatalf("replace from a stale revision: %v, want ErrConflict", err)
	}
	if err := sb.Replace(ctx, rev, []byte("two")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "a sees two", func() bool { v, _ := sa.Value(); return string(v) == "two" })
	c := open(t, ec.Endpoints(), cluster, 3)
	sc, err := c.Shared(ctx, "list")
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if v, _ := sc.Value(); string(v) != "two" {
		t.Fatalf("a machine opening the value later loads %q, want two", v)
	}
}
