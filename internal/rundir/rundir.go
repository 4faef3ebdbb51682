// Package rundir finds and checks the directory where a machine's monitor
// keeps its socket. The monitor and the domains must agree on it, so the
// rule lives here, once.
package rundir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// EnvVar overrides the default directory.
const EnvVar = "CHANOS_DIR"

// SocketName is the monitor's socket inside the directory.
const SocketName = "monitor.sock"

// ErrUnsafe: the directory exists but others could reach into it.
var ErrUnsafe = errors.New("directory is not private")

// Resolve returns the directory to use: flag when not empty, else
// $CHANOS_DIR, else $XDG_RUNTIME_DIR/chanos, else chanos-UID in the
// temporary directory. The result is absolute.
func Resolve(flag string) (string, error) {
	dir := flag
	if dir == "" {
		dir = os.Getenv(EnvVar)
	}
	if dir == "" {
		if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
			dir = filepath.Join(x, "chanos")
		}
	}
	if dir == "" {
		dir = filepath.Join(os.TempDir(), fmt.Sprintf("chanos-%d", os.Getuid()))
	}
	return filepath.Abs(dir)
}

// Socket returns the monitor's socket path in dir.
func Socket(dir string) string { return filepath.Join(dir, SocketName) }

// Ensure creates dir with mode 0700 if it is missing, and checks that it
// is a directory owned by this user that no one else can enter: the
// socket inside is only as private as the directory.
func Ensure(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return Check(dir)
}

// Check verifies, without creating anything, that dir is a private
// directory of this user.
func Check(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: %w: not a directory", dir, ErrUnsafe)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%s: %w: owned by uid %d, not %d", dir, ErrUnsafe, st.Uid, os.Getuid())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s: %w: mode %04o lets others in (want 0700)", dir, ErrUnsafe, perm)
	}
	return nil
}
