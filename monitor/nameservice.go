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
	// NSQuota (9, quota.go): set: the domain's or the monitor's quota of
	// names is reached ("resource exhausted").
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
	case NSQuota:
		return ErrNSQuota
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
	// nsMaxCalls caps the wait_for calls running concurrently on a
	// connection (chanos.ConcurrentFor); the other rpcs never block, so
	// they run inline, without a goroutine hop. One slot above nsMaxWaits
	// lets the call that is answered with NSLimit run too.
	nsMaxCalls = nsMaxWaits + 1
	// nsMaxWatches caps the watches of a connection; one more is a
	// protocol violation that ends the connection, as a message has no
	// reply to carry an error.
	nsMaxWatches = 64
	// nsListPage is the most names of a list reply: 255 names of at most
	// 256 bytes and their separators fit its 65536-byte bound.
	nsListPage = nameservice.MaxListNamesLen / (names.MaxNameLen + 1)
)

// nsConn is one nameservice connection, served by the monitor over the
// creator's side of a ring pair with nameservice.Conn.Serve: rpc calls run
// concurrently (chanos.ConcurrentFor: wait_for only), messages in order, and each watch has
// a goroutine that forwards its events. It implements nameservice.Server
// for its client: what it sets and removes, it does as the binding domain.
type nsConn struct {
	m      *Monitor
	conn   *chanos.Conn
	id     uint64   // connection id
	client uint64   // the binding domain, owner of what it sets
	sess   *session // its session, which holds its quotas
	log    *slog.Logger
	store  names.Store

	endOnce sync.Once
	reason  error

	mu      sync.Mutex
	waits   int            // wait_for calls in progress
	watches int            // watches started
	wg      sync.WaitGroup // watches
}

var _ nameservice.Server = (*nsConn)(nil)

func newNSConn(m *Monitor, u *ump.Conn, id uint64, s *session, log *slog.Logger) *nsConn {
	return &nsConn{
		m:      m,
		conn:   chanos.NewConn(ump.NewLink(u), nameservice.Interface),
		id:     id,
		client: s.id,
		sess:   s,
		log:    log.With("conn", id, "service", nameservice.ServiceName),
		store:  m.store,
	}
}

// end ends the connection for reason (the first reason is the one
// logged); the serve goroutine then cleans up.
func (c *nsConn) end(reason error) {
	c.endOnce.Do(func() { c.reason = reason })
	c.conn.Close()
}

// serve runs the connection until it ends.
func (c *nsConn) serve() {
	defer c.m.wg.Done()
	// The connection's context ends with Close and with a protocol
	// violation; the calls in progress and the watches end with it.
	err := nameservice.NewConn(c.conn).Serve(c.conn.Context(), c, chanos.ConcurrentFor(nsMaxCalls, nameservice.MsgWaitFor))
	if cerr := c.conn.Err(); cerr != nil {
		err = cerr // why the connection ended, rather than how Serve saw it
	}
	c.end(err)
	c.wg.Wait()
	c.m.mu.Lock()
	delete(c.m.nsConns, c.id)
	if rec := c.m.conns[c.id]; rec != nil {
		c.m.dropRecordLocked(rec)
	}
	c.sess.nsConns--
	c.m.nsConnCount--
	c.m.mu.Unlock()
	switch {
	case errors.Is(c.reason, chanos.ErrClosed), errors.Is(c.reason, chanos.ErrPeerDied), errors.Is(c.reason, errShutdown), errors.Is(c.reason, errClientLeft):
		c.log.Debug("nameservice connection ended", "reason", c.reason)
	default:
		c.log.Warn("nameservice connection dropped", "err", c.reason)
	}
}

// nsErr is a failure of an rpc without an errval out argument, sent as an
// error reply with a nameservice code.
func nsErr(rpc string, code wire.Errval, format string, args ...any) error {
	return &chanos.RemoteError{Msg: rpc, Code: code, Detail: cleanDetail(fmt.Sprintf(format, args...))}
}

