// Command pingpong-client connects to a pingpong service by name,
// exchanges messages and rpcs with it, and prints what happened and the
// round-trip latency.
//
//	pingpong-client -name pingsvc -n 100000
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/chanos/chanos/chanos"
	"github.com/chanos/chanos/interfaces/pingpong"
)

func main() {
	name := flag.String("name", "pingsvc", "name of the service")
	n := flag.Int("n", 100000, "number of ping-pongs and of echo calls")
	wait := flag.Duration("wait", 10*time.Second, "how long to wait for the service to appear")
	flag.Parse()
	if err := run(*name, *n, *wait); err != nil {
		fmt.Fprintln(os.Stderr, "pingpong-client:", err)
		os.Exit(1)
	}
}

func run(name string, n int, wait time.Duration) error {
	if n < 1 {
		return errors.New("-n must be at least 1")
	}
	ctx := context.Background()
	d, err := chanos.Join(ctx, chanos.WithProgram("pingpong-client"))
	if err != nil {
		return err
	}
	defer d.Close()

	cctx, cancel := context.WithTimeout(ctx, wait)
	c, err := pingpong.Connect(cctx, d, name)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("connected to %q over %s (domain %d)\n", name, c.Raw().Interconnect(), d.ID())

	// Messages: each ping is answered by a pong with the same numbers.
	// Each round trip is timed with one clock read, taken right after the
	// ping is sent, while the pong is on its way: read between a pong and
	// the next ping, the clock would lengthen the round trips it times.
	// Send keeps nothing of the ping; Handle gives each pong to
	// pongs.Pong by value, so a round trip allocates nothing (Receive
	// would return each pong as a new value).
	rtts := make([]time.Duration, n)
	// Touch every page of rtts now: a fresh large allocation is mapped on
	// first write, and a page fault every 512 round trips would otherwise
	// land in the timed loop (about 5 ms per million round trips here).
	for i := range rtts {
		rtts[i] = 0
	}
	var got pongs
	start := time.Now()
	var sent time.Duration // when the last ping went
	for i := range n {
		if err := c.Send(ctx, &pingpong.Ping{ClientID: uint32(d.ID()), MsgID: uint32(i)}); err != nil {
			return fmt.Errorf("send ping %d: %w", i, err)
		}
		t := time.Since(start)
		if i > 0 {
			rtts[i-1] = t - sent
		}
		sent = t
		if err := c.Handle(ctx, &got); err != nil {
			return fmt.Errorf("receive pong %d: %w", i, err)
		}
		if got.last.MsgID != uint32(i) {
			return fmt.Errorf("ping %d answered by %+v", i, got.last)
		}
	}
	total := time.Since(start)
	rtts[n-1] = total - sent
	report("ping/pong messages", n, total, rtts)

	// rpcs: echo returns its argument.
	start = time.Now()
	var prev time.Duration
	for i := range n {
		v, err := c.Echo(ctx, uint64(i))
		if err != nil {
			return fmt.Errorf("echo %d: %w", i, err)
		}
		t := time.Since(start)
		rtts[i], prev = t-prev, t
		if v != uint64(i) {
			return fmt.Errorf("echo %d returned %d", i, v)
		}
	}
	report("echo rpcs", n, time.Since(start), rtts)

	payload := make([]byte, 64<<10)
	for i := range payload {
		payload[i] = byte(i)
	}
	out, err := c.Bounce(ctx, payload)
	if err != nil {
		return fmt.Errorf("bounce: %w", err)
	}
	if !slices.Equal(out, payload) {
		return errors.New("bounce returned a different payload")
	}
	fmt.Printf("bounce: 64 KiB payload returned intact\n")
	return nil
}

// pongs takes the pongs the server sends; anything else the server might
// send fails with errors.ErrUnsupported.
type pongs struct {
	pingpong.UnimplementedServer
	last pingpong.Pong
}

func (p *pongs) Pong(ctx context.Context, from *pingpong.Client, m pingpong.Pong) error {
	p.last = m
	return nil
}

func report(what string, n int, total time.Duration, rtts []time.Duration) {
	slices.Sort(rtts)
	fmt.Printf("%s: %d round trips in %v; round trip p50 %v, p99 %v\n",
		what, n, total.Round(time.Millisecond), rtts[n/2], rtts[n*99/100])
}
