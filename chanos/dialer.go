package chanos

import (
	"context"
	"fmt"
	"sync"
)

// Dialer holds a connection to the export of a name and makes a new one
// once it has ended: a client that outlives its server's restarts, as
// gRPC's ClientConn does. Conn returns the connection, connecting first
// when there is none or the last one has ended, and waiting for the name
// as Connect does (until ctx ends, or the domain's call timeout without a
// deadline), so a server on its way back is waited for.
//
// Nothing is resent: a call on a connection whose server dies fails as
// it would (ErrPeerDied, ErrClosed or ErrNetworkLost: CodeOf gives them
// CodeUnavailable), and the next Conn binds the server that exports the
// name then. What the peer sent and this side has not received goes with
// the connection that ended. Generated packages wrap it typed (pingpong.NewDialer).
//
// A Dialer's methods may be called from several goroutines: those that
// find the connection ended wait for one Connect, and get its result.
type Dialer struct {
	d     *Domain
	name  string
	iface Interface

	mu      sync.Mutex
	c       *Conn
	dialing chan struct{} // closed when the Connect under way ends; nil for none
	closed  bool
}

// NewDialer returns a Dialer of the export of name, of interface iface.
// It connects on its first Conn, not before.
func NewDialer(d *Domain, name string, iface Interface) *Dialer {
	return &Dialer{d: d, name: name, iface: iface}
}

// Conn returns the Dialer's connection: the one it holds while that has
// not ended (Err is nil), else a new one, bound by name as Connect binds.
// Its error is Connect's, or ErrClosed after Close. The connection stays
// the Dialer's: close the Dialer, not it.
func (r *Dialer) Conn(ctx context.Context) (*Conn, error) {
	for {
		r.mu.Lock()
		switch {
		case r.closed:
			r.mu.Unlock()
			return nil, fmt.Errorf("chanos: dial %q: %w", r.name, ErrClosed)
		case r.c != nil && r.c.Err() == nil:
			c := r.c
			r.mu.Unlock()
			return c, nil
		case r.dialing != nil:
			wait := r.dialing
			r.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("chanos: dial %q: %w", r.name, ctx.Err())
			}
		}
		ended := r.c
		r.c = nil
		wait := make(chan struct{})
		r.dialing = wait
		r.mu.Unlock()
		if ended != nil {
			ended.Close() // frees what the ended connection still holds
		}
		c, err := Connect(ctx, r.d, r.name, r.iface)
		r.mu.Lock()
		r.dialing = nil
		close(wait)
		if err == nil && r.closed {
			c.Close()
			err = ErrClosed
		}
		if err != nil {
			r.mu.Unlock()
			return nil, fmt.Errorf("chanos: dial %q: %w", r.name, err)
		}
		r.c = c
		r.mu.Unlock()
		return c, nil
	}
}

// Close closes the connection the Dialer holds, and makes every Conn
// after it fail with ErrClosed. A Connect under way finishes, and its
// connection is closed.
func (r *Dialer) Close() error {
	r.mu.Lock()
	c := r.c
	r.c, r.closed = nil, true
	r.mu.Unlock()
	if c != nil {
		return c.Close()
	}
	return nil
}
