package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chanos/chanos/cluster"
	"github.com/chanos/chanos/internal/testkit"
)

// TestClusterCLI: the admin's and the machine's round trip through the
// built command: init, show (with a request), admit, join, show, revoke,
// join --revocations, show; each with --json, one document each, and the
// files it leaves with their modes.
func TestClusterCLI(t *testing.T) {
	bin := chanosBin(t)
	base := testkit.ShortDir(t)
	rootDir := filepath.Join(base, "root")
	mdir := filepath.Join(base, "m1") // the machine's monitor directory
	run := func(args ...string) result {
		t.Helper()
		r := runCmd(t, bin, mdir, args...)
		if r.status != 0 {
			t.Fatalf("chanos %s: status %d\nstdout %s\nstderr %s", strings.Join(args, " "), r.status, r.stdout, r.stderr)
		}
		return r
	}

	var initOut struct {
		Cluster, Fingerprint string
		RootDir              string `json:"root_dir"`
		RootCert             string `json:"root_cert"`
	}
	oneJSON(t, "cluster init", run("cluster", "init", "--root", rootDir, "--name", "lab", "--json").stdout, &initOut)
	if initOut.Cluster != "lab" || initOut.RootDir != rootDir || len(initOut.Fingerprint) != 64 {
		t.Fatalf("cluster init: %+v", initOut)
	}
	if r := runCmd(t, bin, mdir, "cluster", "init", "--root", rootDir, "--name", "lab"); r.status != 1 || !strings.Contains(r.stderr, "already exists") {
		t.Fatalf("second init: status %d, stderr %q", r.status, r.stderr)
	}

	req := filepath.Join(base, "m1.req")
	var show struct {
		KeyID     string `json:"key_id"`
		PublicKey string `json:"public_key"`
		Joined    bool
		Cluster   string
		Machine   string
		Serial    string
		Revoked   []string
		CredErr   string `json:"credential_error"`
	}
	oneJSON(t, "cluster show", run("cluster", "show", "--request", req, "--name", "m1", "--json").stdout, &show)
	if show.Joined || len(show.KeyID) != 32 || !strings.Contains(show.PublicKey, "BEGIN PUBLIC KEY") {
		t.Fatalf("cluster show before join: %+v", show)
	}
	keyID := show.KeyID
	fi, err := os.Stat(filepath.Join(mdir, cluster.KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("machine key after show: %v, mode %v", err, fi)
	}

	cred := filepath.Join(base, "m1.crt")
	var admit struct {
		Cluster, Machine, Serial, Out string
		KeyID                         string `json:"key_id"`
	}
	oneJSON(t, "cluster admit", run("cluster", "admit", "--root", rootDir, "--name", "m1", "--out", cred, req, "--json").stdout, &admit)
	if admit.Machine != "m1" || admit.Cluster != "lab" || admit.KeyID != keyID || admit.Out != cred {
		t.Fatalf("cluster admit: %+v (key id %s)", admit, keyID)
	}

	var join struct{ Cluster, Machine, Serial string }
	oneJSON(t, "cluster join", run("cluster", "join", "--root-cert", initOut.RootCert, cred, "--json").stdout, &join)
	if join.Machine != "m1" || join.Serial != admit.Serial {
		t.Fatalf("cluster join: %+v", join)
	}
	oneJSON(t, "cluster show", run("cluster", "show", "--json").stdout, &show)
	if !show.Joined || show.Cluster != "lab" || show.Machine != "m1" || show.Serial != admit.Serial || show.KeyID != keyID || show.CredErr != "" {
		t.Fatalf("cluster show after join: %+v", show)
	}
	// The text forms say the same.
	if out := run("cluster", "show").stdout; !strings.Contains(out, "m1") || !strings.Contains(out, admit.Serial) {
		t.Fatalf("cluster show: %q", out)
	}
	if out := run("cluster", "show", "--root", rootDir).stdout; !strings.Contains(out, admit.Serial) || !strings.Contains(out, "valid") {
		t.Fatalf("cluster show --root: %q", out)
	}

	crl := filepath.Join(base, "revoked.crl")
	var rev struct {
		Number  string
		Revoked []string
	}
	oneJSON(t, "cluster revoke", run("cluster", "revoke", "--root", rootDir, "--machine", "m1", "--out", crl, "--json").stdout, &rev)
	if rev.Number != "2" || len(rev.Revoked) != 1 || rev.Revoked[0] != admit.Serial {
		t.Fatalf("cluster revoke: %+v", rev)
	}
	oneJSON(t, "cluster join --revocations", run("cluster", "join", "--revocations", crl, "--json").stdout, &rev)
	if rev.Number != "2" || len(rev.Revoked) != 1 {
		t.Fatalf("cluster join --revocations: %+v", rev)
	}
	oneJSON(t, "cluster show", run("cluster", "show", "--json").stdout, &show)
	if len(show.Revoked) != 1 || show.Revoked[0] != admit.Serial || !strings.Contains(show.CredErr, "revoked") {
		t.Fatalf("cluster show after the revocation: %+v", show)
	}
	var rootShow struct {
		Issued []struct {
			Machine, Serial string
			Revoked         bool
		}
	}
	oneJSON(t, "cluster show --root", run("cluster", "show", "--root", rootDir, "--json").stdout, &rootShow)
	if len(rootShow.Issued) != 1 || !rootShow.Issued[0].Revoked {
		t.Fatalf("cluster show --root after the revocation: %+v", rootShow)
	}

	// An older list is refused.
	old := filepath.Join(base, "old.crl")
	run("cluster", "revoke", "--root", rootDir, "--out", old) // number 3
	run("cluster", "revoke", "--root", rootDir, "--out", crl) // number 4
	run("cluster", "join", "--revocations", crl)
	if r := runCmd(t, bin, mdir, "cluster", "join", "--revocations", old, "--json"); r.status != 1 || !strings.Contains(r.stdout, "older") {
		t.Fatalf("join of an older list: status %d, stdout %q", r.status, r.stdout)
	}

	// A key file others can read is refused, and left alone.
	if err := os.Chmod(filepath.Join(mdir, cluster.KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	var fail struct{ Error, Code string }
	r := runCmd(t, bin, mdir, "cluster", "show", "--json")
	oneJSON(t, "cluster show with a 0644 key", r.stdout, &fail)
	if r.status != 1 || !strings.Contains(fail.Error, "not private") {
		t.Fatalf("cluster show with a 0644 key: status %d, %+v", r.status, fail)
	}
}

// TestClusterUsage: a mistake on a cluster command's line prints that
// command's usage and exits 2, as JSON too with --json.
func TestClusterUsage(t *testing.T) {
	bin := chanosBin(t)
	dir := testkit.ShortDir(t)
	for _, c := range []struct {
		args  []string
		usage string
	}{
		{[]string{"cluster"}, "usage: chanos cluster COMMAND"},
		{[]string{"cluster", "frob"}, "usage: chanos cluster COMMAND"},
		{[]string{"cluster", "init", "--name", "x"}, "usage: chanos cluster init"},
		{[]string{"cluster", "admit", "--root", dir, "--name", "m1"}, "usage: chanos cluster admit"},
		{[]string{"cluster", "admit", "--root", dir, "--name", "bad name", "x"}, "usage: chanos cluster admit"},
		{[]string{"cluster", "join"}, "usage: chanos cluster join"},
		{[]string{"cluster", "revoke", "--bogus"}, "usage: chanos cluster revoke"},
		{[]string{"cluster", "show", "--root", dir, "--dir", dir}, "usage: chanos cluster show"},
	} {
		r := runCmd(t, bin, dir, c.args...)
		if r.status != 2 || !strings.Contains(r.stderr, c.usage) {
			t.Errorf("chanos %s: status %d, stderr %q; want 2 and %q", strings.Join(c.args, " "), r.status, r.stderr, c.usage)
		}
		var fail struct{ Error, Code string }
		r = runCmd(t, bin, dir, append(c.args, "--json")...)
		oneJSON(t, "chanos "+strings.Join(c.args, " ")+" --json", r.stdout, &fail)
		if r.status != 2 || fail.Code != "usage" {
			t.Errorf("chanos %s --json: status %d, %+v", strings.Join(c.args, " "), r.status, fail)
		}
	}
	r := runCmd(t, bin, dir, "cluster", "admit", "-h")
	if r.status != 0 || !strings.HasPrefix(r.stdout, "usage: chanos cluster admit") {
		t.Errorf("chanos cluster admit -h: status %d, stdout %q", r.status, r.stdout)
	}
}