// Set implements nameservice.Server.
func (c *nsConn) Set(ctx context.Context, name string, ref wire.Iref) (wire.Errval, error) {
	if names.ValidName(name) != nil {
		return NSInvalidName, nil
	}
	if ref.IsZero() {
		return NSInvalidRef, nil
	}
	if monitorClass(name) {
		return NSNotOwner, nil // spawnd.N: the monitors' own names
	}
	if err := c.reserveName(); err != nil {
		c.m.rlog.Log(slog.LevelWarn, "refused-nameservice.set", "request refused", "call", "nameservice.set",
			"domain", c.client, "conn", c.id, "reason", err.Error())
		return NSQuota, nil
	}
	err := c.store.Set(ctx, name, ref, names.Owner(c.client))
	if c.settleName(name, err == nil) {
		// The domain's session ended while the name was being set: its
		// lease has gone, and Release may have come first.
		c.store.Remove(context.Background(), name, names.Owner(c.client))
	}
	return nsCode(err), nil
}

// reserveName takes one name of the domain's quota and of the monitor's,
// before a set; settleName keeps it, as the domain's name, or gives it
// back.
func (c *nsConn) reserveName() error {
	m, s := c.m, c.sess
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case len(s.nsNames)+s.nsNamesPending >= m.cfg.MaxNames:
		return fmt.Errorf("resource exhausted: this domain holds %d names set through the nameservice, its quota (--max-names)", m.cfg.MaxNames)
	case m.names >= m.cfg.MaxTotalNames:
		return fmt.Errorf("resource exhausted: the domains hold %d names set through the nameservice, the monitor's quota (--max-total-names)", m.cfg.MaxTotalNames)
	}
	s.nsNamesPending++
	m.names++
	return nil
}

// settleName ends the reservation of a set of name, which succeeded if
// set. It reports true if the set succeeded for a session that has ended,
// whose name the caller must remove.
func (c *nsConn) settleName(name string, set bool) bool {
	m, s := c.m, c.sess
	m.mu.Lock()
	defer m.mu.Unlock()
	s.nsNamesPending--
	if set && m.domains[s.id] == s {
		s.nsNames[name] = struct{}{}
		return false
	}
	m.names--
	return set
}

// forgetName gives back the quota of a name the domain removed.
func (m *Monitor) forgetName(s *session, name string) {
	m.mu.Lock()
	if _, ok := s.nsNames[name]; ok {
		delete(s.nsNames, name)
		m.names--
	}
	m.mu.Unlock()
}

// Reading a name never reveals the token that binds it: get, wait_for
// and changed hand out the iref without its token (machine and export id
// only), so that knowing a name is not holding its export's capability.
// Only the exporter gets the whole iref, from export; it may pass it on
// (docs/security.md).

// Get implements nameservice.Server.
func (c *nsConn) Get(ctx context.Context, name string) (wire.Iref, wire.Errval, error) {
	if names.ValidName(name) != nil {
		return wire.Iref{}, NSInvalidName, nil
	}
	ref, err := c.store.Get(ctx, name)
	return ref.WithoutToken(), nsCode(err), nil
}

// WaitFor implements nameservice.Server. ctx ends at the call's deadline,
// when the caller cancels (then chanos sends no reply) and when the
// connection ends.
func (c *nsConn) WaitFor(ctx context.Context, name string) (wire.Iref, wire.Errval, error) {
	// A wait_for waits as a bind does, and counts with the binds in
	// progress against the monitor's quota.
	if n := c.m.waits.Add(1); int(n) > c.m.cfg.MaxTotalPendingBinds {
		c.m.waits.Add(-1)
		c.m.rlog.Log(slog.LevelWarn, "refused-nameservice.wait_for", "request refused", "call", "nameservice.wait_for",
			"domain", c.client, "conn", c.id, "reason", "resource exhausted: binds and waits in progress (--max-total-pending-binds)")
		return wire.Iref{}, NSLimit, nil
	}
	defer c.m.waits.Add(-1)
	c.mu.Lock()
	if c.waits >= nsMaxWaits {
		c.mu.Unlock()
		return wire.Iref{}, NSLimit, nil
	}
	c.waits++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.waits--
		c.mu.Unlock()
	}()
	if names.ValidName(name) != nil {
		return wire.Iref{}, NSInvalidName, nil
	}
	ref, err := c.store.WaitFor(ctx, name)
	return ref.WithoutToken(), nsCode(err), nil
}

