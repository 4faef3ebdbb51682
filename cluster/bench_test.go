package cluster

import (
	"context"
	"crypto/ed25519"
	"testing"

	"github.com/chanos/chanos/interconnect"
	"github.com/chanos/chanos/monitor"
)

// BenchmarkLinkHandshake: one Dial, handshake and preamble exchange
// included, to a listener on loopback.
func BenchmarkLinkHandshake(b *testing.B) {
	root, err := InitRoot(b.TempDir()+"/root", "bench", 0)
	if err != nil {
		b.Fatal(err)
	}
	a, s := benchMachine(b, root, "alpha"), benchMachine(b, root, "beta")
	ln, err := Listen("127.0.0.1:0", s, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ctx := context.Background()
	go func() {
		for {
			l, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			l.Close()
		}
	}()
	b.ResetTimer()
	for b.Loop() {
		l, err := Dial(ctx, ln.Addr().String(), a, nil)
		if err != nil {
			b.Fatal(err)
		}
		l.Close()
	}
}

// BenchmarkLinkRoundTrip: a 64-byte frame there and back on an open link.
func BenchmarkLinkRoundTrip(b *testing.B) {
	root, err := InitRoot(b.TempDir()+"/root", "bench", 0)
	if err != nil {
		b.Fatal(err)
	}
	a, s := benchMachine(b, root, "alpha"), benchMachine(b, root, "beta")
	ln, err := Listen("127.0.0.1:0", s, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ctx := context.Background()
	d, err := Dial(ctx, ln.Addr().String(), a, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	acc, err := ln.Accept(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer acc.Close()
	go func() {
		var in interconnect.Incoming
		for acc.Receive(ctx, &in) == nil {
			if acc.SendFrame(ctx, in.Frame, nil) != nil {
				return
			}
		}
	}()
	f := frame(1, make([]byte, 48))
	var in interconnect.Incoming
	for b.Loop() {
		if err := d.SendFrame(ctx, f, nil); err != nil {
			b.Fatal(err)
		}
		if err := d.Receive(ctx, &in); err != nil {
			b.Fatal(err)
		}
	}
}

// benchMachine makes a machine of root in a new directory and returns
// its identity.
func benchMachine(b *testing.B, root *Root, name string) *Identity {
	dir := b.TempDir() + "/m"
	if err := monitor.PrepareDir(dir); err != nil {
		b.Fatal(err)
	}
	key, err := LoadOrCreateKey(dir)
	if err != nil {
		b.Fatal(err)
	}
	cred, err := root.Admit(key.Public().(ed25519.PublicKey), name, root.Certificate().NotBefore, root.Certificate().NotAfter)
	if err != nil {
		b.Fatal(err)
	}
	id, err := Join(dir, root.Bundle(cred), nil)
	if err != nil {
		b.Fatal(err)
	}
	return id
}
