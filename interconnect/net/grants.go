package net

import (
	"context"
	"sync"
	"time"
)

// Grants holds the connections an accepting side was told to expect,
// each under its server name: the identity to present, the client
// certificate to admit once, and a value for the program that accepts
// it. Its TLS is the listener's: one listener serves every granted
// connection, each with its own certificates (docs/net.md, "Binding
// between machines").
//
// What a grant holds is bounded: a grant not used within its time to
// live is dropped, and beyond the maximum the oldest goes.
type Grants struct {
	ttl  time.Duration
	max  int
	wait time.Duration

	mu     sync.Mutex
	grants map[string]*grant
	taken  map[string]*grant // accepted connections' grants, for their resumes, until Forget
	order  []string          // names, oldest first
	// forgotten connections' grants, names oldest first: their identity
	// still completes a resume's handshake for a while (ttl), so that the
	// dialing side is told in TLS that the connection is unknown and ends
	// it at once, rather than redial until its grace passes
	ended      map[string]*grant
	endedOrder []string
	arrived    chan struct{} // closed, and replaced, when a grant is added
	ctx        context.Context
	cancel     context.CancelFunc
}

type grant struct {
	id       *Identity
	client   [32]byte
	authOnly bool
	value    any
	used     bool
	expires  time.Time
}

// NewGrants returns an empty Grants whose grants live at most ttl unused,
// at most max of them at once. A handshake that asks for a name not yet
// granted waits up to wait for it: the dialing side may be told of the
// connection before the accepting side is.
func NewGrants(ttl time.Duration, max int, wait time.Duration) *Grants {
	ctx, cancel := context.WithCancel(context.Background())
	return &Grants{ttl: ttl, max: max, wait: wait, grants: map[string]*grant{}, taken: map[string]*grant{},
		ended: map[string]*grant{}, arrived: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// Add grants the connection under name: present id, admit the client
// certificate whose fingerprint is client, once, in the mode authOnly
// says (TLS.AuthOnly); Take returns value.
func (g *Grants) Add(name string, id *Identity, client [32]byte, authOnly bool, value any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	g.order = prune(g.grants, g.order, now, g.max)
	g.grants[name] = &grant{id: id, client: client, authOnly: authOnly, value: value, expires: now.Add(g.ttl)}
	g.order = append(g.order, name)
	close(g.arrived)
	g.arrived = make(chan struct{})
}

// Take removes the grant of a connection the listener accepted
// (Link.ServerName) and returns its value; false if it has gone (dropped
// as too old meanwhile). The grant's identity is kept, for the
// connection's resumes (each a TLS handshake under the same name), until
// Forget.
func (g *Grants) Take(name string) (any, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr := g.grants[name]
	delete(g.grants, name)
	if gr == nil {
		return nil, false
	}
	g.taken[name] = gr
	return gr.value, true
}

// Forget drops the identity of a connection Take returned, once it can no
// longer resume (it ended, or its peer closed it: Link.Gone). The
// identity still answers a resume's handshake for the grants' time to
// live, at most max of them at once, the oldest going first: the
// listener then tells the dialing side, inside TLS, that the connection
// is unknown, and it ends the connection at once. A machine cut off
// while the other side ended its connections learns so as soon as the
// network is back, not when its grace runs out; without the identity
// its redials would fail the handshake, which says nothing.
func (g *Grants) Forget(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr := g.taken[name]
	delete(g.taken, name)
	if gr == nil {
		return
	}
	now := time.Now()
	g.endedOrder = prune(g.ended, g.endedOrder, now, g.max)
	if _, dup := g.ended[name]; !dup {
		gr.expires = now.Add(g.ttl)
		g.ended[name] = gr
		g.endedOrder = append(g.endedOrder, name)
	}
}

// prune drops from m, whose names order holds oldest first, the grants
// that have expired by now, those already gone from m, and the oldest
// beyond max-1, so that one more fits; it returns what is left of order.
func prune(m map[string]*grant, order []string, now time.Time, max int) []string {
	for len(order) > 0 {
		old := m[order[0]]
		if old != nil && now.Before(old.expires) && len(order) < max {
			break
		}
		delete(m, order[0])
		order = order[1:]
	}
	return order
}

// ForgetWhenGone calls Forget(link.ServerName()) once link is gone.
func (g *Grants) ForgetWhenGone(link *Link) {
	go func() {
		<-link.Gone()
		g.Forget(link.ServerName())
	}()
}

// TLS returns the accepting side's TLS of a listener that serves the
// granted connections.
func (g *Grants) TLS() *TLS { return &TLS{Select: g.identity, Admit: g.admit, ModeOf: g.authOnly} }

// authOnly is TLS.ModeOf: the mode of the connection granted under name.
func (g *Grants) authOnly(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gr := g.grants[name]; gr != nil {
		return gr.authOnly
	}
	if gr := g.taken[name]; gr != nil {
		return gr.authOnly
	}
	if gr := g.ended[name]; gr != nil {
		return gr.authOnly
	}
	return false
}

// Close ends the waits of handshakes for names not granted.
func (g *Grants) Close() { g.cancel() }

// identity is TLS.Select: the identity granted under name, waiting a
// moment for its grant.
func (g *Grants) identity(name string) *Identity {
	deadline := time.NewTimer(g.wait)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		gr, arrived := g.grants[name], g.arrived
		live := g.taken[name]
		gone := g.ended[name]
		g.mu.Unlock()
		if gr != nil {
			return gr.id
		}
		if live != nil {
			return live.id
		}
		if gone != nil && time.Now().Before(gone.expires) {
			return gone.id
		}
		select {
		case <-arrived:
		case <-deadline.C:
			return nil
		case <-g.ctx.Done():
			return nil
		}
	}
}

// admit is TLS.Admit: a client certificate is admitted once, for the
// connection it was granted for.
func (g *Grants) admit(name string, fp [32]byte) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	gr := g.grants[name]
	if gr == nil || gr.used || gr.client != fp {
		return false
	}
	gr.used = true
	return true
}
