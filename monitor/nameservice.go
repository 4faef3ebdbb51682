package monitor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interconnect/ump"
	"github.com/chanos/chanos/interfaces/nameservice"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// The nameservice's error codes: the errval out argument of set, get,
// wait_for and remove, and the code of the error replies of get_count and
// list (docs/nameservice.md). 0 is success.
const (
	NSOK          wire.Errval = 0 // success
	NSExists      wire.Errval = 1 // set: the name is taken
	NSNotFound    wire.Errval = 2 // get, remove: no such name
	NSInvalidName wire.Errval = 3 // the name breaks the naming rules
	NSNotOwner    wire.Errval = 4 // remove: another domain holds the name
	NSTimeout     wire.Errval = 5 // wait_for: the call's deadline passed first
	NSLimit       wire.Errval = 6 // too many calls in progress on the connection
	NSInvalidRef  wire.Errval = 7 // set: the null iref
	NSUnavailable wire.Errval = 8 // the store failed or is shutting down
)

// NSError returns the error an errval of the nameservice stands for: nil
// for NSOK, otherwise an error matching the corresponding error of package
// names (names.ErrExists, names.ErrNotFound, ...) where there is one.
func NSError(code wire.Errval) error {
	switch code {
	case NSOK:
		return nil
	case NSExists:
		return names.ErrExists
	case NSNotFound:
		return names.ErrNotFound
	case NSInvalidName:
		return names.ErrInvalidName
	case NSNotOwner:
		return names.ErrNotOwner
	case NSTimeout:
		return fmt.Errorf("nameservice: %w", context.DeadlineExceeded)
	case NSLimit:
		return errors.New("nameservice: too many calls in progress")
	case NSInvalidRef:
		return errors.New("nameservice: null iref")
	case NSUnavailable:
		return names.ErrClosed
	}
	return fmt.Errorf("nameservice: unknown error code %d", uint64(code))
}

// nsCode maps an error of a names.Store to its errval.
func nsCode(err error) wire.Errval {
	switch {
	case err == nil:
		return NSOK
	case errors.Is(err, names.ErrExists):
		return NSExists
	case errors.Is(err, names.ErrNotFound):
		return NSNotFound
	case errors.Is(err, names.ErrInvalidName):
		return NSInvalidName
	case errors.Is(err, names.ErrNotOwner):
		return NSNotOwner
	case errors.Is(err, context.DeadlineExceeded):
		return NSTimeout
	}
	return NSUnavailable
}

// Limits of one nameservice connection.
const (
	// nsMaxWaits caps the wait_for calls in progress on a connection; one
	// more is answered with NSLimit.
	nsMaxWaits = 64
	// nsMaxWatches caps the watches of a connection; one more is a
	// protocol violation that ends the connection, as a message has no
	// reply to carry an error.
	nsMaxWatches = 64
	// nsListPage is the most names of a list reply: 255 names of at most
	// 256 bytes and their separators fit its 65536-byte bound.
	nsListPage = nameservice.MaxListNamesLen / (names.MaxNameLen + 1)
)

// nsError is a nameservice failure sent as an error reply, for the rpcs
// without an errval out argument.
type nsError struct {
	code   wire.Errval
	detail string
}

func (e *nsError) Error() string { return e.detail }

// nsConn is one nameservice connection, served by the monitor over the
// creator's side of a ring pair. The serve loop handles frames in order;
// wait_for calls run in goroutines of their own, and each watch has a
// goroutine that forwards its events.
type nsConn struct {
	m      *Monitor
	u      *ump.Conn
	id     uint64 // connection id
	client uint64 // the binding domain, owner of what it sets
	log    *slog.Logger
	srv    *nsServer

	ctx     context.Context
	cancel  context.CancelFunc
	endOnce sync.Once
	reason  error

	mu      sync.Mutex
	pending map[uint32]*pendingCall
	watches int
	wg      sync.WaitGroup // wait_for calls and watches
}

func newNSConn(m *Monitor, u *ump.Conn, id, client uint64, log *slog.Logger) *nsConn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &nsConn{
		m:       m,
		u:       u,
		id:      id,
		client:  client,
		log:     log.With("conn", id, "service", NameserviceName),
		ctx:     ctx,
		cancel:  cancel,
		pending: map[uint32]*pendingCall{},
	}
	c.srv = &nsServer{c: c, store: m.store, owner: names.Owner(client)}
	return c
}

// end ends the connection for reason; the serve loop then cleans up.
func (c *nsConn) end(reason error) {
	c.endOnce.Do(func() {
		c.reason = reason
		c.cancel()
		c.u.Close()
	})
}

