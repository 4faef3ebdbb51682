package net_test

import (
	"context"
	"io"
	stdnet "net"
	"testing"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/wire"
)

// benchEcho measures the echo rpc's round trip over a net connection on
// loopback, the server serving inline.
func benchEcho(b *testing.B, so, co *cnet.Options) {
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	L := cnet.Listen(ln, so)
	defer L.Close()
	ctx := context.Background()
	cl, err := cnet.Dial(ctx, ln.Addr().String(), co)
	if err != nil {
		b.Fatal(err)
	}
	sl, err := L.Accept(ctx)
	if err != nil {
		b.Fatal(err)
	}
	s := pingpong.NewConn(chanos.NewConn(sl, pingpong.Interface))
	go s.Serve(ctx, &orderServer{})
	c := pingpong.NewConn(chanos.NewConn(cl, pingpong.Interface))
	defer s.Close()
	defer c.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Echo(ctx, uint64(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRTTNetPlain and BenchmarkRTTNetTLS are the echo rpc's round
// trip over net; BenchmarkRTTRawTCP is the baseline: 8 bytes each way
// over a bare TCP connection (TCP_NODELAY, Go's default), the same path.
func BenchmarkRTTNetPlain(b *testing.B) { benchEcho(b, nil, nil) }

func BenchmarkRTTNetTLS(b *testing.B) {
	so, co := tlsPair(false)
	benchEcho(b, so, co)
}

// BenchmarkRTTNetAuth is the round trip in the authenticated-only mode.
func BenchmarkRTTNetAuth(b *testing.B) {
	so, co := tlsPair(true)
	benchEcho(b, so, co)
}

// tlsPair returns the options of an accepting and a dialing side that
// pin each other's certificates.
func tlsPair(authOnly bool) (so, co *cnet.Options) {
	srv, _ := cnet.NewIdentity()
	cli, _ := cnet.NewIdentity()
	return &cnet.Options{TLS: &cnet.TLS{Identity: srv, AuthOnly: authOnly, Admit: func(_ string, fp [32]byte) bool { return fp == cli.Fingerprint }}},
		&cnet.Options{TLS: &cnet.TLS{Identity: cli, Peer: srv.Fingerprint, AuthOnly: authOnly}}
}

// BenchmarkRTTLink is the round trip of the link alone, without the rpc
// engine: a frame sent and the peer's frame received, the peer answering
// each with SendFrame in its receiving goroutine. Beside BenchmarkRTTNetPlain
// it tells what is the link's and what the engine's.
func BenchmarkRTTLink(b *testing.B) {
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	L := cnet.Listen(ln, nil)
	defer L.Close()
	ctx := context.Background()
	cl, err := cnet.Dial(ctx, ln.Addr().String(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	sl, err := L.Accept(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer sl.Close()
	frame := make([]byte, wire.HeaderSize+8)
	wire.PutHeader(frame, wire.Header{Size: uint32(len(frame)), Msg: 1})
	go func() {
		var in interconnect.Incoming
		for {
			if sl.Receive(ctx, &in) != nil || sl.SendFrame(ctx, frame, nil) != nil {
				return
			}
		}
	}()
	var in interconnect.Incoming
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := cl.SendFrame(ctx, frame, nil); err != nil {
			b.Fatal(err)
		}
		if err := cl.Receive(ctx, &in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRTTRawTCP(b *testing.B) {
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		var buf [8]byte
		for {
			if _, err := io.ReadFull(s, buf[:]); err != nil {
				return
			}
			if _, err := s.Write(buf[:]); err != nil {
				return
			}
		}
	}()
	c, err := stdnet.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var buf [8]byte
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(buf[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStream64 is one-way 64-byte messages over net; it reports
// messages a second; the Auth and TLS variants are authenticated only
// and encrypted; 64K, frames of 64 KiB.
func BenchmarkStream64(b *testing.B) { benchStream(b, 64, nil, nil) }

func BenchmarkStream64Auth(b *testing.B) {
	so, co := tlsPair(true)
	benchStream(b, 64, so, co)
}

func BenchmarkStream64TLS(b *testing.B) {
	so, co := tlsPair(false)
	benchStream(b, 64, so, co)
}

func BenchmarkStream64K(b *testing.B) { benchStream(b, 64<<10, nil, nil) }

func BenchmarkStream64KAuth(b *testing.B) {
	so, co := tlsPair(true)
	benchStream(b, 64<<10, so, co)
}

func BenchmarkStream64KTLS(b *testing.B) {
	so, co := tlsPair(false)
	benchStream(b, 64<<10, so, co)
}

func benchStream(b *testing.B, size int, so, co *cnet.Options) {
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	L := cnet.Listen(ln, so)
	defer L.Close()
	ctx := context.Background()
	cl, err := cnet.Dial(ctx, ln.Addr().String(), co)
	if err != nil {
		b.Fatal(err)
	}
	sl, err := L.Accept(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	defer sl.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var in chanos.Incoming
		for i := 0; i < b.N; i++ {
			if err := sl.Receive(ctx, &in); err != nil {
				return
			}
		}
	}()
	f := frame(b, &pingpong.Data{Payload: make([]byte, size-28)})
	b.SetBytes(int64(len(f)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := cl.SendFrame(ctx, f, nil); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkStream64KRawTCP is the 64 KiB streams' baseline: the same
// bytes a frame at a time over a bare TCP connection, the receiver reading
// each whole into a buffer of its own.
func BenchmarkStream64KRawTCP(b *testing.B) {
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	const size = 64 << 10
	done := make(chan struct{})
	go func() {
		defer close(done)
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		buf := make([]byte, size)
		for i := 0; i < b.N; i++ {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
		}
	}()
	c, err := stdnet.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, size)
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
