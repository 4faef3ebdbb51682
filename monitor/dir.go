package monitor

import (
	"fmt"

	"github.com/chanos/chanos/internal/rundir"
)

// SocketName is the name of the monitor's socket inside its directory.
const SocketName = rundir.SocketName

// EnvDir is the environment variable that names the monitor's directory
// when no flag does.
const EnvDir = rundir.EnvVar

// ErrUnsafeDir is matched by the errors of CheckDir and PrepareDir for a
// directory the monitor refuses to use: not a directory (a symbolic link
// included), owned by another user, or open to its group or to others.
var ErrUnsafeDir = rundir.ErrUnsafe

// Dir returns the directory of this user's monitor, where its socket
// lives: the first of flagValue (a --dir flag), the environment variable
// CHANOS_DIR, $XDG_RUNTIME_DIR/chanos and os.TempDir()/chanos-UID that is
// set, made absolute. The monitor and the domains (package chanos, through
// internal/rundir, which holds the rule) agree on it without
// configuration. Dir only computes the path; PrepareDir creates and checks
// it, CheckDir checks it.
func Dir(flagValue string) (string, error) {
	dir, err := rundir.Resolve(flagValue)
	if err != nil {
		return "", fmt.Errorf("monitor directory %q: %w", flagValue, err)
	}
	return dir, nil
}

// SocketPath returns the path of the monitor's socket in dir.
func SocketPath(dir string) string { return rundir.Socket(dir) }

// PrepareDir creates dir (and missing parents) with mode 0700 if it does
// not exist, then checks it as CheckDir does.
func PrepareDir(dir string) error {
	if err := rundir.Ensure(dir); err != nil {
		return fmt.Errorf("monitor directory: %w", err)
	}
	return nil
}

// CheckDir checks that dir is safe to hold the monitor's socket: a real
// directory (not a symbolic link), owned by the calling user, with no
// permission bits for its group or for others, since anyone who could
// write to it could put their own socket in place of the monitor's. The
// error matches ErrUnsafeDir when dir exists but fails the check.
func CheckDir(dir string) error {
	if err := rundir.Check(dir); err != nil {
		return fmt.Errorf("monitor directory: %w", err)
	}
	return nil
}
