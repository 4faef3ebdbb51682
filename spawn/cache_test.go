package spawn

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	api "github.com/chanos/chanos/interfaces/spawn"
)

// script is a small program for the cache: a shell script, which the
// kernel runs from the cache as it would a binary.
func script(body string) []byte { return []byte("#!/bin/sh\n" + body + "\n") }

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// putAll puts b into s's cache in chunks of chunk bytes, as owner.
func putAll(t *testing.T, s *Service, owner uint64, b []byte, chunk int) error {
	t.Helper()
	id, present, err := s.PutBegin(sum(b), uint64(len(b)), owner, Caller{Domain: owner})
	if err != nil || present {
		return err
	}
	for off := 0; off < len(b); off += chunk {
		s.PutData(id, owner, uint64(off), b[off:min(off+chunk, len(b))])
	}
	return s.PutEnd(id, owner)
}

// runShipped spawns the cached file hash as r, waits for its end and
// returns its whole output.
func runShipped(t *testing.T, s *Service, hash string, r Request) (string, api.Exit) {
	t.Helper()
	ctx := ctxFor(t)
	st, err := s.SpawnShipped(hash, r, Caller{Domain: 7})
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.Wait(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	var from uint64
	for {
		b, start, done, err := s.Logs(ctx, st.ID, from, 1<<16, true)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
		from = start + uint64(len(b))
		if done {
			return string(out), e
		}
	}
}

// temps lists the files of uploads in progress in the cache.
func temps(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, tempPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestShipAndRun: an uploaded program enters the cache (0700, the file
// 0500) and runs from it by hash, with the argv[0] asked for; a second
// put_begin finds it present.
func TestShipAndRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	s := newService(t, Config{CacheDir: dir})
	prog := script(`echo "shipped $0 $*"`)
	if err := putAll(t, s, 1, prog, 7); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("cache directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, sum(prog))); err != nil || fi.Mode().Perm() != 0o500 {
		t.Fatalf("cached file: %v, %v; want mode 0500", fi, err)
	}
	if _, present, err := s.PutBegin(sum(prog), uint64(len(prog)), 2, Caller{Domain: 2}); err != nil || !present {
		t.Fatalf("put_begin of a cached file: present %v, %v", present, err)
	}
	if size, ok, err := s.Cached(sum(prog)); !ok || err != nil || size != int64(len(prog)) {
		t.Fatalf("cached: %d %v %v", size, ok, err)
	}
	out, e := runShipped(t, s, sum(prog), Request{Program: "myprog", Args: []string{"a", "b"}})
	if want := "shipped " + filepath.Join(dir, sum(prog)) + " a b\n"; out != want || e.Code != 0 {
		// A script's $0 is the file the kernel ran: the cached one.
		t.Fatalf("output %q, %v; want %q, exit 0", out, e, want)
	}
	if got := s.List()[0].Program; got != filepath.Join(dir, sum(prog)) {
		t.Fatalf("list: program %q, want the cached file", got)
	}
}

// TestShipRefused: garbage, a short upload, chunks out of place, another
// connection's upload and an unknown hash are refused, leave nothing in
// the cache, and spoil no other upload of the same file.
func TestShipRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	s := newService(t, Config{CacheDir: dir})
	good := script("echo good")
	h := sum(good)

	// A good upload in progress, beside which the others fail.
	okID, _, err := s.PutBegin(h, uint64(len(good)), 10, Caller{Domain: 10})
	if err != nil {
		t.Fatal(err)
	}
	s.PutData(okID, 10, 0, good[:5])

	// Garbage under the good file's hash.
	bad := []byte(strings.Repeat("x", len(good)))
	id, _, err := s.PutBegin(h, uint64(len(bad)), 11, Caller{Domain: 11})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutData(id, 11, 0, bad); err != nil {
		t.Fatal(err)
	}
	// Another connection may not add to it, nor end it.
	if err := s.PutData(okID, 11, 5, good[5:]); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("put_data into another connection's upload: %v, want ErrNotFound", err)
	}
	if err := s.PutEnd(id, 11); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("put_end of garbage: %v, want ErrInvalid about the SHA-256", err)
	}
	if _, ok, _ := s.Cached(h); ok {
		t.Fatal("garbage entered the cache")
	}

	// A short upload, and chunks out of place or past the end.
	id, _, _ = s.PutBegin(h, uint64(len(good)), 12, Caller{Domain: 12})
	s.PutData(id, 12, 0, good[:3])
	if err := s.PutEnd(id, 12); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("put_end of a short upload: %v, want ErrInvalid", err)
	}
	id, _, _ = s.PutBegin(h, uint64(len(good)), 12, Caller{Domain: 12})
	if err := s.PutData(id, 12, 3, good[3:]); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("a chunk out of place: %v, want ErrInvalid", err)
	}
	if err := s.PutEnd(id, 12); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("put_end after a chunk out of place: %v", err)
	}
	id, _, _ = s.PutBegin(h, uint64(len(good)), 12, Caller{Domain: 12})
	if err := s.PutData(id, 12, 0, append(good, '!')); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("a chunk past the size: %v, want ErrInvalid", err)
	}
	s.PutEnd(id, 12)

	// A connection that ends halfway loses its upload.
	id, _, _ = s.PutBegin(h, uint64(len(good)), 13, Caller{Domain: 13})
	s.PutData(id, 13, 0, good[:4])
	s.AbortUploads(13)
	if err := s.PutEnd(id, 13); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("put_end after the connection ended: %v, want ErrNotFound", err)
	}

	if _, err := s.SpawnShipped(h, Request{}, Caller{Domain: 1}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("spawn of a file not in the cache: %v, want ErrNotFound", err)
	}
	if _, err := s.SpawnShipped("ABC", Request{}, Caller{Domain: 1}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("spawn of a bad hash: %v, want ErrInvalid", err)
	}
	if got := temps(t, dir); len(got) != 1 {
		t.Fatalf("upload files %v; want only the good upload's", got)
	}

	// The good upload, untouched by the others, ends well and runs.
	if err := s.PutData(okID, 10, 5, good[5:]); err != nil {
		t.Fatal(err)
	}
	if err := s.PutEnd(okID, 10); err != nil {
		t.Fatal(err)
	}
	if out, _ := runShipped(t, s, h, Request{Program: "good"}); out != "good\n" {
		t.Fatalf("output %q", out)
	}
	if got := temps(t, dir); len(got) != 0 {
		t.Fatalf("upload files left: %v", got)
	}
	if st := s.CacheStats(); st.Uploads != 0 || st.Reserved != 0 || st.Files != 1 {
		t.Fatalf("cache stats %+v", st)
	}
}

