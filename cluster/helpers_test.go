package cluster

import (
	"bytes"
	"crypto/ed25519"
	"encoding/pem"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/monitor"
)

// logBuf collects a logger's lines, safe for the concurrent writes of a
// listener's handshakes.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitLog waits until the log has a line with every one of subs.
func (l *logBuf) waitLog(t *testing.T, subs ...string) {
	t.Helper()
	testkit.Eventually(t, "a log line with "+strings.Join(subs, ", ")+" in:\n"+l.String(), func() bool {
		for _, line := range strings.Split(l.String(), "\n") {
			all := true
			for _, s := range subs {
				all = all && strings.Contains(line, s)
			}
			if all {
				return true
			}
		}
		return false
	})
}

// newRoot makes a cluster root in a new directory.
func newRoot(t *testing.T, name string) *Root {
	t.Helper()
	r, err := InitRoot(filepath.Join(t.TempDir(), "root"), name, 0)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// machine is a machine made for a test: its monitor directory, and the
// identity loaded from it.
type machine struct {
	dir string
	id  *Identity
	log logBuf
}

// newMachine makes a monitor directory with a key, admits it to root as
// name, joins it, and loads its identity back from the files.
func newMachine(t *testing.T, root *Root, name string) *machine {
	t.Helper()
	m := &machine{dir: filepath.Join(testkit.ShortDir(t), "m")}
	if err := monitor.PrepareDir(m.dir); err != nil {
		t.Fatal(err)
	}
	key, err := LoadOrCreateKey(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cred, err := root.Admit(key.Public().(ed25519.PublicKey), name, now.Add(-time.Minute), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Join(m.dir, root.Bundle(cred), nil); err != nil {
		t.Fatal(err)
	}
	if m.id, err = LoadIdentity(m.dir); err != nil {
		t.Fatal(err)
	}
	return m
}

// opts returns link options that log into the machine's buffer, with a
// short handshake timeout.
func (m *machine) opts() *Options {
	return &Options{Logger: m.log.logger(), HandshakeTimeout: 5 * time.Second}
}

// expiredMachine returns a machine of root whose credential expired a
// minute ago: Join and LoadIdentity refuse it, so the identity is put
// together by hand, as a machine that ignores its expiry would.
func expiredMachine(t *testing.T, root *Root, name string) *machine {
	t.Helper()
	m := &machine{dir: filepath.Join(testkit.ShortDir(t), "m")}
	if err := monitor.PrepareDir(m.dir); err != nil {
		t.Fatal(err)
	}
	key, err := LoadOrCreateKey(m.dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cred, err := root.Admit(key.Public().(ed25519.PublicKey), name, now.Add(-2*time.Hour), now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Join(m.dir, root.Bundle(cred), nil); err == nil {
		t.Fatal("Join took an expired credential")
	}
	// Built by hand: every constructor checks the expiry.
	m.id = &Identity{cluster: root.Cluster(), machine: name, key: key, cert: cred, root: root.Certificate(),
		Revocations: NewRevocations(root.Certificate())}
	return m
}

// listen starts a listener of m on loopback, closed when the test ends.
func (m *machine) listen(t *testing.T) *Listener {
	t.Helper()
	ln, err := Listen("127.0.0.1:0", m.id, m.opts())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// decodePEM returns the bytes of the first PEM block of b.
func decodePEM(t *testing.T, b []byte) []byte {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("no PEM block in %q", b)
	}
	return blk.Bytes
}

func encodePEM(typ string, b []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})
}
