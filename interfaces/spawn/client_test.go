package spawn

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The hash cache gives a kept hash only for the file as it was: a
// rewrite of the same size, a chmod or a replacement is hashed again,
// and a file changed just before it was hashed is not kept at all.
func TestHashCache(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "prog")
	write := func(b string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(b), 0o755); err != nil {
			t.Fatal(err)
		}
		// The kernel's timestamps come from a coarse clock: a tick
		// apart, two writes have different change times.
		time.Sleep(20 * time.Millisecond)
	}
	hc := hashCache{max: 4}
	check := func(what, content string, wantHashed int) {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		h, n, err := hashVia(&hc, f)
		sum := sha256.Sum256([]byte(content))
		if err != nil || h != hex.EncodeToString(sum[:]) || n != int64(len(content)) {
			t.Fatalf("%s: %s, %d, %v; want the hash of %q", what, h, n, err, content)
		}
		if hc.hashes != wantHashed {
			t.Fatalf("%s: %d files hashed, want %d", what, hc.hashes, wantHashed)
		}
	}

	// Changed within the racy window before the hash: hashed each time.
	write("first")
	check("fresh", "first", 1)
	check("fresh again", "first", 2)

	old := racyWindow
	racyWindow = 0
	defer func() { racyWindow = old }()
	check("settled", "first", 3)
	check("kept", "first", 3)
	write("other")
	check("rewritten, same size", "other", 4)
	check("kept again", "other", 4)
	if err := os.Chmod(path, 0o700); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	check("chmod", "other", 5)
	if err := os.WriteFile(path+".new", []byte("third!"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	check("replaced", "third!", 6)
	check("replaced, kept", "third!", 6)
}

// hashVia is what Ship does with hc for f: the kept hash if f has not
// changed since, else the one computed now, kept if f did not change
// while it was read either.
func hashVia(hc *hashCache, f *os.File) (string, int64, error) {
	st, sum, size, ok, err := hc.lookup(f)
	if err != nil || ok {
		return sum, size, err
	}
	began := time.Now()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	sum = hex.EncodeToString(h.Sum(nil))
	hc.remember(f, st, began, n, sum)
	return sum, n, nil
}
