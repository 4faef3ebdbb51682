package rundir

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestResolve(t *testing.T) {
	t.Setenv(EnvVar, "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/7")
	if d, _ := Resolve(""); d != "/run/user/7/chanos" {
		t.Errorf("xdg: %s", d)
	}
	t.Setenv(EnvVar, "/x/y")
	if d, _ := Resolve(""); d != "/x/y" {
		t.Errorf("env: %s", d)
	}
	if d, _ := Resolve("/flag"); d != "/flag" {
		t.Errorf("flag: %s", d)
	}
	t.Setenv(EnvVar, "")
	t.Setenv("XDG_RUNTIME_DIR", "")
	if d, _ := Resolve(""); filepath.Base(d) != "chanos-"+itoa(os.Getuid()) {
		t.Errorf("tmp: %s", d)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestEnsure(t *testing.T) {
	base := t.TempDir()
	d := filepath.Join(base, "run")
	if err := Ensure(d); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(d); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	os.Chmod(d, 0o755)
	if err := Ensure(d); !errors.Is(err, ErrUnsafe) {
		t.Errorf("0755 accepted: %v", err)
	}
	f := filepath.Join(base, "file")
	os.WriteFile(f, nil, 0o600)
	if err := Check(f); !errors.Is(err, ErrUnsafe) {
		t.Errorf("file accepted: %v", err)
	}
}
