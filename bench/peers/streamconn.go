package peers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
)

// bufSize is the read buffer of the byte-stream peers, on both sides.
const bufSize = 64 << 10

// streamPeer is a byte-stream peer: a Unix domain socket ("uds"), TCP over
// loopback with TCP_NODELAY ("tcp"), or a pair of pipes ("pipe"). Frames
// are those of frame.go: the sender writes each frame with one write, and
// the receiver reads through a 64 KiB buffer.
type streamPeer struct{ name string }

func (p streamPeer) Transport() string { return p.name }

func (p streamPeer) Start(ctx context.Context, env Env, n int) (Server, error) {
	switch p.name {
	case "uds":
		dir, err := os.MkdirTemp("", "chanos-peers-")
		if err != nil {
			return nil, err
		}
		ps, err := startProc(ctx, env, p.name, filepath.Join(dir, "uds.sock"), n, nil, dir)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		return &netServer{procServer: ps, network: "unix"}, nil
	case "tcp":
		ps, err := startProc(ctx, env, p.name, "127.0.0.1:0", n, nil, "")
		if err != nil {
			return nil, err
		}
		return &netServer{procServer: ps, network: "tcp"}, nil
	case "pipe":
		return startPipes(ctx, env, n)
	}
	return nil, fmt.Errorf("no stream transport %q", p.name)
}

// netServer dials a uds or tcp server process.
type netServer struct {
	*procServer
	network string
}

func (s *netServer) Dial(ctx context.Context, i int) (Client, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, s.network, s.addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.SetNoDelay(true); err != nil {
			c.Close()
			return nil, err
		}
	}
	return newFramedClient(c, c, c), nil
}

// pipeServer is a server process that owns one pair of pipes per client:
// client i writes requests to its c2s pipe and reads replies from its s2c
// pipe.
type pipeServer struct {
	*procServer
	mu      sync.Mutex
	clients [][2]*os.File // read end of s2c, write end of c2s
}

func startPipes(ctx context.Context, env Env, n int) (Server, error) {
	var extra []*os.File // the child's ends: c2s read, s2c write, per client
	var mine [][2]*os.File
	fail := func(err error) (Server, error) {
		for _, f := range extra {
			f.Close()
		}
		for _, m := range mine {
			m[0].Close()
			m[1].Close()
		}
		return nil, err
	}
	for range n {
		c2sR, c2sW, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		s2cR, s2cW, err := os.Pipe()
		if err != nil {
			c2sR.Close()
			c2sW.Close()
			return fail(err)
		}
		extra = append(extra, c2sR, s2cW)
		mine = append(mine, [2]*os.File{s2cR, c2sW})
	}
	ps, err := startProc(ctx, env, "pipe", "-", n, extra, "")
	if err != nil {
		extra = nil // startProc closed them
		return fail(err)
	}
	return &pipeServer{procServer: ps, clients: mine}, nil
}

func (s *pipeServer) Dial(_ context.Context, i int) (Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.clients) || s.clients[i][0] == nil {
		return nil, fmt.Errorf("pipe: no client %d", i)
	}
	r, w := s.clients[i][0], s.clients[i][1]
	s.clients[i] = [2]*os.File{}
	return newFramedClient(r, w, closers{w, r}), nil
}

func (s *pipeServer) Close() error {
	s.mu.Lock()
	for _, c := range s.clients {
		if c[0] != nil {
			c[0].Close()
			c[1].Close()
		}
	}
	s.clients = nil
	s.mu.Unlock()
	return s.procServer.Close()
}

type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// framedClient is the client side of the frame protocol over a byte
// stream.
type framedClient struct {
	r  *bufio.Reader
	w  io.Writer
	c  io.Closer
	rb frameReader

	out  []byte // header and payload, as sent
	call []byte // header, call id and payload of a call
	id   uint64
	hdr  [hdrLen]byte
}

func newFramedClient(r io.Reader, w io.Writer, c io.Closer) *framedClient {
	fc := &framedClient{r: bufio.NewReaderSize(r, bufSize), w: w, c: c}
	fc.rb.r = fc.r
	return fc
}

func (c *framedClient) SetPayload(p []byte) error {
	if len(p) > maxPayload-callIDLen {
		return fmt.Errorf("payload of %d bytes is too large", len(p))
	}
	c.out = make([]byte, hdrLen+len(p))
	copy(c.out[hdrLen:], p)
	c.call = make([]byte, hdrLen+callIDLen+len(p))
	copy(c.call[hdrLen+callIDLen:], p)
	return nil
}

func (c *framedClient) payloadLen() int { return len(c.out) - hdrLen }

func (c *framedClient) RoundTrip() error {
	putHdr(c.out, opEcho, c.payloadLen())
	if _, err := c.w.Write(c.out); err != nil {
		return err
	}
	op, p, err := c.rb.read()
	if err != nil {
		return err
	}
	return checkEcho(op, opEcho, p, c.out[hdrLen:])
}

