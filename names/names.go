// Package names is the core of the chanos nameservice: names bound to
// irefs, held as leases by their owners, behind a small Store interface so
// that a replicated store (etcd) can replace the in-memory one.
//
// The package does no I/O of its own. The monitor serves it over the
// bundled nameservice interface (interfaces/nameservice.if); see
// docs/nameservice.md for the semantics.
package names

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/chanos/chanos/wire"
)

// Errors returned by stores; match them with errors.Is.
var (
	// ErrExists: Set was given a name that is already registered.
	ErrExists = errors.New("name already registered")
	// ErrNotFound: the name is not registered.
	ErrNotFound = errors.New("name not found")
	// ErrInvalidName: the name breaks the rules of ValidName.
	ErrInvalidName = errors.New("invalid name")
	// ErrNotOwner: Remove was asked by someone other than the name's owner.
	ErrNotOwner = errors.New("name is owned by another domain")
	// ErrWatchOverflow: a watcher fell too far behind and was dropped.
	ErrWatchOverflow = errors.New("watcher fell behind")
	// ErrClosed: the store has been closed.
	ErrClosed = errors.New("store closed")
	// ErrUnavailable: a replicated store cannot reach its quorum (etcd is
	// down, cut off or without a leader) within the operation's bound;
	// the operation may be retried later.
	ErrUnavailable = errors.New("name store unavailable")
)

// MaxNameLen is the longest name, in bytes; it equals the bound in
// interfaces/nameservice.if.
const MaxNameLen = 256

// Owner identifies who holds a name: the monitor gives each domain one,
// and releases it (removing its names) when the domain exits or dies.
type Owner uint64

// Event reports a change to a watched name.
type Event struct {
	Name    string
	Ref     wire.Iref
	Removed bool
}

// Store is a nameservice back end. All methods are safe for concurrent use.
type Store interface {
	// Set registers name for owner. A taken name is ErrExists, never an
	// overwrite.
	Set(ctx context.Context, name string, ref wire.Iref, owner Owner) error
	// Get looks name up.
	Get(ctx context.Context, name string) (wire.Iref, error)
	// WaitFor returns name's iref as soon as it is registered, or ctx's
	// error when ctx ends first.
	WaitFor(ctx context.Context, name string) (wire.Iref, error)
	// Count returns the number of names of class (see Class).
	Count(ctx context.Context, class string) (uint64, error)
	// Remove removes name, which owner must hold.
	Remove(ctx context.Context, name string, owner Owner) error
	// List returns, sorted, up to limit names that start with prefix and
	// sort after after ("" for the first page); more reports whether
	// further names follow.
	List(ctx context.Context, prefix, after string, limit int) (names []string, more bool, err error)
	// Watch streams the sets and removes of names starting with prefix
	// that happen after it returns, until ctx ends or Stop is called.
	Watch(ctx context.Context, prefix string) (*Watcher, error)
	// Release removes every name owner holds, as when its domain dies.
	Release(ctx context.Context, owner Owner) error
	// Transfer makes to the owner of name, which from must hold, as when
	// an export is handed over to another domain: the name stays
	// registered, to the same iref, and no longer goes with from.
	Transfer(ctx context.Context, name string, from, to Owner) error
}

// ValidName checks a name: 1 to MaxNameLen bytes of printable ASCII
// without spaces (0x21 to 0x7e).
func ValidName(name string) error {
	if len(name) == 0 || len(name) > MaxNameLen {
		return fmt.Errorf("%w: %q is %d bytes; names are 1 to %d bytes", ErrInvalidName, truncate(name), len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: %q has byte 0x%02x at %d; names are printable ASCII without spaces", ErrInvalidName, truncate(name), c, i)
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Class returns the class of a name: the part before its last '.' when what
// follows is a non-empty run of digits (spawnd.0 and spawnd.12 are of class
// spawnd), and otherwise the name itself.
func Class(name string) string {
	i := strings.LastIndexByte(name, '.')
	if i < 0 || i == len(name)-1 {
		return name
	}
	for _, c := range name[i+1:] {
		if c < '0' || c > '9' {
			return name
		}
	}
	return name[:i]
}

// Watcher is a subscription to changes. Events arrive on C in the order the
// store applied them; C is closed when the watch ends, and Err then says
// why (nil after Stop or the end of the watch's context).
type Watcher struct {
	C    <-chan Event
	c    chan Event
	stop func()
	done chan struct{} // closed when the watch ends, for whatever reason
	err  error         // set before c is closed
}

// Stop ends the watch and closes C. It is safe to call more than once.
func (w *Watcher) Stop() { w.stop() }

// Err reports why C was closed; call it after C is closed.
func (w *Watcher) Err() error { return w.err }
