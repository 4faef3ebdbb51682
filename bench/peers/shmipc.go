package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	shmipc "github.com/cloudwego/shmipc-go"
)

// shmipcPeer is CloudWeGo's shmipc-go between two processes, used as its
// best-practice example does: the server accepts a Unix socket, makes a
// session with shmipc.Server and serves each stream it accepts; the client
// gets a stream from a SessionManager with MemMapTypeMemFd, so the
// client's memfd-backed buffers and queues are passed to the server over
// that socket and the data goes through their shared memory. Messages are
// the frames of frame.go, written with BufferWriter, sent with
// Stream.Flush, read with BufferReader.ReadBytes and copied out (as the
// example's ReadFromShm does) before ReleasePreviousRead.
//
// shmipc-go has no flow control: a sender that outruns its receiver runs
// out of shared memory, and shmipc-go then sends over the Unix socket
// instead ("fallback"), for good on that stream. So the stream workload
// keeps at most shmWindowMsgs messages and shmWindowBytes bytes in flight,
// and the server returns credit every shmCreditMsgs messages or
// shmCreditBytes bytes. After a measurement the client checks its
// session's metrics: any write or read that fell back to the socket fails
// the measurement.
type shmipcPeer struct{}

const (
	shmWindowMsgs  = 512
	shmWindowBytes = 4 << 20
	shmCreditMsgs  = shmWindowMsgs / 4
	shmCreditBytes = shmWindowBytes / 4
)

func (shmipcPeer) Transport() string { return "shmipc-go" }

func (shmipcPeer) Note(suite string) string {
	if suite == SuiteStream {
		return fmt.Sprintf("memfd; Flush per message; credit window %d msgs/%d MiB", shmWindowMsgs, shmWindowBytes>>20)
	}
	return "memfd"
}

// shmipcLogLevel is shmipc-go's error level. Its default, warning, logs
// every session's teardown; the fallbacks it would warn about are caught by
// Verify instead. SHMIPC_LOG_LEVEL still overrides it.
const shmipcLogLevel = 4

func init() {
	if os.Getenv("SHMIPC_LOG_LEVEL") == "" {
		shmipc.SetLogLevel(shmipcLogLevel)
	}
}

func shmipcConfig(log io.Writer) *shmipc.Config {
	conf := shmipc.DefaultConfig()
	conf.LogOutput = log // its default is stdout
	return conf
}

// quietLog passes a session's log to stderr, except its teardown: the
// error every session logs when its peer goes ("exitErr"), and anything
// once the client is closing the session on purpose.
type quietLog struct{ closing atomic.Bool }

func (l *quietLog) Write(p []byte) (int, error) {
	if l.closing.Load() || bytes.Contains(p, []byte("exitErr:")) {
		return len(p), nil
	}
	return os.Stderr.Write(p)
}

// shmipcEnded reports whether err is how a shmipc stream or session
// ordinarily ends.
func shmipcEnded(err error) bool {
	return errors.Is(err, shmipc.ErrEndOfStream) || errors.Is(err, shmipc.ErrStreamClosed) ||
		errors.Is(err, shmipc.ErrSessionShutdown) || !serverError(err)
}

func serveShmipc(addr string, _ int) (string, func() error, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return "", nil, err
	}
	return addr, func() error {
		return acceptLoop(l, func(c net.Conn) error {
			sess, err := shmipc.Server(c, shmipcConfig(new(quietLog)))
			if err != nil {
				return err
			}
			defer sess.Close()
			for {
				st, err := sess.AcceptStream()
				if err != nil {
					if sess.IsClosed() {
						return nil
					}
					return err
				}
				// Like the example, the handler leaves the stream to
				// the session. The process exits with its sessions
				// open: shmipc-go's teardown is not safe against a
				// goroutine still using a stream (see quiesce).
				go func() {
					if err := serveShmipcStream(st); !shmipcEnded(err) && !sess.IsClosed() {
						fmt.Fprintln(os.Stderr, "chanos-peers server: shmipc-go:", err)
					}
				}()
			}
		})
	}, nil
}

