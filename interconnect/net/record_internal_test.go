package net

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
)

// A record's tag holds only for its bytes, its index on the connection
// and its direction's key: a changed bit anywhere, a record replayed,
// reordered or dropped (another index), and one from another key (the
// other direction, another TCP connection) all fail.
func TestRecordMAC(t *testing.T) {
	key := func() []byte {
		k := make([]byte, macKeySize)
		rand.Read(k)
		return k
	}
	k1, k2 := key(), key()
	mac := func(k []byte) *recordMAC {
		m, err := newRecordMAC(k)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	rec := func(i int) []byte {
		b := make([]byte, recHeaderSize+40, recHeaderSize+40+tagSize)
		putHeader(b, recData, 40, uint64(i+1), 0)
		rand.Read(b[recHeaderSize:])
		return b
	}
	send := mac(k1)
	var sealed [][]byte
	for i := range 3 {
		sealed = append(sealed, send.seal(rec(i)))
	}
	split := func(b []byte) ([]byte, []byte) { return b[:len(b)-tagSize], b[len(b)-tagSize:] }

	recv := mac(k1)
	for i, b := range sealed {
		if r, tag := split(b); !recv.open(r, tag) {
			t.Fatalf("record %d in order: refused", i)
		}
	}
	for bit := 0; bit < 8*len(sealed[0]); bit += 7 {
		b := append([]byte(nil), sealed[0]...)
		b[bit/8] ^= 1 << (bit % 8)
		if r, tag := split(b); mac(k1).open(r, tag) {
			t.Fatalf("record with bit %d flipped: accepted", bit)
		}
	}
	skip := mac(k1)
	if r, tag := split(sealed[1]); skip.open(r, tag) {
		t.Error("record 1 where 0 was due (0 dropped): accepted")
	}
	replay := mac(k1)
	replay.open(split(sealed[0]))
	if r, tag := split(sealed[0]); replay.open(r, tag) {
		t.Error("record 0 replayed: accepted")
	}
	if r, tag := split(sealed[0]); mac(k2).open(r, tag) {
		t.Error("record under another key: accepted")
	}
}

// The tags of docs/net.md's example, which another implementation can
// check itself against (computed independently with Python's
// cryptography AESGCM too).
func TestRecordMACExample(t *testing.T) {
	key := make([]byte, macKeySize)
	for i := range key {
		key[i] = byte(i)
	}
	m, err := newRecordMAC(key)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, recHeaderSize+16)
	putHeader(data, recData, 16, 1, 0)
	for i := range 16 {
		data[recHeaderSize+i] = byte(0x10 + i)
	}
	ack := make([]byte, recHeaderSize)
	putHeader(ack, recAck, 0, 0, 7)
	for i, c := range []struct{ rec, hex, tag string }{
		{string(data), "010000001000000001000000000000000000000000000000101112131415161718191a1b1c1d1e1f", "cf66b36147ee972191a8dc3344b110b8"},
		{string(ack), "020000000000000000000000000000000700000000000000", "d8f00a1ecde5924c86110e5ebf3f8783"},
	} {
		if got := hex.EncodeToString([]byte(c.rec)); got != c.hex {
			t.Fatalf("record %d: %s, want %s", i, got, c.hex)
		}
		out := m.seal([]byte(c.rec))
		if got := hex.EncodeToString(out[len(c.rec):]); got != c.tag {
			t.Errorf("record %d: tag %s, want %s", i, got, c.tag)
		}
	}
}
