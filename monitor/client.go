package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/ump"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/interconnect/seqpacket"
	"github.com/chanos/chanos/wire"
)

// ErrNoMonitor is matched by Dial's error when no monitor listens on the
// directory's socket: chanos.ErrNoMonitor, which Join returns too.
var ErrNoMonitor = chanos.ErrNoMonitor

// Client is a minimal client of the monitor protocol: a session with the
// monitor, rpcs one Go call each (several may be in progress at once),
// and the incoming messages of its exports on a channel. The chanos
// command line and the tests use it; domains use package chanos, which
// speaks the same protocol.
type Client struct {
	pc    *seqpacket.Conn
	hello proto.HelloReply

	mu      sync.Mutex
	nextID  uint32
	pending map[uint32]chan response
	err     error // why the session ended; set before done is closed

	incoming chan *proto.Incoming
	done     chan struct{}
	readDone chan struct{}
}

type response struct {
	frame []byte
	caps  []wire.Cap
}

// Dial opens a session with the monitor whose directory is dir (see Dir),
// introducing itself as program. It checks the directory as CheckDir
// does, so as not to talk to a socket someone else put there.
func Dial(ctx context.Context, dir, program string) (*Client, error) {
	if err := CheckDir(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("monitor: %w (%s does not exist; start one with 'chanos monitor')", ErrNoMonitor, dir)
		}
		return nil, fmt.Errorf("monitor: %w", err)
	}
	path := SocketPath(dir)
	pc, err := seqpacket.Dial(ctx, path, proto.MaxFrameSize)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("monitor: %w on %s (start one with 'chanos monitor'): %v", ErrNoMonitor, path, err)
		}
		return nil, fmt.Errorf("monitor: dial %s: %w", path, err)
	}
	c := NewClient(pc)
	call := proto.HelloCall{Version: proto.ProtocolVersion, Program: program}
	if err := c.call(ctx, &call, &c.hello); err != nil {
		c.Close()
		return nil, fmt.Errorf("monitor: hello: %w", err)
	}
	return c, nil
}

// NewClient runs the client side of a session over pc, an open
// connection to a monitor, without saying hello: tests use it to speak
// the protocol step by step. Dial is the usual way in.
func NewClient(pc *seqpacket.Conn) *Client {
	c := &Client{
		pc:       pc,
		pending:  map[uint32]chan response{},
		incoming: make(chan *proto.Incoming, 16),
		done:     make(chan struct{}),
		readDone: make(chan struct{}),
	}
	go c.readLoop()
	return c
}

// DomainID returns the domain id the monitor gave the session at hello.
func (c *Client) DomainID() uint64 { return c.hello.DomainID }

// MachineID returns the monitor's machine id, as told at hello.
func (c *Client) MachineID() uint64 { return c.hello.MachineID }

// Incoming returns the channel of incoming messages: connections bound to
// this session's exports. Its descriptors are the receiver's (see
// OpenUMP). The channel is closed when the session ends. A session that
// exports must read it: while it is full, replies wait too.
func (c *Client) Incoming() <-chan *proto.Incoming { return c.incoming }

// Done is closed when the session has ended; Err then says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the session ended, or nil while it is open.
func (c *Client) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close ends the session. The monitor then withdraws its exports and
// releases its names.
func (c *Client) Close() error {
	c.fail(errors.New("monitor: session closed"))
	<-c.readDone
	return nil
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		return
	default:
	}
	c.err = err
	close(c.done)
	c.pc.Close()
}

func (c *Client) readLoop() {
	defer close(c.readDone)
	defer close(c.incoming)
	defer func() {
		// Descriptors of replies nobody will collect.
		c.mu.Lock()
		for id, ch := range c.pending {
			select {
			case r := <-ch:
				closeCaps(r.caps)
			default:
			}
			delete(c.pending, id)
		}
		c.mu.Unlock()
	}()
	for {
		frame, caps, err := c.pc.Receive()
		if err != nil {
			c.fail(fmt.Errorf("monitor: session ended: %w", err))
			return
		}
		if err := c.deliver(frame, caps); err != nil {
			closeCaps(caps)
			c.fail(fmt.Errorf("monitor: %w", err))
			return
		}
	}
}

func (c *Client) deliver(frame []byte, caps []wire.Cap) error {
	h, k, err := wire.ParseFrame(frame)
	if err != nil {
		return fmt.Errorf("bad frame from the monitor: %w", err)
	}
	switch k {
	case wire.KindReply, wire.KindErrorReply:
		c.mu.Lock()
		ch := c.pending[h.CallID]
		delete(c.pending, h.CallID)
		c.mu.Unlock()
		if ch == nil {
			closeCaps(caps) // a reply to a cancelled call
			return nil
		}
		ch <- response{frame: append([]byte(nil), frame...), caps: caps}
		return nil
	case wire.KindMessage:
		var in proto.Incoming
		if err := in.Decode(frame, caps); err != nil {
			return fmt.Errorf("bad message from the monitor: %w", err)
		}
		select {
		case c.incoming <- &in:
		case <-c.done:
			closeCaps(in.Fds)
		}
		return nil
	}
	return fmt.Errorf("unexpected %s from the monitor", k)
}

