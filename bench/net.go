package bench

import (
	"context"
	"fmt"
	"io"
	stdnet "net"
	"sync"

	"github.com/chanos/chanos/chanos"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interfaces/pingpong"
	"github.com/chanos/chanos/wire"
)

// NetConfig configures RunNet.
type NetConfig struct {
	Quick    bool
	Progress io.Writer
}

func (cfg *NetConfig) progress(format string, args ...any) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, format+"\n", args...)
	}
}

// RunNet runs the net suite (docs/net.md), both sides in this process
// over TCP on loopback:
//
//   - rtt, size 8: the echo rpc over net with TLS ("net"), over net with
//     TLS's authentication and no encryption (TLS.AuthOnly, "net-auth"),
//     over net in plain mode ("net-plain"), and 8 bytes each way over a
//     bare TCP connection ("tcp", the baseline);
//   - stream, sizes 64 and 65536: one-way messages of that many bytes
//     (frame included), the same transports;
//   - resume, net: the time from a reset of the TCP connection to the
//     completion of an echo call across it.
//
// Between network namespaces, gRPC-Go and the C side are not built yet.
func RunNet(ctx context.Context, cfg NetConfig, emit func(Result) error) error {
	iters, streamN, bigN, resumes := 20000, 200000, 20000, 200
	if cfg.Quick {
		iters, streamN, bigN, resumes = 2000, 20000, 2000, 20
	}
	transports := []string{"tcp", "net-plain", "net-auth", "net"}
	for _, tr := range transports {
		cfg.progress("net: rtt %s", tr)
		r, err := netRTT(ctx, tr, iters)
		if err != nil {
			return fmt.Errorf("net rtt %s: %w", tr, err)
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	for _, size := range []int{64, 65536} {
		n := streamN
		if size > 64 {
			n = bigN
		}
		for _, tr := range transports {
			cfg.progress("net: stream %s %d", tr, size)
			r, err := netStream(ctx, tr, n, size)
			if err != nil {
				return fmt.Errorf("net stream %s %d: %w", tr, size, err)
			}
			if err := emit(r); err != nil {
				return err
			}
		}
	}
	cfg.progress("net: resume")
	r, err := netResume(ctx, resumes)
	if err != nil {
		return fmt.Errorf("net resume: %w", err)
	}
	return emit(r)
}

// netPair opens a net connection on loopback, with TLS when tr is "net"
// and with TLS's authentication alone when it is "net-auth";
// the dialing side's TCP connections are reported to onConn.
func netPair(ctx context.Context, tr string, onConn func(stdnet.Conn)) (c, s *cnet.Link, stop func(), err error) {
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	so, co := &cnet.Options{}, &cnet.Options{}
	if tr == "net" || tr == "net-auth" {
		srv, err := cnet.NewIdentity()
		if err != nil {
			return nil, nil, nil, err
		}
		cli, err := cnet.NewIdentity()
		if err != nil {
			return nil, nil, nil, err
		}
		so.TLS = &cnet.TLS{Identity: srv, Admit: func(_ string, fp [32]byte) bool { return fp == cli.Fingerprint }}
		co.TLS = &cnet.TLS{Identity: cli, Peer: srv.Fingerprint}
		so.TLS.AuthOnly, co.TLS.AuthOnly = tr == "net-auth", tr == "net-auth"
	}
	if onConn != nil {
		co.Dial = func(ctx context.Context, addr string) (stdnet.Conn, error) {
			var d stdnet.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				onConn(c)
			}
			return c, err
		}
	}
	L := cnet.Listen(ln, so)
	c, err = cnet.Dial(ctx, ln.Addr().String(), co)
	if err == nil {
		s, err = L.Accept(ctx)
	}
	if err != nil {
		if c != nil {
			c.Close()
		}
		L.Close()
		return nil, nil, nil, err
	}
	return c, s, func() { c.Close(); s.Close(); L.Close() }, nil
}

func netRTT(ctx context.Context, tr string, iters int) (Result, error) {
	samples := make([]int64, iters)
	var total int64
	if tr == "tcp" {
		c, stop, err := tcpEchoPair()
		if err != nil {
			return Result{}, err
		}
		defer stop()
		var b [8]byte
		t0 := nanotime()
		for i := range samples {
			t := nanotime()
			if _, err := c.Write(b[:]); err != nil {
				return Result{}, err
			}
			if _, err := io.ReadFull(c, b[:]); err != nil {
				return Result{}, err
			}
			samples[i] = nanotime() - t
		}
		total = nanotime() - t0
	} else {
		cl, sl, stop, err := netPair(ctx, tr, nil)
		if err != nil {
			return Result{}, err
		}
		defer stop()
		s := pingpong.NewConn(chanos.NewConn(sl, pingpong.Interface))
		go s.Serve(ctx, echoServer{})
		c := pingpong.NewConn(chanos.NewConn(cl, pingpong.Interface))
		t0 := nanotime()
		for i := range samples {
			t := nanotime()
			if _, err := c.Echo(ctx, uint64(i)); err != nil {
				return Result{}, err
			}
			samples[i] = nanotime() - t
		}
		total = nanotime() - t0
	}
	r := rttResult(samples, total, nil)
	r.Suite, r.Case, r.Transport, r.Peers, r.Size, r.TotalNS = "net", "rtt", tr, "Go/Go", 8, total
	return r, nil
}

// tcpEchoPair is a bare TCP connection on loopback whose far end echoes
// 8-byte messages.
func tcpEchoPair() (stdnet.Conn, func(), error) {
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		var b [8]byte
		for {
			if _, err := io.ReadFull(s, b[:]); err != nil {
				return
			}
			if _, err := s.Write(b[:]); err != nil {
				return
			}
		}
	}()
	c, err := stdnet.Dial("tcp", ln.Addr().String())
	if err != nil {
		ln.Close()
		wg.Wait()
		return nil, nil, err
	}
	return c, func() { c.Close(); ln.Close(); wg.Wait() }, nil
}

