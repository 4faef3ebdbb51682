package net

import (
	"crypto/rand"
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
