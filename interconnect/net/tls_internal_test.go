package net

import (
	"bytes"
	"context"
	"io"
	stdnet "net"
	"sync/atomic"
	"testing"
	"time"
)

// countingConn counts the writes that reach the connection under it.
type countingConn struct {
	stdnet.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A TLS connection's write of a 64 KiB frame, four TLS records, reaches
// the TCP connection in one write, and the peer reads it whole.
func TestTLSRecordsOfAWriteLeaveTogether(t *testing.T) {
	ln, err := stdnet.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sid, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	cid, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	payload := bytes.Repeat([]byte("chanos-net"), 64<<10/10)
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		srv := &TLS{Identity: sid}
		tc, _, _, err := srv.server(ctx, c)
		if err != nil {
			got <- nil
			return
		}
		b := make([]byte, len(payload))
		if _, err := io.ReadFull(tc, b); err != nil {
			got <- nil
			return
		}
		got <- b
	}()
	raw, err := stdnet.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingConn{Conn: raw}
	cli := &TLS{Identity: cid, Peer: sid.Fingerprint}
	c, err := cli.client(ctx, counted)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := counted.writes.Load()
	if n, err := c.Write(payload); err != nil || n != len(payload) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if w := counted.writes.Load() - before; w != 1 {
		t.Errorf("a %d-byte TLS write took %d writes of the TCP connection, want 1", len(payload), w)
	}
	if b := <-got; !bytes.Equal(b, payload) {
		t.Fatalf("the peer read %d bytes, not the %d written", len(b), len(payload))
	}
}