func (c *framedClient) Call() error {
	c.id++
	putHdr(c.call, opCall, len(c.call)-hdrLen)
	putCallID(c.call[hdrLen:], c.id)
	if _, err := c.w.Write(c.call); err != nil {
		return err
	}
	op, p, err := c.rb.read()
	if err != nil {
		return err
	}
	return checkCall(op, p, c.id, c.call[hdrLen+callIDLen:])
}

func (c *framedClient) Send() error {
	putHdr(c.out, opSink, c.payloadLen())
	_, err := c.w.Write(c.out)
	return err
}

func (c *framedClient) Ack() (Ack, error) {
	putHdr(c.hdr[:], opAck, 0)
	if _, err := c.w.Write(c.hdr[:]); err != nil {
		return Ack{}, err
	}
	op, p, err := c.rb.read()
	if err != nil {
		return Ack{}, err
	}
	if op != opAck {
		return Ack{}, fmt.Errorf("reply op %d to an ack", op)
	}
	return parseAck(p)
}

func (c *framedClient) Close() error { return c.c.Close() }

// frameReader reads frames into a buffer it reuses.
type frameReader struct {
	r   io.Reader
	buf []byte // the last frame: header, then payload
}

// read returns the next frame's op and payload; the payload is valid until
// the next read.
func (fr *frameReader) read() (byte, []byte, error) {
	if cap(fr.buf) < hdrLen {
		fr.buf = make([]byte, hdrLen, hdrLen+bufSize)
	}
	fr.buf = fr.buf[:hdrLen]
	if _, err := io.ReadFull(fr.r, fr.buf); err != nil {
		return 0, nil, err
	}
	op, n, err := parseHdr(fr.buf)
	if err != nil {
		return 0, nil, err
	}
	if cap(fr.buf) < hdrLen+n {
		fr.buf = append(fr.buf, make([]byte, n)...)
	}
	fr.buf = fr.buf[:hdrLen+n]
	if _, err := io.ReadFull(fr.r, fr.buf[hdrLen:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return op, fr.buf[hdrLen:], nil
}

// frame returns the whole of the last frame read, header included.
func (fr *frameReader) frame() []byte { return fr.buf }

// serveFrames is the echo server of the frame protocol on one byte
// stream; it returns at the stream's end.
func serveFrames(r io.Reader, w io.Writer) error {
	fr := frameReader{r: bufio.NewReaderSize(r, bufSize)}
	var ack Ack
	for {
		op, p, err := fr.read()
		if err != nil {
			return err
		}
		switch op {
		case opEcho, opCall:
			// The reply is the request frame itself, written back from
			// the buffer it was read into.
			if _, err := w.Write(fr.frame()); err != nil {
				return err
			}
		case opSink:
			ack.Msgs++
			ack.Bytes += uint64(len(p))
		case opAck:
			var b [hdrLen + ackLen]byte
			putHdr(b[:], opAck, ackLen)
			putAck(b[hdrLen:], ack.Msgs, ack.Bytes)
			ack = Ack{}
			if _, err := w.Write(b[:]); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unexpected op %d", op)
		}
	}
}

func serveUDS(addr string, _ int) (string, func() error, error) {
	l, err := net.Listen("unix", addr)
	if err != nil {
		return "", nil, err
	}
	return addr, func() error { return acceptLoop(l, serveConnFrames) }, nil
}

func serveTCP(addr string, _ int) (string, func() error, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, err
	}
	return l.Addr().String(), func() error { return acceptLoop(l, serveConnFrames) }, nil
}

func serveConnFrames(c net.Conn) error {
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.SetNoDelay(true); err != nil {
			return err
		}
	}
	return serveFrames(c, c)
}

// acceptLoop serves each connection of l on its own goroutine, the way Go
// servers do, and logs connections that end in error.
func acceptLoop(l net.Listener, serve func(net.Conn) error) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			if err := serve(c); serverError(err) {
				fmt.Fprintln(os.Stderr, "chanos-peers server:", err)
			}
		}()
	}
}

// servePipe serves the n pipe pairs the driver passed as descriptors 3,
// 4, ...: c2s read end then s2c write end, per client.
func servePipe(_ string, n int) (string, func() error, error) {
	type pair struct{ r, w *os.File }
	var pairs []pair
	for i := range n {
		r := os.NewFile(uintptr(3+2*i), fmt.Sprintf("c2s%d", i))
		w := os.NewFile(uintptr(4+2*i), fmt.Sprintf("s2c%d", i))
		if r == nil || w == nil {
			return "", nil, fmt.Errorf("pipe: descriptors for client %d missing", i)
		}
		pairs = append(pairs, pair{r, w})
	}
	return "-", func() error {
		var wg sync.WaitGroup
		for _, p := range pairs {
			wg.Go(func() {
				defer p.w.Close()
				if err := serveFrames(p.r, p.w); serverError(err) {
					fmt.Fprintln(os.Stderr, "chanos-peers server:", err)
				}
			})
		}
		wg.Wait()
		select {} // exit comes from stdin's end of file
	}, nil
}
