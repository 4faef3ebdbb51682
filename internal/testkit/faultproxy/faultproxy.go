// Package faultproxy is for tests only: a TCP relay between a listener
// and a target that injects the faults of a network: it resets
// connections (RST) at a chosen byte count or at random, stalls them,
// throttles them, and partitions (refuses and resets everything for a
// while).
package faultproxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy relays the TCP connections it accepts to its target, one new
// connection to the target for each.
type Proxy struct {
	ln     net.Listener
	target string
	dial   func(ctx context.Context, addr string) (net.Conn, error)

	mu        sync.Mutex
	cond      *sync.Cond // broadcast when stalled or closed changes
	pairs     map[*pair]struct{}
	closed    bool
	stalled   bool
	cutMin    int64 // each new pair is cut after a random count in [cutMin, cutMax)
	cutMax    int64
	rng       *rand.Rand
	rate      int64 // bytes per second per direction; 0 unlimited
	partUntil time.Time

	cuts     atomic.Int64
	accepted atomic.Int64
	wg       sync.WaitGroup
}

// pair is one relayed connection: the client's and the target's side.
type pair struct {
	a, b   net.Conn
	budget atomic.Int64 // bytes left before the cut; <0: no cut
	once   sync.Once
}

// New listens on 127.0.0.1 and relays to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return Serve(ln, target, nil), nil
}

// Serve relays the connections ln accepts to target, dialing with dial
// (a net.Dialer's if nil). It takes ln over.
func Serve(ln net.Listener, target string, dial func(ctx context.Context, addr string) (net.Conn, error)) *Proxy {
	if dial == nil {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	p := &Proxy{ln: ln, target: target, dial: dial, pairs: make(map[*pair]struct{}), cutMin: -1, rng: rand.New(rand.NewPCG(1, 2))}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.loop()
	return p
}

// Addr returns the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cuts returns how many connections the proxy has reset so far.
func (p *Proxy) Cuts() int64 { return p.cuts.Load() }

// Accepted returns how many connections the proxy has accepted.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Seed makes the random cut points of CutRandom reproducible.
func (p *Proxy) Seed(a, b uint64) {
	p.mu.Lock()
	p.rng = rand.New(rand.NewPCG(a, b))
	p.mu.Unlock()
}

// CutAfter resets every connection, present and future, once n more
// bytes (both directions together) have crossed it. n < 0 stops cutting.
func (p *Proxy) CutAfter(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutMin, p.cutMax = n, n+1
	for q := range p.pairs {
		q.budget.Store(n)
	}
}

// CutRandom resets each connection after a random number of bytes in
// [lo, hi), drawn anew for every connection (present ones included).
func (p *Proxy) CutRandom(lo, hi int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutMin, p.cutMax = lo, hi
	for q := range p.pairs {
		q.budget.Store(p.drawLocked())
	}
}

// NoCuts stops cutting.
func (p *Proxy) NoCuts() { p.CutAfter(-1) }

func (p *Proxy) drawLocked() int64 {
	if p.cutMin < 0 {
		return -1
	}
	if p.cutMax <= p.cutMin+1 {
		return p.cutMin
	}
	return p.cutMin + p.rng.Int64N(p.cutMax-p.cutMin)
}

// Cut resets every connection now.
func (p *Proxy) Cut() {
	p.mu.Lock()
	qs := make([]*pair, 0, len(p.pairs))
	for q := range p.pairs {
		qs = append(qs, q)
	}
	p.mu.Unlock()
	for _, q := range qs {
		p.reset(q)
	}
}

// Stall stops relaying, in both directions, without closing anything,
// until Resume: the connections are black holes.
func (p *Proxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// Resume ends a Stall.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.stalled = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Throttle limits each direction of each connection to rate bytes a
// second; 0 removes the limit.
func (p *Proxy) Throttle(rate int64) {
	p.mu.Lock()
	p.rate = rate
	p.mu.Unlock()
}

// Partition resets every connection and, for d, resets the connections
// it accepts at once, as a machine cut off from the network would.
func (p *Proxy) Partition(d time.Duration) {
	p.mu.Lock()
	p.partUntil = time.Now().Add(d)
	p.mu.Unlock()
	p.Cut()
}

// Close stops the proxy and resets every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

// reset closes both sides of q with an RST (linger 0), once.
func (p *Proxy) reset(q *pair) {
	q.once.Do(func() {
		p.cuts.Add(1)
		for _, c := range []net.Conn{q.a, q.b} {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			c.Close()
		}
		p.mu.Lock()
		delete(p.pairs, q)
		p.mu.Unlock()
	})
}

func (p *Proxy) loop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		parted := time.Now().Before(p.partUntil)
		p.mu.Unlock()
		if parted {
			if tc, ok := c.(*net.TCPConn); ok {
				tc.SetLinger(0)
			}
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.relay(c)
	}
}

func (p *Proxy) relay(a net.Conn) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	b, err := p.dial(ctx, p.target)
	cancel()
	if err != nil {
		a.Close()
		return
	}
	q := &pair{a: a, b: b}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		a.Close()
		b.Close()
		return
	}
	q.budget.Store(p.drawLocked())
	p.pairs[q] = struct{}{}
	p.mu.Unlock()
	p.wg.Add(2)
	go p.copy(q, a, b)
	go p.copy(q, b, a)
}

// copy relays src to dst until either fails or the pair's budget is
// spent, which resets the pair.
func (p *Proxy) copy(q *pair, dst, src net.Conn) {
	defer p.wg.Done()
	defer p.reset(q)
	buf := make([]byte, 16<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.stalled && !p.closed {
				p.cond.Wait()
			}
			rate := p.rate
			p.mu.Unlock()
			out := buf[:n]
			// Take from the budget what this chunk spends; a chunk that
			// overruns it is written only up to the cut.
			for {
				left := q.budget.Load()
				if left < 0 {
					break
				}
				if int64(len(out)) >= left {
					q.budget.Store(0)
					dst.Write(out[:left])
					return
				}
				if q.budget.CompareAndSwap(left, left-int64(len(out))) {
					break
				}
			}
			if rate > 0 {
				time.Sleep(time.Duration(int64(len(out)) * int64(time.Second) / rate))
			}
			if _, werr := dst.Write(out); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
