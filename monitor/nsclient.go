package monitor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/wire"
)

// NSClient is a client of the nameservice over a ump connection: the
// generated rpc stubs, the changed messages of its watches on a channel,
// and the paging of list done for it (Names). It stands in for the
// chanos package's connection until that exists.
type NSClient struct {
	*nameservice.Client
	t *umpTransport
}

// NewNSClient returns a nameservice client over u, which it takes over.
func NewNSClient(u *ump.Conn) *NSClient {
	t := newUMPTransport(u)
	return &NSClient{Client: nameservice.NewClient(t), t: t}
}

// Watch asks for a changed message for every later set or remove of a
// name starting with prefix; they arrive on Changed. Once Watch returns,
// the changes after the nameservice reads the watch are reported; to be
// sure a watch is in place, make any rpc after it.
func (c *NSClient) Watch(ctx context.Context, prefix string) error {
	return c.Send(ctx, &nameservice.Watch{Prefix: prefix})
}

// Changed returns the channel of the changed messages of the client's
// watches. It is closed when the connection ends. A client that watches
// must read it: the nameservice ends the connection of a watcher that
// falls too far behind.
func (c *NSClient) Changed() <-chan *nameservice.Changed { return c.t.changed }

// Names lists every name starting with prefix, sorted, page by page.
func (c *NSClient) Names(ctx context.Context, prefix string) ([]string, error) {
	var all []string
	after := ""
	for {
		page, more, err := c.List(ctx, prefix, after)
		if err != nil {
			return all, err
		}
		if len(page) > 0 {
			names := strings.Split(string(page), "\n")
			all = append(all, names...)
			after = names[len(names)-1]
		}
		if !more {
			return all, nil
		}
		if len(page) == 0 {
			return all, errors.New("nameservice: list: an empty page with more to come")
		}
	}
}

// Err returns why the connection ended, or nil while it is open.
func (c *NSClient) Err() error { return c.t.u.Err() }

// Close closes the connection.
func (c *NSClient) Close() error { return c.t.close() }

// umpTransport is a minimal chanos.Transport over a ump connection: calls
// matched to replies by call id, and the peer's messages (here, the
// nameservice's changed) on a channel.
type umpTransport struct {
	u *ump.Conn

	mu      sync.Mutex
	nextID  uint32
	pending map[uint32]chan []byte
	err     error

	changed  chan *nameservice.Changed
	done     chan struct{}
	readDone chan struct{}
}

var _ chanos.Transport = (*umpTransport)(nil)

func newUMPTransport(u *ump.Conn) *umpTransport {
	t := &umpTransport{
		u:        u,
		pending:  map[uint32]chan []byte{},
		changed:  make(chan *nameservice.Changed, 256),
		done:     make(chan struct{}),
		readDone: make(chan struct{}),
	}
	go t.readLoop()
	return t
}

func (t *umpTransport) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.done:
		return
	default:
	}
	t.err = err
	close(t.done)
}

func (t *umpTransport) close() error {
	t.fail(errors.New("nameservice: connection closed"))
	err := t.u.Close()
	<-t.readDone
	return err
}

func (t *umpTransport) readLoop() {
	defer close(t.readDone)
	defer close(t.changed)
	for {
		frame, err := t.u.Receive(context.Background())
		if err != nil {
			t.fail(fmt.Errorf("nameservice: connection ended: %w", err))
			return
		}
		if err := t.deliver(frame); err != nil {
			t.fail(fmt.Errorf("nameservice: %w", err))
			t.u.Close()
			return
		}
	}
}

func (t *umpTransport) deliver(frame []byte) error {
	h, k, err := wire.ParseFrame(frame)
	if err != nil {
		return err
	}
	switch k {
	case wire.KindReply, wire.KindErrorReply:
		t.mu.Lock()
		ch := t.pending[h.CallID]
		delete(t.pending, h.CallID)
		t.mu.Unlock()
		if ch != nil {
			ch <- append([]byte(nil), frame...)
		}
		return nil
	case wire.KindMessage:
		m, err := nameservice.Decode(frame, nil)
		if err != nil {
			return err
		}
		ch, ok := m.(*nameservice.Changed)
		if !ok {
			return fmt.Errorf("unexpected %s from the nameservice: %w", m.MsgName(), chanos.ErrProtocol)
		}
		select {
		case t.changed <- ch:
		case <-t.done:
		}
		return nil
	}
	return fmt.Errorf("unexpected %s from the nameservice: %w", k, chanos.ErrProtocol)
}

// Send implements chanos.Sender.
func (t *umpTransport) Send(ctx context.Context, m wire.Message) error {
	var buf wire.Buffer
	if err := m.Encode(&buf); err != nil {
		return err
	}
	if len(buf.Caps) > 0 {
		closeCaps(buf.Caps)
		return fmt.Errorf("%s: descriptors cannot travel on this connection", m.MsgName())
	}
	return t.u.Send(ctx, buf.B)
}

// Call implements chanos.Transport.
func (t *umpTransport) Call(ctx context.Context, call, reply wire.Message) error {
	var buf wire.Buffer
	if err := call.Encode(&buf); err != nil {
		return err
	}
	ch := make(chan []byte, 1)
	t.mu.Lock()
	select {
	case <-t.done:
		t.mu.Unlock()
		return t.err
	default:
	}
	id := t.nextID
	for t.pending[id] != nil {
		id++
	}
	t.nextID = id + 1
	t.pending[id] = ch
	t.mu.Unlock()
	wire.SetCallID(buf.B, id)
	if dl, ok := ctx.Deadline(); ok {
		wire.SetTimeout(buf.B, wire.TimeoutUS(time.Until(dl)))
	}
	forget := func() bool {
		t.mu.Lock()
		defer t.mu.Unlock()
		_, waiting := t.pending[id]
		delete(t.pending, id)
		return waiting
	}
	if err := t.u.Send(ctx, buf.B); err != nil {
		forget()
		return fmt.Errorf("%s: %w", call.MsgName(), err)
	}
	var frame []byte
	select {
	case frame = <-ch:
	case <-ctx.Done():
		if forget() {
			var cb wire.Buffer
			wire.AppendCancel(&cb, call.MsgNumber(), id)
			// Best effort: a peer too slow to take it within a second
			// will still send a reply, which is dropped.
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			t.u.Send(cctx, cb.B)
			cancel()
			return ctx.Err()
		}
		frame = <-ch
	case <-t.done:
		select {
		case frame = <-ch:
		default:
			return t.err
		}
	}
	h, _ := wire.ParseHeader(frame)
	if h.Flags&wire.FlagError != 0 {
		_, st, err := wire.ParseErrorReply(frame)
		if err != nil {
			return fmt.Errorf("%s: bad error reply: %w", call.MsgName(), err)
		}
		return &chanos.RemoteError{Msg: call.MsgName(), Code: st.Code, Detail: st.Detail}
	}
	if err := reply.Decode(frame, nil); err != nil {
		return fmt.Errorf("%s: bad reply: %w", call.MsgName(), err)
	}
	return nil
}
