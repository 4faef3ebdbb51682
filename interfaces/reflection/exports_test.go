package reflection

import (
	"errors"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/idl"
	"github.com/chanos/chanos/interfaces/health"
	"github.com/chanos/chanos/interfaces/kv"
	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/testmonitor"
)

// TestDescribe exports kv, kv privately under another name, and an
// interface without a definition, with the reflection service beside
// them, and asks from another domain over ump: kv's definition compiles
// to kv's fingerprint; the private export, a name nobody exports and the
// reflection service itself answer as documented.
func TestDescribe(t *testing.T) {
	dir := testmonitor.Start(t)
	ctx := testkit.Context(t)
	srv, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	for _, e := range []struct {
		name  string
		iface chanos.Interface
		opts  []chanos.ExportOption
	}{
		{"kv", kv.Interface, nil},
		{"secret", kv.Interface, []chanos.ExportOption{chanos.Private()}},
		{"bare", chanos.Interface{Name: health.InterfaceName, MaxFrameSize: health.MaxFrameSize, Fingerprint: health.Fingerprint}, nil},
	} {
		l, err := chanos.Export(ctx, srv, e.name, e.iface, e.opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	l, err := Export(ctx, srv, NameOf("kv"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go Serve(ctx, l, NewExports(srv))

	cli, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	c, err := Connect(ctx, cli, NameOf("kv"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	name, fp, def, err := c.Describe(ctx, "kv")
	if err != nil || name != kv.InterfaceName || fp != kv.Fingerprint || def != kv.Definition {
		t.Fatalf("describe kv = %q, %016x, %d bytes, %v; want kv's", name, fp, len(def), err)
	}
	iface, err := idl.Compile(idl.Source{Name: "described.if", Data: []byte(def)}, nil, idl.Options{AllowNameMismatch: true})
	if err != nil {
		t.Fatalf("kv's definition does not compile: %v\n%s", err, def)
	}
	if iface.Fingerprint() != kv.Fingerprint {
		t.Errorf("kv's definition compiles to fingerprint %016x, want %016x", iface.Fingerprint(), kv.Fingerprint)
	}
	if _, _, def, err := c.Describe(ctx, NameOf("kv")); err != nil || def != Definition {
		t.Errorf("describe of the reflection service itself = %d bytes, %v", len(def), err)
	}
	for _, tc := range []struct {
		name string
		code chanos.Code
	}{{"secret", chanos.CodeNotFound}, {"nobody", chanos.CodeNotFound}, {"bare", chanos.CodeUnimplemented}} {
		if _, _, _, err := c.Describe(ctx, tc.name); !errors.Is(err, tc.code) {
			t.Errorf("describe %q = %v, want code %v", tc.name, err, tc.code)
		}
	}
}