// serve runs the connection until it ends.
func (c *nsConn) serve() {
	defer c.m.wg.Done()
	c.end(c.loop())
	c.wg.Wait()
	c.m.mu.Lock()
	delete(c.m.nsConns, c.id)
	delete(c.m.conns, c.id)
	c.m.mu.Unlock()
	switch {
	case errors.Is(c.reason, ump.ErrClosed), errors.Is(c.reason, ump.ErrPeerDied), errors.Is(c.reason, errShutdown), errors.Is(c.reason, errClientLeft):
		c.log.Debug("nameservice connection ended", "reason", c.reason)
	default:
		c.log.Warn("nameservice connection dropped", "err", c.reason)
	}
}

func (c *nsConn) loop() error {
	for {
		frame, err := c.u.Receive(c.ctx)
		if err != nil {
			if c.ctx.Err() != nil && c.reason != nil {
				return c.reason
			}
			return err
		}
		if err := c.handle(frame); err != nil {
			return err
		}
	}
}

// Send implements chanos.Sender for the nameservice's messages (changed).
func (c *nsConn) Send(ctx context.Context, m wire.Message) error {
	var buf wire.Buffer
	if err := m.Encode(&buf); err != nil {
		return err
	}
	return c.u.Send(ctx, buf.B)
}

// handle handles one frame from the client.
func (c *nsConn) handle(frame []byte) error {
	h, err := wire.ParseHeader(frame)
	if err != nil {
		return fmt.Errorf("%w: bad frame: %v", errProtocol, err)
	}
	k, err := h.Kind()
	if err != nil {
		return fmt.Errorf("%w: bad frame: %v", errProtocol, err)
	}
	switch k {
	case wire.KindCancel:
		if _, err := wire.ParseCancel(frame); err != nil {
			return fmt.Errorf("%w: bad cancel: %v", errProtocol, err)
		}
		c.mu.Lock()
		if p := c.pending[h.CallID]; p != nil {
			p.cancelled = true
			p.cancel()
		}
		c.mu.Unlock()
		return nil
	case wire.KindCall, wire.KindMessage:
	default:
		return protocolErr("a client of the nameservice sends calls, cancels and watch messages, not a %s", k)
	}
	// Descriptors do not travel on a ring: ncaps must be 0.
	msg, err := nameservice.Decode(frame, nil)
	if err != nil {
		return fmt.Errorf("%w: %v", errProtocol, err)
	}
	if k == wire.KindMessage {
		_, err := nameservice.Dispatch(c.ctx, c.srv, c, msg)
		return err
	}
	if _, ok := msg.(*nameservice.WaitForCall); ok {
		return c.startWait(h, msg)
	}
	ctx, cancel := callContext(c.ctx, h)
	defer cancel()
	r, err := nameservice.Dispatch(ctx, c.srv, c, msg)
	return c.reply(h, r, err)
}

// callContext returns the context of a call: ending with parent and at
// the call's deadline, if it has one.
func callContext(parent context.Context, h wire.Header) (context.Context, context.CancelFunc) {
	if d, ok := wire.Timeout(h.TimeoutUS); ok {
		return context.WithTimeout(parent, d)
	}
	return context.WithCancel(parent)
}

// startWait runs a wait_for call in a goroutine of its own.
func (c *nsConn) startWait(h wire.Header, msg nameservice.Msg) error {
	c.mu.Lock()
	if _, dup := c.pending[h.CallID]; dup {
		c.mu.Unlock()
		return protocolErr("call id %d reused while its wait_for is in progress", h.CallID)
	}
	if len(c.pending) >= nsMaxWaits {
		c.mu.Unlock()
		return c.reply(h, &nameservice.WaitForReply{Err: NSLimit}, nil)
	}
	ctx, cancel := callContext(c.ctx, h)
	p := &pendingCall{cancel: cancel}
	c.pending[h.CallID] = p
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		defer cancel()
		r, err := nameservice.Dispatch(ctx, c.srv, c, msg)
		c.mu.Lock()
		delete(c.pending, h.CallID)
		cancelled := p.cancelled
		c.mu.Unlock()
		if cancelled || errors.Is(err, errCancelled) {
			return
		}
		if err := c.reply(h, r, err); err != nil {
			c.end(err)
		}
	}()
	return nil
}

// reply sends the reply to call h: r, or an error reply for err. An error
// it returns ends the connection.
func (c *nsConn) reply(h wire.Header, r wire.Message, err error) error {
	var ne *nsError
	if err != nil && !errors.As(err, &ne) {
		if errors.Is(err, errProtocol) || errors.Is(err, chanos.ErrProtocol) {
			return err
		}
		ne = &nsError{code: NSUnavailable, detail: err.Error()}
	}
	var buf wire.Buffer
	if ne == nil {
		if eerr := r.Encode(&buf); eerr != nil {
			buf = wire.Buffer{}
			ne = &nsError{code: NSUnavailable, detail: "encode the reply: " + eerr.Error()}
		}
	}
	if ne != nil {
		if eerr := wire.AppendErrorReply(&buf, h.Msg, wire.Status{Code: ne.code, Detail: cleanDetail(ne.detail)}); eerr != nil {
			return fmt.Errorf("encode an error reply: %w", eerr)
		}
	}
	wire.SetCallID(buf.B, h.CallID)
	if err := c.u.Send(c.ctx, buf.B); err != nil {
		return fmt.Errorf("send a reply: %w", err)
	}
	return nil
}

