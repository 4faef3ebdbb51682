package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/seqpacket"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/nameservice"
	proto "github.com/chanos/chanos/internal/protocol/monitor"
	"github.com/chanos/chanos/wire"
)

// Client speaks the monitor protocol step by step, as the tests of the
// server need: raw irefs, bind replies with their descriptors, the
// incoming messages of its exports on a channel. It is the protocol's
// messages over a connection of the engine, as chanos.Domain is; domains
// use chanos.Domain.
type Client struct {
	conn     *chanos.Conn
	hello    proto.HelloReply
	incoming chan *proto.Incoming
	done     chan struct{}
	pings    atomic.Int64 // pings read
}

// Dial opens a session with the monitor in dir, introducing itself as
// program, after checking the directory as CheckDir does.
func Dial(ctx context.Context, dir, program string) (*Client, error) {
	if err := CheckDir(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("monitor: %w (%s does not exist)", chanos.ErrNoMonitor, dir)
		}
		return nil, fmt.Errorf("monitor: %w", err)
	}
	pc, err := seqpacket.Dial(ctx, SocketPath(dir), proto.MaxFrameSize)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("monitor: %w: %v", chanos.ErrNoMonitor, err)
		}
		return nil, err
	}
	c := NewClient(pc)
	if err := c.call(ctx, &proto.HelloCall{Version: proto.ProtocolVersion, Program: program}, &c.hello); err != nil {
		c.Close()
		return nil, fmt.Errorf("monitor: hello: %w", err)
	}
	return c, nil
}

// NewClient runs a session over pc without saying hello.
func NewClient(pc *seqpacket.Conn) *Client {
	c := &Client{
		conn:     chanos.NewConn(seqpacket.NewLink(pc), chanos.Interface{Name: proto.InterfaceName, MaxFrameSize: proto.MaxFrameSize}),
		incoming: make(chan *proto.Incoming, 16),
		done:     make(chan struct{}),
	}
	go func() {
		defer close(c.done)
		defer close(c.incoming)
		c.conn.Serve(context.Background(), func(_ context.Context, in *chanos.Incoming) (wire.Message, error) {
			if in.Kind == wire.KindMessage && in.Header.Msg == proto.MsgPing {
				c.pings.Add(1) // reading it is the answer
				return nil, nil
			}
			m := new(proto.Incoming)
			if err := in.Decode(m); err != nil {
				wire.CloseCaps(in.Caps)
				return nil, c.conn.Violation(err)
			}
			select {
			case c.incoming <- m:
			case <-c.conn.Context().Done():
				wire.CloseCaps(m.Fds)
			}
			return nil, nil
		})
	}()
	return c
}

func (c *Client) call(ctx context.Context, call, reply wire.Message) error {
	return c.conn.Call(ctx, call, reply)
}

// DomainID returns the domain id the monitor gave at hello.
func (c *Client) DomainID() uint64 { return c.hello.DomainID }

// MachineID returns the monitor's machine id, as told at hello.
func (c *Client) MachineID() uint64 { return c.hello.MachineID }

// Incoming returns the connections bound to the session's exports; it is
// closed when the session ends.
func (c *Client) Incoming() <-chan *proto.Incoming { return c.incoming }

// Done is closed when the session has ended.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err returns why the session ended, or nil while it is open.
func (c *Client) Err() error { return c.conn.Err() }

// Close ends the session and waits for its reader.
func (c *Client) Close() error {
	err := c.conn.Close()
	<-c.done
	for in := range c.incoming {
		wire.CloseCaps(in.Fds)
	}
	return err
}

// StatusOf returns the monitor status code of an error reply, or
// proto.StatusOk if err is not one.
func StatusOf(err error) proto.Status {
	var re *chanos.RemoteError
	if errors.As(err, &re) && strings.HasPrefix(re.Msg, proto.InterfaceName+".") {
		return proto.Status(re.Code)
	}
	return proto.StatusOk
}

func (c *Client) Export(ctx context.Context, name, iface string, maxFrame uint32) (wire.Iref, error) {
	var r proto.ExportReply
	err := c.call(ctx, &proto.ExportCall{Name: name, Iface: iface, MaxFrame: maxFrame}, &r)
	return r.Ref, err
}

// ExportCall exports with a call of the caller's making: a policy, say.
func (c *Client) ExportCall(ctx context.Context, call *proto.ExportCall) (wire.Iref, error) {
	var r proto.ExportReply
	err := c.call(ctx, call, &r)
	return r.Ref, err
}

func (c *Client) Withdraw(ctx context.Context, name string) error {
	return c.call(ctx, &proto.WithdrawCall{Name: name}, &proto.WithdrawReply{})
}

// Bind binds to name; the reply's descriptors are the caller's.
func (c *Client) Bind(ctx context.Context, name, iface string, wait bool) (*proto.BindReply, error) {
	var r proto.BindReply
	if err := c.call(ctx, &proto.BindCall{Name: name, Iface: iface, Wait: wait}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// BindRef binds by iref; the reply's descriptors are the caller's.
func (c *Client) BindRef(ctx context.Context, ref wire.Iref, iface string) (*proto.BindReply, error) {
	var r proto.BindReply
	if err := c.call(ctx, &proto.BindCall{Iface: iface, Target: ref}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (c *Client) PsJSON(ctx context.Context) ([]byte, error) {
	var r proto.PsReply
	if err := c.call(ctx, &proto.PsCall{}, &r); err != nil {
		return nil, err
	}
	return r.JSON, nil
}

func (c *Client) Ps(ctx context.Context) (*chanos.Snapshot, error) {
	b, err := c.PsJSON(ctx)
	if err != nil {
		return nil, err
	}
	var s chanos.Snapshot
	return &s, json.Unmarshal(b, &s)
}

// NSClient is the generated nameservice client over a bound ring pair,
// with the changed messages of its watches on a channel.
type NSClient struct {
	*nameservice.Conn
	changed chan *nameservice.Changed
}

// Nameservice binds to the monitor's nameservice.
func (c *Client) Nameservice(ctx context.Context) (*NSClient, error) {
	r, err := c.Bind(ctx, nameservice.ServiceName, nameservice.InterfaceName, false)
	if err != nil {
		return nil, fmt.Errorf("monitor: bind the nameservice: %w", err)
	}
	u, err := OpenUMP(ump.Attacher, r.Fds, &ump.Options{MaxMessageSize: nameservice.MaxFrameSize})
	if err != nil {
		return nil, err
	}
	ns := &NSClient{
		Conn:    nameservice.NewConn(chanos.NewConn(ump.NewLink(u), nameservice.Interface)),
		changed: make(chan *nameservice.Changed, 16),
	}
	go func() {
		defer close(ns.changed)
		for {
			m, err := ns.Receive(context.Background())
			if err != nil {
				return
			}
			if ch, ok := m.(*nameservice.Changed); ok {
				ns.changed <- ch
			}
		}
	}()
	return ns, nil
}

// Watch asks for the changes of names starting with prefix.
func (c *NSClient) Watch(ctx context.Context, prefix string) error {
	return c.Send(ctx, &nameservice.Watch{Prefix: prefix})
}

// Changed returns the changed messages; closed when the connection ends.
func (c *NSClient) Changed() <-chan *nameservice.Changed { return c.changed }