// call makes an rpc: it sends call with a fresh call id and ctx's
// deadline, and decodes the reply into reply. An error reply comes back
// as a *chanos.RemoteError (see StatusOf). If ctx ends first, the call is
// cancelled.
func (c *Client) call(ctx context.Context, call, reply wire.Message) error {
	var buf wire.Buffer
	if err := call.Encode(&buf); err != nil {
		return err
	}
	ch := make(chan response, 1)
	c.mu.Lock()
	select {
	case <-c.done:
		c.mu.Unlock()
		return c.err
	default:
	}
	id := c.nextID
	for c.pending[id] != nil {
		id++
	}
	c.nextID = id + 1
	c.pending[id] = ch
	c.mu.Unlock()
	wire.SetCallID(buf.B, id)
	if dl, ok := ctx.Deadline(); ok {
		wire.SetTimeout(buf.B, wire.TimeoutUS(time.Until(dl)))
	}
	if err := c.pc.Send(buf.B, nil); err != nil {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
		return fmt.Errorf("%s: send: %w", call.MsgName(), err)
	}
	var r response
	select {
	case r = <-ch:
	case <-ctx.Done():
		c.mu.Lock()
		_, waiting := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if waiting {
			var cb wire.Buffer
			wire.AppendCancel(&cb, call.MsgNumber(), id)
			c.pc.Send(cb.B, nil)
			return ctx.Err()
		}
		r = <-ch // the reply beat the cancel
	case <-c.done:
		select {
		case r = <-ch:
		default:
			return c.err
		}
	}
	h, _ := wire.ParseHeader(r.frame)
	if h.Flags&wire.FlagError != 0 {
		closeCaps(r.caps)
		_, st, err := wire.ParseErrorReply(r.frame)
		if err != nil {
			return fmt.Errorf("%s: bad error reply: %w", call.MsgName(), err)
		}
		return &chanos.RemoteError{Msg: call.MsgName(), Code: st.Code, Detail: st.Detail}
	}
	if err := reply.Decode(r.frame, r.caps); err != nil {
		closeCaps(r.caps)
		return fmt.Errorf("%s: bad reply: %w", call.MsgName(), err)
	}
	return nil
}

// StatusOf returns the monitor status code of an error reply returned by
// a Client method (such as proto.StatusExists), or proto.StatusOk if err
// is not one.
func StatusOf(err error) proto.Status {
	var re *chanos.RemoteError
	if errors.As(err, &re) && strings.HasPrefix(re.Msg, proto.InterfaceName+".") {
		return proto.Status(re.Code)
	}
	return proto.StatusOk
}

// Export exports name, of interface iface with frames of up to maxFrame
// bytes, and returns its iref.
func (c *Client) Export(ctx context.Context, name, iface string, maxFrame uint32) (wire.Iref, error) {
	var r proto.ExportReply
	err := c.call(ctx, &proto.ExportCall{Name: name, Iface: iface, MaxFrame: maxFrame}, &r)
	return r.Ref, err
}

// Withdraw withdraws this session's export name.
func (c *Client) Withdraw(ctx context.Context, name string) error {
	return c.call(ctx, &proto.WithdrawCall{Name: name}, &proto.WithdrawReply{})
}

// Bind binds to the export name of interface iface, waiting for the name
// until ctx's deadline if wait is set. The reply's descriptors are the
// caller's: open them with OpenUMP(ump.Attacher, ...) or close them.
func (c *Client) Bind(ctx context.Context, name, iface string, wait bool) (*proto.BindReply, error) {
	var r proto.BindReply
	if err := c.call(ctx, &proto.BindCall{Name: name, Iface: iface, Wait: wait}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// PsJSON returns the monitor's ps document, as JSON.
func (c *Client) PsJSON(ctx context.Context) ([]byte, error) {
	var r proto.PsReply
	if err := c.call(ctx, &proto.PsCall{}, &r); err != nil {
		return nil, err
	}
	return r.JSON, nil
}

// Ps returns the monitor's ps document.
func (c *Client) Ps(ctx context.Context) (*Snapshot, error) {
	b, err := c.PsJSON(ctx)
	if err != nil {
		return nil, err
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("monitor: ps: %w", err)
	}
	return &s, nil
}

// Nameservice binds to the monitor's nameservice and returns a client of
// it over the ring pair.
func (c *Client) Nameservice(ctx context.Context) (*NSClient, error) {
	r, err := c.Bind(ctx, NameserviceName, nameservice.InterfaceName, false)
	if err != nil {
		return nil, fmt.Errorf("monitor: bind the nameservice: %w", err)
	}
	if r.Via != proto.InterconnectUMP {
		closeCaps(r.Fds)
		return nil, fmt.Errorf("monitor: bind the nameservice: via %s, want ump", r.Via)
	}
	u, err := OpenUMP(ump.Attacher, r.Fds, &ump.Options{MaxMessageSize: nameservice.MaxFrameSize})
	if err != nil {
		return nil, err
	}
	return NewNSClient(u), nil
}