func netStream(ctx context.Context, tr string, n, size int) (Result, error) {
	var total int64
	if tr == "tcp" {
		ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return Result{}, err
		}
		defer ln.Close()
		done := make(chan error, 1)
		go func() {
			s, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			defer s.Close()
			_, err = io.CopyN(io.Discard, s, int64(n)*int64(size))
			done <- err
		}()
		c, err := stdnet.Dial("tcp", ln.Addr().String())
		if err != nil {
			return Result{}, err
		}
		defer c.Close()
		b := make([]byte, size)
		t0 := nanotime()
		for range n {
			if _, err := c.Write(b); err != nil {
				return Result{}, err
			}
		}
		if err := <-done; err != nil {
			return Result{}, err
		}
		total = nanotime() - t0
	} else {
		cl, sl, stop, err := netPair(ctx, tr, nil)
		if err != nil {
			return Result{}, err
		}
		defer stop()
		done := make(chan error, 1)
		go func() {
			var in chanos.Incoming
			for range n {
				if err := sl.Receive(ctx, &in); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		m := &pingpong.Data{Payload: make([]byte, size-28)}
		frame, err := encodeFrame(m)
		if err != nil {
			return Result{}, err
		}
		if len(frame) != size {
			return Result{}, fmt.Errorf("a frame of %d bytes, want %d", len(frame), size)
		}
		t0 := nanotime()
		for range n {
			if err := cl.SendFrame(ctx, frame, nil); err != nil {
				return Result{}, err
			}
		}
		if err := <-done; err != nil {
			return Result{}, err
		}
		total = nanotime() - t0
	}
	secs := float64(total) / 1e9
	return Result{Suite: "net", Case: "stream", Transport: tr, Peers: "Go/Go", Size: size, Iters: n, TotalNS: total,
		MsgsPerS: f64(float64(n) / secs), BytesPerS: f64(float64(n) * float64(size) / secs)}, nil
}

// netResume resets the TCP connection under a net connection n times and
// times, each time, the echo call that the reset interrupts: the time to
// notice the reset, redial, exchange hellos and retransmit.
func netResume(ctx context.Context, n int) (Result, error) {
	var mu sync.Mutex
	var last stdnet.Conn
	cl, sl, stop, err := netPair(ctx, "net", func(c stdnet.Conn) {
		mu.Lock()
		last = c
		mu.Unlock()
	})
	if err != nil {
		return Result{}, err
	}
	defer stop()
	s := pingpong.NewConn(chanos.NewConn(sl, pingpong.Interface))
	go s.Serve(ctx, echoServer{})
	c := pingpong.NewConn(chanos.NewConn(cl, pingpong.Interface))
	samples := make([]int64, n)
	var total int64
	for i := range samples {
		mu.Lock()
		tc, _ := last.(*stdnet.TCPConn)
		mu.Unlock()
		t := nanotime()
		if tc != nil {
			tc.SetLinger(0)
			tc.Close()
		}
		if _, err := c.Echo(ctx, uint64(i)); err != nil {
			return Result{}, err
		}
		samples[i] = nanotime() - t
		total += samples[i]
	}
	if got := cl.Resumes(); got < uint64(n) {
		return Result{}, fmt.Errorf("%d resets but %d resumes", n, got)
	}
	r := rttResult(samples, total, nil)
	r.Suite, r.Case, r.Transport, r.Peers, r.TotalNS = "net", "resume", "net", "Go/Go", total
	return r, nil
}

func encodeFrame(m interface{ Encode(*wire.Buffer) error }) ([]byte, error) {
	var b wire.Buffer
	if err := m.Encode(&b); err != nil {
		return nil, err
	}
	return b.B, nil
}