// GetCount implements nameservice.Server.
func (c *nsConn) GetCount(ctx context.Context, class string) (uint64, error) {
	n, err := c.store.Count(ctx, class)
	if err != nil {
		return 0, nsErr("nameservice.get_count", nsCode(err), "get_count %q: %v", class, err)
	}
	return n, nil
}

// Remove implements nameservice.Server.
func (c *nsConn) Remove(ctx context.Context, name string) (wire.Errval, error) {
	if names.ValidName(name) != nil {
		return NSInvalidName, nil
	}
	err := c.store.Remove(ctx, name, names.Owner(c.client))
	if err == nil {
		c.m.forgetName(c.sess, name)
	}
	return nsCode(err), nil
}

// List implements nameservice.Server.
func (c *nsConn) List(ctx context.Context, prefix, after string) ([]byte, bool, error) {
	list, more, err := c.store.List(ctx, prefix, after, nsListPage)
	if err != nil {
		return nil, false, nsErr("nameservice.list", nsCode(err), "list %q: %v", prefix, err)
	}
	out := []byte(strings.Join(list, "\n"))
	if len(out) > nameservice.MaxListNamesLen {
		// Only a store with names longer than names.MaxNameLen gets here.
		i := bytes.LastIndexByte(out[:nameservice.MaxListNamesLen+1], '\n')
		if i <= 0 {
			return nil, false, nsErr("nameservice.list", NSUnavailable, "list: a name longer than a page")
		}
		out, more = out[:i], true
	}
	return out, more, nil
}

// Watch implements nameservice.Server: it registers a watch of m.Prefix
// and forwards its events to from as changed messages until the
// connection ends. Messages are handled in order, before the frames after
// them are read, so the watch is in place for every later call.
func (c *nsConn) Watch(ctx context.Context, from *nameservice.Client, m nameservice.Watch) error {
	c.mu.Lock()
	if c.watches >= nsMaxWatches {
		c.mu.Unlock()
		return c.conn.Violation(fmt.Errorf("more than %d watches on one nameservice connection", nsMaxWatches))
	}
	c.watches++
	c.mu.Unlock()
	prefix := m.Prefix
	mon := c.m
	mon.mu.Lock()
	if mon.watches >= mon.cfg.MaxTotalWatches {
		mon.mu.Unlock()
		// A message has no reply to carry the refusal: end the connection.
		err := fmt.Errorf("watch %q: resource exhausted: the monitor has %d watches, its quota (--max-total-watches)", prefix, mon.cfg.MaxTotalWatches)
		mon.rlog.Log(slog.LevelWarn, "refused-nameservice.watch", "request refused", "call", "nameservice.watch",
			"domain", c.client, "conn", c.id, "reason", err.Error())
		c.end(err)
		return nil
	}
	mon.watches++
	mon.mu.Unlock()
	unwatch := func() {
		mon.mu.Lock()
		mon.watches--
		mon.mu.Unlock()
	}
	w, err := c.store.Watch(ctx, prefix)
	if err != nil {
		unwatch()
		// A message has no reply to carry the failure: end the connection.
		c.end(fmt.Errorf("watch %q: %w", prefix, err))
		return nil
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer unwatch()
		for ev := range w.C {
			if err := from.Send(ctx, &nameservice.Changed{Name: ev.Name, Ref: ev.Ref.WithoutToken(), Removed: ev.Removed}); err != nil {
				w.Stop()
				c.end(fmt.Errorf("watch %q: send changed: %w", prefix, err))
				return
			}
		}
		// A watch ends with the connection (the store stops it when ctx
		// ends), or when the client falls behind: then the client has
		// missed changes, and ending the connection is how it learns.
		if err := w.Err(); err != nil {
			c.end(fmt.Errorf("watch %q: %w", prefix, err))
		}
	}()
	return nil
}

// Changed implements nameservice.Server: the nameservice sends changed,
// it does not receive it.
func (c *nsConn) Changed(ctx context.Context, from *nameservice.Client, m nameservice.Changed) error {
	return c.conn.Violation(errors.New("changed is sent by the nameservice, not to it"))
}