// serveShmipcStream is serveFrames for a shmipc stream.
func serveShmipcStream(st *shmipc.Stream) error {
	r := st.BufferReader()
	var buf []byte
	var ack, credit Ack
	for {
		op, p, err := readShmFrame(r, &buf)
		if err != nil {
			return err
		}
		switch op {
		case opEcho, opCall:
			// The reply is the request frame, written back from the
			// buffer it was copied into.
			if err := writeShmFrame(st, buf); err != nil {
				return err
			}
		case opSink:
			ack.Msgs++
			ack.Bytes += uint64(len(p))
			credit.Msgs++
			credit.Bytes += uint64(len(p))
			if credit.Msgs >= shmCreditMsgs || credit.Bytes >= shmCreditBytes {
				if err := writeShmCounts(st, opCredit, credit); err != nil {
					return err
				}
				credit = Ack{}
			}
		case opAck:
			if err := writeShmCounts(st, opAck, ack); err != nil {
				return err
			}
			ack, credit = Ack{}, Ack{}
		default:
			return fmt.Errorf("unexpected op %d", op)
		}
	}
}

// readShmFrame reads a frame from r, copies it (header and payload) out of
// shared memory into *buf, as the example's ReadFromShm does, and releases
// the shared memory. It returns the op and the payload, which stays valid
// until the next read into *buf.
func readShmFrame(r shmipc.BufferReader, buf *[]byte) (byte, []byte, error) {
	h, err := r.ReadBytes(hdrLen)
	if err != nil {
		return 0, nil, err
	}
	*buf = append((*buf)[:0], h...)
	op, n, err := parseHdr(*buf)
	if err != nil {
		r.ReleasePreviousRead()
		return 0, nil, err
	}
	if n > 0 {
		p, err := r.ReadBytes(n)
		if err != nil {
			return 0, nil, err
		}
		*buf = append(*buf, p...)
	}
	r.ReleasePreviousRead()
	return op, (*buf)[hdrLen:], nil
}

// writeShmFrame writes a whole frame (header included) into the stream's
// shared-memory buffer with one WriteBytes, so that shmipc-go allocates
// one buffer slice for it when one is large enough, and flushes it to the
// peer.
func writeShmFrame(st *shmipc.Stream, frame []byte) error {
	if _, err := st.BufferWriter().WriteBytes(frame); err != nil {
		return err
	}
	return st.Flush(false)
}

// writeShmCounts writes an opAck or opCredit frame.
func writeShmCounts(st *shmipc.Stream, op byte, a Ack) error {
	var b [hdrLen + ackLen]byte
	putHdr(b[:], op, ackLen)
	putAck(b[hdrLen:], a.Msgs, a.Bytes)
	return writeShmFrame(st, b[:])
}

