package peers

import (
	"context"
	"fmt"
	"sync"
)

// sinkChanCap is the buffer of the go-chan peer's one-way channel.
const sinkChanCap = 128

// chanPeer is Go channels inside one process: the baseline every Go
// program has. Each connection has a server goroutine. Round trips and
// calls go over a pair of unbuffered channels; one-way messages go over a
// channel buffered to sinkChanCap. A message is a slice whose bytes the
// receiver copies into a buffer of its own, as a receiver that keeps a
// message must.
type chanPeer struct{}

func (chanPeer) Transport() string { return "go-chan" }

func (chanPeer) Note(suite string) string {
	if suite == SuiteStream {
		return fmt.Sprintf("in-process; buffered chan, cap %d", sinkChanCap)
	}
	return "in-process; unbuffered chans"
}

func (chanPeer) Start(context.Context, Env, int) (Server, error) { return &chanServer{}, nil }

type chanServer struct{}

func (s *chanServer) Dial(context.Context, int) (Client, error) {
	c := &chanClient{req: make(chan chanMsg), resp: make(chan chanMsg)}
	req, resp := c.req, c.resp
	c.wg.Go(func() { serveChan(req, resp) })
	return c, nil
}

func (s *chanServer) PID() int { return 0 }

// Close does nothing: each connection's server goroutines end when its
// client closes.
func (s *chanServer) Close() error { return nil }

type chanMsg struct {
	op byte
	id uint64
	p  []byte
}

func serveChan(req <-chan chanMsg, resp chan<- chanMsg) {
	var buf []byte
	for m := range req {
		buf = append(buf[:0], m.p...)
		resp <- chanMsg{op: m.op, id: m.id, p: buf}
	}
	close(resp)
}

type chanClient struct {
	wg        sync.WaitGroup // the connection's server goroutines
	req, resp chan chanMsg
	payload   []byte
	in        []byte
	id        uint64

	sink chan []byte // nil until the first Send; a nil message asks for an Ack
	acks chan Ack
}

func (c *chanClient) SetPayload(p []byte) error {
	c.payload = make([]byte, len(p)) // never nil: nil asks for an Ack
	copy(c.payload, p)
	return nil
}

func (c *chanClient) exchange(m chanMsg) (chanMsg, error) {
	c.req <- m
	r, ok := <-c.resp
	if !ok {
		return r, fmt.Errorf("go-chan server gone")
	}
	c.in = append(c.in[:0], r.p...)
	r.p = c.in
	return r, nil
}

func (c *chanClient) RoundTrip() error {
	r, err := c.exchange(chanMsg{op: opEcho, p: c.payload})
	if err != nil {
		return err
	}
	return checkEcho(r.op, opEcho, r.p, c.payload)
}

func (c *chanClient) Call() error {
	c.id++
	r, err := c.exchange(chanMsg{op: opCall, id: c.id, p: c.payload})
	if err != nil {
		return err
	}
	if r.id != c.id {
		return fmt.Errorf("reply to call %d, want %d", r.id, c.id)
	}
	return checkEcho(r.op, opCall, r.p, c.payload)
}

func (c *chanClient) Send() error {
	if c.sink == nil {
		sink, acks := make(chan []byte, sinkChanCap), make(chan Ack)
		c.wg.Go(func() { serveChanSink(sink, acks) })
		c.sink, c.acks = sink, acks
	}
	c.sink <- c.payload
	return nil
}

func serveChanSink(sink <-chan []byte, acks chan<- Ack) {
	var buf []byte
	var ack Ack
	for p := range sink {
		if p == nil {
			acks <- ack
			ack = Ack{}
			continue
		}
		buf = append(buf[:0], p...)
		ack.Msgs++
		ack.Bytes += uint64(len(buf))
	}
}

func (c *chanClient) Ack() (Ack, error) {
	if c.sink == nil {
		return Ack{}, nil
	}
	c.sink <- nil
	return <-c.acks, nil
}

func (c *chanClient) Close() error {
	if c.req != nil {
		close(c.req)
		c.req = nil
	}
	if c.sink != nil {
		close(c.sink)
		c.sink = nil
	}
	c.wg.Wait()
	return nil
}
