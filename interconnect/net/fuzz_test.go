package net_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/chanos/chanos/interconnect"
	cnet "github.com/chanos/chanos/interconnect/net"
	"github.com/chanos/chanos/interfaces/pingpong"
)

// record returns a record of type typ with payload p, sequence number seq
// and acknowledgement ack (docs/net.md, "Records").
func record(typ uint8, seq, ack uint64, p []byte) []byte {
	b := make([]byte, 24+len(p))
	b[0] = typ
	binary.LittleEndian.PutUint32(b[4:], uint32(len(p)))
	binary.LittleEndian.PutUint64(b[8:], seq)
	binary.LittleEndian.PutUint64(b[16:], ack)
	copy(b[24:], p)
	return b
}

// FuzzPeerRecords plays a peer that says a valid hello and then sends
// the fuzzer's bytes on a plain link. Whatever they are, the accepting
// side delivers the frames they hold, waits for more, or ends the
// connection with an error; it never panics or hangs, and Close returns.
func FuzzPeerRecords(f *testing.F) {
	ping := frame(f, &pingpong.Ping{ClientID: 1, MsgID: 2})
	f.Add(record(1, 1, 0, ping))
	f.Add(append(record(1, 1, 0, ping), record(1, 2, 0, ping)...))
	f.Add(append(record(1, 1, 0, ping), record(3, 2, 0, nil)...))
	f.Add(record(2, 0, 0, nil))
	f.Add(record(1, 1, 0, ping)[:30])
	f.Add(record(4, 0, 0, make([]byte, 36)))
	f.Add(record(1, 2, 0, ping))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))

	L := listen(f, &cnet.Options{MaxFrameSize: 1 << 16, Grace: 100 * time.Millisecond, Linger: 10 * time.Millisecond})
	f.Fuzz(func(t *testing.T, stream []byte) {
		raw, _ := rawHello(t, L.Addr().String())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		link, err := L.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer link.Close()
		if _, err := raw.Write(stream); err != nil {
			t.Fatal(err)
		}
		for {
			// What the stream holds is there within a moment; a receive
			// that waits longer waits for more (a valid stream), which is
			// right too.
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Millisecond)
			var in interconnect.Incoming
			err := link.Receive(rctx, &in)
			rcancel()
			switch {
			case err == nil:
				continue
			case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
				return
			case ctx.Err() != nil:
				t.Fatalf("the link hung: %v", err)
			}
			return // ended with an error: garbage refused
		}
	})
}
