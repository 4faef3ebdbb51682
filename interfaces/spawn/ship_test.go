package spawn_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chanos/chanos/chanos"
	spawnif "github.com/chanos/chanos/interfaces/spawn"
	"github.com/chanos/chanos/monitor"
	"github.com/chanos/chanos/spawn"
)

// A ship that learns the hash of a file before it has sent it all, and
// finds the file in the cache, stops sending and drops its upload: not
// uploaded, no upload's file left behind, nothing added to the cache,
// and the connection goes on serving.
func TestShipStopsWhenCached(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logged := &records{}
	dir, c := spawnService(ctx, t, spawn.Config{Logger: slog.New(logged)})

	body := make([]byte, 8*spawnif.ShipChunk+100)
	rand.Read(body)
	path := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	first, err := c.Ship(ctx, path)
	if err != nil || !first.Uploaded {
		t.Fatalf("first ship: %+v, %v; want uploaded", first, err)
	}

	defer spawnif.AwaitHashBeforeSending()()
	again, err := c.Ship(ctx, path) // changed within the racy window: hashed again
	if err != nil || again.Uploaded || again.Hash != first.Hash {
		t.Fatalf("second ship: %+v, %v; want %s, not uploaded", again, err, first.Hash)
	}
	// The service saw the second upload given up, not ended: it stopped
	// before its last chunk.
	if n := logged.count("upload dropped: given up by its caller"); n != 1 {
		t.Fatalf("the service logged %d uploads given up, want 1 (%d ended)", n, logged.count("upload ended: in the cache"))
	}
	if n := logged.count("upload ended: in the cache"); n != 1 {
		t.Fatalf("the service logged %d uploads ended, want the first only", n)
	}
	// No upload's file is left: the cache directory holds the one file.
	names, err := os.ReadDir(filepath.Join(dir, "spawn-cache"))
	if err != nil || len(names) != 1 || names[0].Name() != first.Hash {
		t.Fatalf("cache directory: %v, %v; want only %s", names, err, first.Hash)
	}

	// The connection serves on: a ship of other bytes goes through.
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, bytes.Repeat([]byte{7}, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	if sh, err := c.Ship(ctx, other); err != nil || !sh.Uploaded {
		t.Fatalf("ship after the stopped upload: %+v, %v", sh, err)
	}
}

// A file cut shorter by another process while Ship reads it (the ship
// reads a mapping of it, where the lost pages fault) fails the ship with
// an error, not the process; the upload is given up, nothing enters the
// cache, and the connection serves on. Ship's hash runs while it sends,
// so it may be the hash that meets the lost pages first: either way the
// error says the file shrank.
func TestShipOfAFileCutShorter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, c := spawnService(ctx, t, spawn.Config{Logger: slog.New(slog.DiscardHandler)})

	path := filepath.Join(t.TempDir(), "payload")
	body := make([]byte, 64*spawnif.ShipChunk)
	rand.Read(body)
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	cut := false
	undo := spawnif.AfterEachChunk(func(sent int64) {
		if !cut {
			cut = true
			if err := os.Truncate(path, 100); err != nil {
				t.Error(err)
			}
		}
	})
	_, err := c.Ship(ctx, path)
	undo()
	if !errors.Is(err, spawnif.ErrFileShrank) {
		t.Fatalf("ship of a file cut shorter: %v, want %v", err, spawnif.ErrFileShrank)
	}
	if names, err := os.ReadDir(filepath.Join(dir, "spawn-cache")); err != nil || len(names) != 0 {
		t.Fatalf("cache directory: %v, %v; want it empty", names, err)
	}
	// The connection serves on: the file as it is now ships.
	if sh, err := c.Ship(ctx, path); err != nil || !sh.Uploaded || sh.Size != 100 {
		t.Fatalf("ship after the failed one: %+v, %v", sh, err)
	}
}

// An upload whose caller's context ends halfway gives its room back at
// once: three such uploads in a row, and a fourth that goes through, pass
// the service's quota of two uploads in progress per domain, which an
// upload left to the service's idle timeout (30 s) would hold.
func TestUploadCanceledGivesItsPlaceBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, c := spawnService(ctx, t, spawn.Config{Logger: slog.New(slog.DiscardHandler), MaxUploadsPerDomain: 2})

	body := make([]byte, 4*spawnif.ShipChunk)
	rand.Read(body)
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	for i := range 3 {
		cctx, cancelUpload := context.WithCancel(ctx)
		r := &cancelAfter{r: bytes.NewReader(body), n: spawnif.ShipChunk, cancel: cancelUpload}
		_, err := c.Upload(cctx, hash, int64(len(body)), r)
		cancelUpload()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("upload %d: %v, want context.Canceled", i, err)
		}
	}
	if up, err := c.Upload(ctx, hash, int64(len(body)), bytes.NewReader(body)); err != nil || !up {
		t.Fatalf("upload after three canceled: %v, %v", up, err)
	}
	names, err := os.ReadDir(filepath.Join(dir, "spawn-cache"))
	if err != nil || len(names) != 1 || names[0].Name() != hash {
		t.Fatalf("cache directory: %v, %v; want only %s", names, err, hash)
	}
}

// cancelAfter reads r, and calls cancel once n bytes have been read.
type cancelAfter struct {
	r      io.Reader
	n      int
	cancel func()
}

func (c *cancelAfter) Read(b []byte) (int, error) {
	k, err := c.r.Read(b)
	if c.n -= k; c.n <= 0 {
		c.cancel()
	}
	return k, err
}

// spawnService runs a monitor in this process, in a directory of its own,
// whose spawn service cfg configures, until the test ends, and returns
// its directory and a connection to its spawn service, of a domain joined
// to it.
func spawnService(ctx context.Context, t *testing.T, cfg spawn.Config) (string, *spawnif.Conn) {
	t.Helper()
	dir, err := os.MkdirTemp("", "chanos-ship-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m, err := monitor.New(monitor.Config{Dir: dir, Logger: slog.New(slog.DiscardHandler), Spawn: cfg})
	if err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- m.Serve(mctx) }()
	t.Cleanup(func() { stop(); <-served })
	d, err := chanos.Join(ctx, chanos.WithDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c, err := spawnif.Dial(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return dir, c
}

// records counts the messages of the records logged to it, at every
// level.
type records struct {
	mu   sync.Mutex
	msgs map[string]int
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }

func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.msgs == nil {
		r.msgs = make(map[string]int)
	}
	r.msgs[rec.Message]++
	return nil
}

func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.msgs[msg]
}
