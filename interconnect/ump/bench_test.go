package ump

import (
	"context"
	"testing"
)

// BenchmarkRoundTrip measures an 8-byte round trip between two goroutines
// of this process (chanos bench ump measures between processes).
func BenchmarkRoundTrip(b *testing.B) {
	a, c, err := Pipe(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	defer c.Close()
	ctx := context.Background()
	go func() {
		for {
			m, err := c.Receive(ctx)
			if err != nil || c.Send(ctx, m) != nil {
				return
			}
		}
	}()
	msg := make([]byte, 8)
	b.ReportAllocs()
	for b.Loop() {
		if err := a.Send(ctx, msg); err != nil {
			b.Fatal(err)
		}
		if _, err := a.Receive(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStream64 measures one-way throughput of 64-byte messages.
func BenchmarkStream64(b *testing.B) {
	a, c, err := Pipe(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	defer c.Close()
	ctx := context.Background()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := c.Receive(ctx); err != nil {
				return
			}
		}
	}()
	msg := make([]byte, 64)
	b.ReportAllocs()
	b.SetBytes(64)
	for b.Loop() {
		if err := a.Send(ctx, msg); err != nil {
			b.Fatal(err)
		}
	}
	a.Close()
	<-done
}

// BenchmarkEndpoint measures a connection's setup and teardown within
// this process: a fresh ring pair made and handed over as an endpoint
// (NewEndpoint), opened on the other side (OpenEndpoint), and both sides
// closed. chanos bench caps and bind measure it between processes.
func BenchmarkEndpoint(b *testing.B) {
	o := &Options{MaxMessageSize: 64}
	for b.Loop() {
		c, ep, err := NewEndpoint(o, []byte("bench"))
		if err != nil {
			b.Fatal(err)
		}
		d, _, err := OpenEndpoint(ep, o)
		if err != nil {
			b.Fatal(err)
		}
		d.Close()
		c.Close()
	}
}
