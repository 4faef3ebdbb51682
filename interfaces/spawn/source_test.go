package spawn

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestShipSourceMappedAndRead checks that the two ways a shipSource
// reads a file, through a mapping and through read(2) (for files that do
// not map), give the same hash and the same chunks; that an empty file
// is not mapped; and that the read(2) way reports a file cut shorter.
func TestShipSourceMappedAndRead(t *testing.T) {
	body := make([]byte, 3*hashPiece+12345)
	rand.Read(body)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum := sha256.Sum256(body)
	want := hex.EncodeToString(sum[:])

	mapped := openShipSource(f, int64(len(body)))
	defer mapped.close()
	if mapped.m == nil {
		t.Fatal("a regular file was not mapped")
	}
	read := &shipSource{f: f, size: int64(len(body))} // as for a file that does not map
	for name, s := range map[string]*shipSource{"mapped": mapped, "read": read} {
		if got, err := s.hash(make(chan struct{})); err != nil || got != want {
			t.Errorf("%s: hash = %s, %v; want %s", name, got, err, want)
		}
		chunk := make([]byte, ShipChunk)
		for off := int64(0); off < int64(len(body)); off += ShipChunk {
			n := min(int64(ShipChunk), int64(len(body))-off)
			if err := s.readAt(chunk[:n], off); err != nil || !bytes.Equal(chunk[:n], body[off:off+n]) {
				t.Fatalf("%s: chunk at %d: %v, or not the file's bytes", name, off, err)
			}
		}
		stop := make(chan struct{})
		close(stop)
		if _, err := s.hash(stop); !errors.Is(err, errShipEnded) {
			t.Errorf("%s: hash after stop: %v, want %v", name, err, errShipEnded)
		}
	}

	if s := openShipSource(f, 0); s.m != nil {
		t.Error("an empty file was mapped")
	}
	if err := os.Truncate(path, 100); err != nil {
		t.Fatal(err)
	}
	if err := read.readAt(make([]byte, ShipChunk), ShipChunk); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read(2) way, past a cut: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := read.hash(make(chan struct{})); err == nil {
		t.Error("read(2) way, hash of a file cut shorter: no error")
	}
}