func (shmipcPeer) Start(ctx context.Context, env Env, n int) (Server, error) {
	dir, err := os.MkdirTemp("", "chanos-peers-")
	if err != nil {
		return nil, err
	}
	ps, err := startProc(ctx, env, "shmipc-go", filepath.Join(dir, "shmipc.sock"), n, nil, dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &shmipcServer{ps}, nil
}

type shmipcServer struct{ *procServer }

// Dial makes a SessionManager, with one session, per client: each client
// has its own connection and shared memory, as separate client programs
// would.
func (s *shmipcServer) Dial(context.Context, int) (Client, error) {
	conf := shmipc.DefaultSessionManagerConfig()
	log := new(quietLog)
	conf.Config = shmipcConfig(log)
	conf.Network = "unix"
	conf.Address = s.addr
	conf.MemMapType = shmipc.MemMapTypeMemFd
	conf.SessionNum = 1
	conf.InitializeTimeout = 10 * time.Second
	sm, err := shmipc.NewSessionManager(conf)
	if err != nil {
		return nil, err
	}
	st, err := sm.GetStream()
	if err != nil {
		sm.Close()
		return nil, err
	}
	return &shmipcClient{sm: sm, st: st, log: log}, nil
}

type shmipcClient struct {
	sm  *shmipc.SessionManager
	st  *shmipc.Stream
	log *quietLog

	out  []byte // header and payload
	call []byte // header, call id and payload
	in   []byte
	id   uint64

	inFlight Ack // sent and not yet credited
}

func (c *shmipcClient) SetPayload(p []byte) error {
	if len(p) > maxPayload-callIDLen {
		return fmt.Errorf("payload of %d bytes is too large", len(p))
	}
	c.out = make([]byte, hdrLen+len(p))
	copy(c.out[hdrLen:], p)
	c.call = make([]byte, hdrLen+callIDLen+len(p))
	copy(c.call[hdrLen+callIDLen:], p)
	putHdr(c.call, opCall, callIDLen+len(p))
	return nil
}

func (c *shmipcClient) exchange(frame []byte) (byte, []byte, error) {
	if err := writeShmFrame(c.st, frame); err != nil {
		return 0, nil, err
	}
	return readShmFrame(c.st.BufferReader(), &c.in)
}

func (c *shmipcClient) RoundTrip() error {
	putHdr(c.out, opEcho, len(c.out)-hdrLen)
	op, p, err := c.exchange(c.out)
	if err != nil {
		return err
	}
	return checkEcho(op, opEcho, p, c.out[hdrLen:])
}

func (c *shmipcClient) Call() error {
	c.id++
	putCallID(c.call[hdrLen:], c.id)
	op, p, err := c.exchange(c.call)
	if err != nil {
		return err
	}
	return checkCall(op, p, c.id, c.call[hdrLen+callIDLen:])
}

func (c *shmipcClient) Send() error {
	n := uint64(len(c.out) - hdrLen)
	for c.inFlight.Msgs > 0 && (c.inFlight.Msgs >= shmWindowMsgs || c.inFlight.Bytes+n > shmWindowBytes) {
		if err := c.credit(); err != nil {
			return err
		}
	}
	putHdr(c.out, opSink, int(n))
	if err := writeShmFrame(c.st, c.out); err != nil {
		return err
	}
	c.inFlight.Msgs++
	c.inFlight.Bytes += n
	return nil
}

// credit waits for a credit frame and takes it off what is in flight.
func (c *shmipcClient) credit() error {
	op, p, err := readShmFrame(c.st.BufferReader(), &c.in)
	if err != nil {
		return err
	}
	if op != opCredit {
		return fmt.Errorf("frame op %d while waiting for credit", op)
	}
	a, err := parseAck(p)
	if err != nil {
		return err
	}
	if a.Msgs > c.inFlight.Msgs || a.Bytes > c.inFlight.Bytes {
		return fmt.Errorf("credit for more than was sent")
	}
	c.inFlight.Msgs -= a.Msgs
	c.inFlight.Bytes -= a.Bytes
	return nil
}

func (c *shmipcClient) Ack() (Ack, error) {
	var req [hdrLen]byte
	putHdr(req[:], opAck, 0)
	if err := writeShmFrame(c.st, req[:]); err != nil {
		return Ack{}, err
	}
	for {
		op, p, err := readShmFrame(c.st.BufferReader(), &c.in)
		if err != nil {
			return Ack{}, err
		}
		switch op {
		case opCredit: // credit sent before the ack; the ack settles all
		case opAck:
			c.inFlight = Ack{}
			return parseAck(p)
		default:
			return Ack{}, fmt.Errorf("reply op %d to an ack", op)
		}
	}
}

// Verify fails if any message of this client's session, in either
// direction, went over the Unix socket instead of shared memory.
func (c *shmipcClient) Verify() error {
	_, stab, shm := c.st.Session().GetMetrics()
	if stab.FallbackWriteCount != 0 || stab.FallbackReadCount != 0 {
		return fmt.Errorf("shmipc-go fell back to the Unix socket (%d writes, %d reads): not a shared-memory measurement",
			stab.FallbackWriteCount, stab.FallbackReadCount)
	}
	if shm.CapacityOfShareMemoryInBytes == 0 {
		return fmt.Errorf("shmipc-go session has no shared memory")
	}
	return nil
}

// quiesce makes everything this goroutine did to the session happen
// before the session's teardown, which shmipc-go runs on its own
// goroutine when the server goes and which touches the stream's buffers
// without a lock: the teardown takes the session's stream lock, and so
// does GetActiveStreamCount. The driver quiesces its clients, then ends
// the server process, then closes the clients.
func (c *shmipcClient) quiesce() { c.st.Session().GetActiveStreamCount() }

// Close closes the session manager, whose session closes the stream. It
// does not close the stream itself: by now the server has gone, and
// shmipc-go may be tearing the session down on its own goroutine, which
// Stream.Close would race with.
func (c *shmipcClient) Close() error {
	c.log.closing.Store(true)
	return c.sm.Close()
}