// TestShipTampered: a cached file changed after it entered the cache is
// found out before it runs, and removed.
func TestShipTampered(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	s := newService(t, Config{CacheDir: dir})
	prog := script("echo original")
	if err := putAll(t, s, 1, prog, 1<<16); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, sum(prog))
	os.Chmod(path, 0o700)
	if err := os.WriteFile(path, script("echo tampered"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := s.SpawnShipped(sum(prog), Request{}, Caller{Domain: 1})
	if !errors.Is(err, api.ErrFailed) || !strings.Contains(err.Error(), "has changed") {
		t.Fatalf("spawn of a tampered file: %v, want ErrFailed, changed", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the tampered file is still there: %v", err)
	}
	if _, ok, _ := s.Cached(sum(prog)); ok {
		t.Fatal("the cache still lists the tampered file")
	}
}

// TestShipQuotas: uploads beyond the quotas are refused with
// ErrExhausted; the least recently used file makes room; an idle upload
// is dropped; a new service finds the cache's files and drops the
// uploads a previous run left.
func TestShipQuotas(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	s := newService(t, Config{CacheDir: dir, CacheBytes: 100, MaxShipBytes: 60, MaxUploads: 3, MaxUploadsPerDomain: 2,
		UploadIdle: 200 * time.Millisecond})
	a := []byte(strings.Repeat("a", 40))
	b := []byte(strings.Repeat("b", 40))
	c := []byte(strings.Repeat("c", 40))
	if _, _, err := s.PutBegin(sum(a), 61, 1, Caller{Domain: 1}); !errors.Is(err, api.ErrExhausted) {
		t.Fatalf("an upload above MaxShipBytes: %v, want ErrExhausted", err)
	}
	for _, f := range [][]byte{a, b} {
		if err := putAll(t, s, 1, f, 16); err != nil {
			t.Fatal(err)
		}
	}
	s.Cached(sum(b)) // not a use: a stays the least recently used
	if err := putAll(t, s, 1, c, 16); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Cached(sum(a)); ok {
		t.Fatal("a, the least recently used, was not evicted for c")
	}
	if _, ok, _ := s.Cached(sum(b)); !ok {
		t.Fatal("b was evicted")
	}

	// Per domain, in all, and the room reserved by uploads in progress.
	x := func(n int) string { return sum([]byte{byte(n)}) }
	if _, _, err := s.PutBegin(x(1), 30, 5, Caller{Domain: 5}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutBegin(x(2), 30, 5, Caller{Domain: 5}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutBegin(x(3), 10, 5, Caller{Domain: 5}); !errors.Is(err, api.ErrExhausted) {
		t.Fatalf("a third upload of a domain: %v, want ErrExhausted", err)
	}
	if _, _, err := s.PutBegin(x(4), 50, 6, Caller{Domain: 6}); !errors.Is(err, api.ErrExhausted) {
		t.Fatalf("an upload that does not fit beside those in progress: %v, want ErrExhausted", err)
	}
	if _, _, err := s.PutBegin(x(5), 10, 6, Caller{Domain: 6}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutBegin(x(6), 10, 7, Caller{Domain: 7}); !errors.Is(err, api.ErrExhausted) {
		t.Fatalf("a fourth upload in all: %v, want ErrExhausted", err)
	}
	// The idle ones go, and their room with them.
	deadline := time.Now().Add(5 * time.Second)
	for s.CacheStats().Uploads != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("idle uploads not dropped: %+v", s.CacheStats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := s.CacheStats(); st.Reserved != 0 || len(temps(t, dir)) != 0 {
		t.Fatalf("after the idle uploads: %+v, files %v", st, temps(t, dir))
	}

	// A new service over the same directory.
	if err := putAll(t, s, 1, b, 16); err != nil {
		t.Fatal(err)
	}
	id, _, err := s.PutBegin(x(7), 10, 8, Caller{Domain: 8})
	if err != nil {
		t.Fatal(err)
	}
	s.PutData(id, 8, 0, []byte("12345"))
	os.WriteFile(filepath.Join(dir, tempPrefix+"999"), []byte("left"), 0o600)
	s2 := newService(t, Config{CacheDir: dir})
	if st := s2.CacheStats(); st.Files != 1 || st.Bytes != 40 {
		t.Fatalf("a new service over the cache: %+v, want b", st)
	}
	if _, err := s2.SpawnShipped(sum(b), Request{}, Caller{Domain: 1}); !errors.Is(err, api.ErrFailed) {
		// b is no program, but it is hashed before it runs: the start fails.
		t.Fatalf("spawn of b: %v, want ErrFailed (exec format)", err)
	}
	if got := temps(t, dir); len(got) != 0 {
		t.Fatalf("upload files a new service left: %v", got)
	}
}

// TestShipPolicy: with allowed directories, shipped programs are denied
// unless the cache is among them.
func TestShipPolicy(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "cache")
	s := newService(t, Config{CacheDir: dir, Allow: []string{"/usr/bin"}})
	prog := script("true")
	if _, _, err := s.PutBegin(sum(prog), uint64(len(prog)), 1, Caller{Domain: 1}); !errors.Is(err, api.ErrDenied) {
		t.Fatalf("put_begin under a policy that leaves the cache out: %v, want ErrDenied", err)
	}
	s2 := newService(t, Config{CacheDir: dir, Allow: []string{root}})
	if err := putAll(t, s2, 1, prog, 100); err != nil {
		t.Fatalf("an upload under a policy that allows the cache: %v", err)
	}
	if _, err := s.SpawnShipped(sum(prog), Request{}, Caller{Domain: 1}); !errors.Is(err, api.ErrDenied) {
		t.Fatalf("spawn of a shipped program under a policy that leaves the cache out: %v", err)
	}
	noCache := newService(t, Config{})
	if _, _, err := noCache.PutBegin(sum(prog), 1, 1, Caller{}); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("put_begin without a cache: %v, want ErrUnavailable", err)
	}
}

// BenchmarkPut10MB is the service's side of a 10 MB upload, with no
// transport: the chunks as put_data brings them, the hash and the
// writes, and put_end.
func BenchmarkPut10MB(b *testing.B) {
	s, err := New(Config{CacheDir: filepath.Join(b.TempDir(), "cache"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	body := make([]byte, 10<<20)
	b.SetBytes(int64(len(body)))
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		body[0], body[1], body[2] = byte(i), byte(i>>8), byte(i>>16)
		h := sum(body)
		b.StartTimer()
		id, _, err := s.PutBegin(h, uint64(len(body)), 1, Caller{Domain: 1})
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < len(body); off += api.MaxPutDataDataLen {
			if err := s.PutData(id, 1, uint64(off), body[off:min(off+api.MaxPutDataDataLen, len(body))]); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.PutEnd(id, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// shipOne puts b into s's cache and returns its hash.
func shipOne(t *testing.T, s *Service, b []byte) string {
	t.Helper()
	if err := putAll(t, s, 1, b, len(b)); err != nil {
		t.Fatal(err)
	}
	return sum(b)
}

// The stamp recorded at put_end is the cached file's as it stays, taken
// after the rename that gives it its name (a rename changes the change
// time): the file's first spawn does not hash it again.
func TestShipStampTakenAfterRename(t *testing.T) {
	dir := t.TempDir()
	s := newService(t, Config{CacheDir: dir, noCgroups: true})
	hash := shipOne(t, s, script("echo hi"))
	fi, err := os.Stat(filepath.Join(dir, hash))
	if err != nil {
		t.Fatal(err)
	}
	s.cache.mu.Lock()
	rec := s.cache.files[hash].stamp
	s.cache.mu.Unlock()
	if now := stampOf(fi); now != rec {
		t.Fatalf("the stamp recorded at put_end %+v differs from the cached file's %+v", rec, now)
	}
}

// A shipped program still held open for writing for a moment (by a child
// forked meanwhile, until it execs) runs once it is no longer, with
// limits (started behind the gate, whose own exec would fail) as without.
func TestShippedWaitsForWriters(t *testing.T) {
	dir := t.TempDir()
	s := newService(t, Config{CacheDir: dir, noCgroups: true})
	hash := shipOne(t, s, script("echo ran"))
	for _, r := range []Request{
		{Program: "prog"},
		{Program: "prog", CPU: 10},
		{Program: "prog", Mem: 256 << 20},
	} {
		w, err := os.OpenFile(filepath.Join(dir, hash), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(20*time.Millisecond, func() { w.Close() })
		out, e := runShipped(t, s, hash, r)
		if out != "ran\n" || e.Code != 0 {
			t.Errorf("limits cpu=%d mem=%d: %v, output %q; want the program run once the writer is gone", r.CPU, r.Mem, e, out)
		}
	}
	// One that stays open for writing is refused, and nothing is started.
	w, err := os.OpenFile(filepath.Join(dir, hash), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	n := len(s.List())
	if _, err := s.SpawnShipped(hash, Request{Program: "prog", CPU: 10}, Caller{Domain: 7}); !errors.Is(err, api.ErrFailed) ||
		!strings.Contains(err.Error(), "busy") {
		t.Fatalf("a shipped program held open for writing: %v, want failed, text file busy", err)
	}
	if len(s.List()) != n {
		t.Fatal("a refused spawn was listed")
	}
}

// TestShipOpenClose: an upload begun without its hash (PutOpen) enters
// the cache under the hash PutClose names, once its bytes match it; one
// whose bytes do not, that is ended the wrong way or given up (no
// hash) leaves nothing;
// the quotas count it as any other; and a second upload of a file the
// cache holds ends well, the file staying as it was.
func TestShipOpenClose(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	s := newService(t, Config{CacheDir: dir, MaxUploadsPerDomain: 1})
	prog := script("echo opened")
	h := sum(prog)
	open := func(owner uint64, b []byte) uint64 {
		t.Helper()
		id, err := s.PutOpen(uint64(len(b)), owner, Caller{Domain: owner})
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(b); off += 5 {
			if err := s.PutData(id, owner, uint64(off), b[off:min(off+5, len(b))]); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}

	// put_begin names the hash: without one it is refused, not opened.
	if _, _, err := s.PutBegin("", uint64(len(prog)), 1, Caller{Domain: 1}); !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("put_begin without a hash: %v, want ErrInvalid", err)
	}

	// Each domain has room for one upload in progress, opened or begun.
	id := open(1, prog)
	if _, err := s.PutOpen(10, 1, Caller{Domain: 1}); !errors.Is(err, api.ErrExhausted) {
		t.Fatalf("a second upload of one domain: %v, want ErrExhausted", err)
	}
	if err := s.PutEnd(id, 1); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "put_close") {
		t.Fatalf("put_end of an opened upload: %v, want ErrInvalid naming put_close", err)
	}
	if _, ok, _ := s.Cached(h); ok {
		t.Fatal("an upload ended by put_end entered the cache without a hash")
	}

	// The wrong hash, and no hash.
	id = open(2, prog)
	if _, err := s.PutClose(id, 2, sum([]byte("other"))); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("put_close with another file's hash: %v, want ErrInvalid about the SHA-256", err)
	}
	// No hash: the caller gives the upload up.
	id = open(2, prog)
	if present, err := s.PutClose(id, 2, ""); err != nil || present {
		t.Fatalf("put_close without a hash: %v, %v; want no error", present, err)
	}
	if _, err := s.PutClose(id, 2, h); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("put_close of a dropped upload: %v, want ErrNotFound", err)
	}

	// An upload begun with its hash is not closed by put_close.
	bid, _, err := s.PutBegin(h, uint64(len(prog)), 3, Caller{Domain: 3})
	if err != nil {
		t.Fatal(err)
	}
	s.PutData(bid, 3, 0, prog)
	if _, err := s.PutClose(bid, 3, h); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "put_end") {
		t.Fatalf("put_close of a begun upload: %v, want ErrInvalid naming put_end", err)
	}
	// But it is given up by put_close without a hash, as an opened one.
	bid, _, err = s.PutBegin(h, uint64(len(prog)), 3, Caller{Domain: 3})
	if err != nil {
		t.Fatal(err)
	}
	s.PutData(bid, 3, 0, prog[:len(prog)/2])
	if present, err := s.PutClose(bid, 3, ""); err != nil || present {
		t.Fatalf("put_close without a hash of a begun upload: %v, %v; want no error", present, err)
	}
	if err := s.PutEnd(bid, 3); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("put_end of a dropped upload: %v, want ErrNotFound", err)
	}
	if got := temps(t, dir); len(got) != 0 {
		t.Fatalf("upload files left by the refused uploads: %v", got)
	}

	// The right hash: in the cache, and it runs.
	id = open(4, prog)
	if present, err := s.PutClose(id, 4, h); err != nil || present {
		t.Fatalf("put_close: present %v, %v; want a new file", present, err)
	}
	if size, ok, _ := s.Cached(h); !ok || size != int64(len(prog)) {
		t.Fatalf("cached after put_close: %v, %d", ok, size)
	}
	if out, _ := runShipped(t, s, h, Request{Program: "opened"}); out != "opened\n" {
		t.Fatalf("output %q", out)
	}

	// The same file again: its upload ends well, and the cache keeps one.
	id = open(5, prog)
	if present, err := s.PutClose(id, 5, h); err != nil || !present {
		t.Fatalf("put_close of a file the cache holds: present %v, %v; want present", present, err)
	}
	if got := temps(t, dir); len(got) != 0 {
		t.Fatalf("upload files left: %v", got)
	}
	if st := s.CacheStats(); st.Uploads != 0 || st.Reserved != 0 || st.Files != 1 {
		t.Fatalf("cache stats %+v", st)
	}
}