// startWatch registers a watch of prefix and forwards its events as
// changed messages until the connection ends.
func (c *nsConn) startWatch(prefix string) error {
	c.mu.Lock()
	if c.watches >= nsMaxWatches {
		c.mu.Unlock()
		return protocolErr("more than %d watches on one nameservice connection", nsMaxWatches)
	}
	c.watches++
	c.mu.Unlock()
	w, err := c.srv.store.Watch(c.ctx, prefix)
	if err != nil {
		return fmt.Errorf("watch %q: %w", prefix, err)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for ev := range w.C {
			m := &nameservice.Changed{Name: ev.Name, Ref: ev.Ref, Removed: ev.Removed}
			if err := c.Send(c.ctx, m); err != nil {
				w.Stop()
				c.end(fmt.Errorf("watch %q: send changed: %w", prefix, err))
				return
			}
		}
		// A watch ends with the connection (the store stops it when c.ctx
		// ends), or when the client falls behind: then the client has
		// missed changes, and ending the connection is how it learns.
		if err := w.Err(); err != nil {
			c.end(fmt.Errorf("watch %q: %w", prefix, err))
		}
	}()
	return nil
}

// nsServer implements the nameservice over a names.Store for one
// connection: what it sets and removes, it does as the binding domain.
type nsServer struct {
	c     *nsConn
	store names.Store
	owner names.Owner
}

var _ nameservice.Server = (*nsServer)(nil)

// Set implements nameservice.Server.
func (s *nsServer) Set(ctx context.Context, name string, ref wire.Iref) (wire.Errval, error) {
	if names.ValidName(name) != nil {
		return NSInvalidName, nil
	}
	if ref.IsZero() {
		return NSInvalidRef, nil
	}
	return nsCode(s.store.Set(ctx, name, ref, s.owner)), nil
}

// Get implements nameservice.Server.
func (s *nsServer) Get(ctx context.Context, name string) (wire.Iref, wire.Errval, error) {
	if names.ValidName(name) != nil {
		return wire.Iref{}, NSInvalidName, nil
	}
	ref, err := s.store.Get(ctx, name)
	return ref, nsCode(err), nil
}

// WaitFor implements nameservice.Server. A call cancelled by its caller,
// or by the end of the connection, gets no reply.
func (s *nsServer) WaitFor(ctx context.Context, name string) (wire.Iref, wire.Errval, error) {
	if names.ValidName(name) != nil {
		return wire.Iref{}, NSInvalidName, nil
	}
	ref, err := s.store.WaitFor(ctx, name)
	if errors.Is(err, context.Canceled) {
		return wire.Iref{}, 0, errCancelled
	}
	return ref, nsCode(err), nil
}

// GetCount implements nameservice.Server.
func (s *nsServer) GetCount(ctx context.Context, class string) (uint64, error) {
	n, err := s.store.Count(ctx, class)
	if err != nil {
		return 0, &nsError{code: nsCode(err), detail: fmt.Sprintf("get_count %q: %v", class, err)}
	}
	return n, nil
}

// Remove implements nameservice.Server.
func (s *nsServer) Remove(ctx context.Context, name string) (wire.Errval, error) {
	if names.ValidName(name) != nil {
		return NSInvalidName, nil
	}
	return nsCode(s.store.Remove(ctx, name, s.owner)), nil
}

// List implements nameservice.Server.
func (s *nsServer) List(ctx context.Context, prefix, after string) ([]byte, bool, error) {
	list, more, err := s.store.List(ctx, prefix, after, nsListPage)
	if err != nil {
		return nil, false, &nsError{code: nsCode(err), detail: fmt.Sprintf("list %q: %v", prefix, err)}
	}
	out := []byte(strings.Join(list, "\n"))
	if len(out) > nameservice.MaxListNamesLen {
		// Only a store with names longer than names.MaxNameLen gets here.
		i := bytes.LastIndexByte(out[:nameservice.MaxListNamesLen+1], '\n')
		if i <= 0 {
			return nil, false, &nsError{code: NSUnavailable, detail: "list: a name longer than a page"}
		}
		out, more = out[:i], true
	}
	return out, more, nil
}

// Watch implements nameservice.Server.
func (s *nsServer) Watch(ctx context.Context, from chanos.Sender, m *nameservice.Watch) error {
	return s.c.startWatch(m.Prefix)
}

// Changed implements nameservice.Server: the nameservice sends changed,
// it does not receive it.
func (s *nsServer) Changed(ctx context.Context, from chanos.Sender, m *nameservice.Changed) error {
	return protocolErr("changed is sent by the nameservice, not to it")
}
