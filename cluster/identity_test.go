package cluster

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/monitor"
)

// monitorDir returns a new private monitor directory.
func monitorDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(testkit.ShortDir(t), "m")
	if err := monitor.PrepareDir(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestKeyFile: the machine's key is made once, mode 0600, and read back
// the same; a key file others can read, a link, or a corrupt file is
// refused with a clear error and left as it is.
func TestKeyFile(t *testing.T) {
	dir := monitorDir(t)
	if _, err := LoadKey(dir); !errors.Is(err, ErrNoKey) {
		t.Fatalf("LoadKey before any key: %v, want ErrNoKey", err)
	}
	k1, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, KeyFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %04o, want 0600", fi.Mode().Perm())
	}
	k2, err := LoadOrCreateKey(dir)
	if err != nil || !k1.Equal(k2) {
		t.Fatalf("second LoadOrCreateKey: %v, same key %v", err, k1.Equal(k2))
	}

	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreateKey(dir); !errors.Is(err, ErrKeyPermissions) {
			t.Fatalf("key file mode %04o: %v, want ErrKeyPermissions", mode, err)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}

	// A symbolic link to a private key is refused too: it could point
	// anywhere.
	link := monitorDir(t)
	if err := os.Symlink(path, filepath.Join(link, KeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(link); !errors.Is(err, ErrKeyPermissions) {
		t.Fatalf("key file that is a link: %v, want ErrKeyPermissions", err)
	}

	for _, junk := range [][]byte{[]byte("not a key"), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), nil} {
		bad := monitorDir(t)
		if err := os.WriteFile(filepath.Join(bad, KeyFile), junk, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreateKey(bad); !errors.Is(err, ErrKeyCorrupt) {
			t.Fatalf("corrupt key file %q: %v, want ErrKeyCorrupt", junk, err)
		}
		if b, _ := os.ReadFile(filepath.Join(bad, KeyFile)); string(b) != string(junk) {
			t.Fatal("a corrupt key file was replaced")
		}
	}

	// A directory others can enter is refused before any key is made.
	open := filepath.Join(testkit.ShortDir(t), "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(open); !errors.Is(err, monitor.ErrUnsafeDir) {
		t.Fatalf("key in a directory of mode 0755: %v, want ErrUnsafeDir", err)
	}
	if _, err := os.Stat(filepath.Join(open, KeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a key was made in a directory of mode 0755: %v", err)
	}
}

// TestRootFiles: the root's key is 0600 and its directory 0700; a second
// init in the same place is refused; a root key others could read is
// refused.
func TestRootFiles(t *testing.T) {
	r := newRoot(t, "lab")
	for name, want := range map[string]os.FileMode{r.Dir(): 0o700, filepath.Join(r.Dir(), RootKeyFile): 0o600} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", name, fi.Mode().Perm(), want)
		}
	}
	if _, err := InitRoot(r.Dir(), "lab", 0); !errors.Is(err, ErrRootExists) {
		t.Fatalf("second init: %v, want ErrRootExists", err)
	}
	if _, err := InitRoot(filepath.Join(t.TempDir(), "x"), "bad name", 0); !errors.Is(err, ErrBadName) {
		t.Fatalf("init with a bad name: %v, want ErrBadName", err)
	}
	if _, err := LoadRoot(r.Dir()); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(r.Dir(), RootKeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRoot(r.Dir()); !errors.Is(err, ErrKeyPermissions) {
		t.Fatalf("root key of mode 0644: %v, want ErrKeyPermissions", err)
	}
}

// TestAdmission: a request proves the key, a tampered one is refused;
// Join takes only a credential for this machine's key from the root that
// comes with it (or the root pinned), and LoadIdentity reads back what it
// installed.
func TestAdmission(t *testing.T) {
	root := newRoot(t, "lab")
	dir := monitorDir(t)
	key, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	req, err := Request(key, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	pub, suggested, err := ParseAdmitRequest(req)
	if err != nil || !pub.Equal(key.Public()) || suggested != "alpha" {
		t.Fatalf("ParseAdmitRequest(request): %v, %q, same key %v", err, suggested, pub.Equal(key.Public()))
	}
	if pub, _, err := ParseAdmitRequest(PublicKeyPEM(key.Public().(ed25519.PublicKey))); err != nil || !pub.Equal(key.Public()) {
		t.Fatalf("ParseAdmitRequest(public key): %v", err)
	}
	// Flip a bit of the request's body: its signature no longer holds.
	blk := decodePEM(t, req)
	blk[len(blk)/3] ^= 1
	if _, _, err := ParseAdmitRequest(encodePEM(pemRequest, blk)); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("tampered request: %v, want ErrBadRequest", err)
	}

	now := time.Now()
	cred, err := root.Admit(pub, "alpha", now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if cred.Subject.CommonName != "alpha" || cred.Subject.Organization[0] != "lab" || cred.SerialNumber.Sign() <= 0 {
		t.Fatalf("credential subject %v serial %v", cred.Subject, cred.SerialNumber)
	}

	// Another machine's credential does not install here.
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	otherCred, err := root.Admit(otherKey.Public().(ed25519.PublicKey), "beta", now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Join(dir, root.Bundle(otherCred), nil); !errors.Is(err, ErrCredential) {
		t.Fatalf("join with another machine's credential: %v, want ErrCredential", err)
	}
	// Nor one that comes with a root other than the pinned one.
	other := newRoot(t, "lab")
	if _, err := Join(dir, root.Bundle(cred), other.Certificate()); !errors.Is(err, ErrCredential) {
		t.Fatalf("join with a pinned root that did not issue it: %v, want ErrCredential", err)
	}
	if _, err := LoadIdentity(dir); !errors.Is(err, ErrNotJoined) {
		t.Fatalf("LoadIdentity after refused joins: %v, want ErrNotJoined", err)
	}
	id, err := Join(dir, root.Bundle(cred), root.Certificate())
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if back.Machine() != "alpha" || back.Cluster() != "lab" || back.KeyID() != id.KeyID() || !back.Certificate().Equal(cred) {
		t.Fatalf("LoadIdentity: %s of %s, key %s", back.Machine(), back.Cluster(), back.KeyID())
	}
	issued, err := root.Issued()
	if err != nil || len(issued) != 2 {
		t.Fatalf("the root's issued credentials: %d, %v; want 2", len(issued), err)
	}
	if s, err := root.SerialsOf("alpha"); err != nil || len(s) != 1 || s[0].Cmp(cred.SerialNumber) != 0 {
		t.Fatalf("SerialsOf(alpha): %v, %v", s, err)
	}
}

// TestDomainsCannotReachKey: the domains' API (package chanos; the C
// library has no TLS at all) does not import this package, so no
// call a domain makes can hand it the machine's key; the key file itself
// is 0600 (TestKeyFile), closed to other users.
func TestDomainsCannotReachKey(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/chanos/chanos/chanos").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list printed no dependencies")
	}
	for _, d := range deps {
		if d == "github.com/chanos/chanos/cluster" {
			t.Errorf("package chanos depends on %s", d)
		}
	}
}
