// Package storetest is the behaviour every names.Store must show, as one
// table of tests that any store runs: names.Memory runs it, and so does
// the etcd store (cluster/etcd). Only tests may import it.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// Store is a store under test: one with a Close that ends its waits and
// watches.
type Store interface {
	names.Store
	Close() error
}

// Ref is the iref the tests register under number n.
func Ref(n uint64) wire.Iref { return wire.Iref{Machine: 1, Export: n, Token: [16]byte{byte(n)}} }

// Run runs the table against fresh, empty stores that open makes; each
// store is closed by the test that got it, or when that test ends.
func Run(t *testing.T, open func(t *testing.T) Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s Store)
	}{
		{"SetGetRemove", setGetRemove},
		{"ValidName", validName},
		{"ClassAndCount", classAndCount},
		{"WaitFor", waitFor},
		{"List", list},
		{"WatchAndRelease", watchAndRelease},
		{"WatchOverflow", watchOverflow},
		{"CloseEndsWaitsAndWatches", closeEnds},
		{"Transfer", transfer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { s.Close() })
			tc.fn(t, s)
		})
	}
}

func setGetRemove(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	if err := s.Set(ctx, "kv", Ref(1), 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Set(ctx, "kv", Ref(2), 8); !errors.Is(err, names.ErrExists) {
		t.Fatalf("second set: %v, want ErrExists", err)
	}
	if r, err := s.Get(ctx, "kv"); err != nil || r != Ref(1) {
		t.Fatalf("get = %v, %v", r, err)
	}
	if err := s.Remove(ctx, "kv", 8); !errors.Is(err, names.ErrNotOwner) {
		t.Fatalf("remove by other: %v", err)
	}
	if err := s.Remove(ctx, "kv", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "kv"); !errors.Is(err, names.ErrNotFound) {
		t.Fatalf("get after remove: %v", err)
	}
	if err := s.Remove(ctx, "kv", 7); !errors.Is(err, names.ErrNotFound) {
		t.Fatalf("remove twice: %v", err)
	}
	// A removed name can be set again, by anyone.
	if err := s.Set(ctx, "kv", Ref(3), 8); err != nil {
		t.Fatalf("set after remove: %v", err)
	}
	if r, err := s.Get(ctx, "kv"); err != nil || r != Ref(3) {
		t.Fatalf("get after set again = %v, %v", r, err)
	}
}

// transfer: a name passes to another owner, keeping its iref; the old
// owner can no longer remove or release it, the new one can.
func transfer(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	if err := s.Set(ctx, "gate", Ref(4), 7); err != nil {
		t.Fatal(err)
	}
	if err := s.Transfer(ctx, "gate", 8, 9); !errors.Is(err, names.ErrNotOwner) {
		t.Fatalf("transfer by one who does not hold it: %v, want ErrNotOwner", err)
	}
	if err := s.Transfer(ctx, "none", 7, 9); !errors.Is(err, names.ErrNotFound) {
		t.Fatalf("transfer of a name not set: %v, want ErrNotFound", err)
	}
	if err := s.Transfer(ctx, "gate", 7, 9); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Get(ctx, "gate"); err != nil || r != Ref(4) {
		t.Fatalf("get after transfer = %v, %v", r, err)
	}
	if err := s.Remove(ctx, "gate", 7); !errors.Is(err, names.ErrNotOwner) {
		t.Fatalf("remove by the old owner: %v, want ErrNotOwner", err)
	}
	if err := s.Release(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "gate"); err != nil {
		t.Fatalf("the name after its old owner's release: %v", err)
	}
	if err := s.Release(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "gate"); !errors.Is(err, names.ErrNotFound) {
		t.Fatalf("the name after its new owner's release: %v, want ErrNotFound", err)
	}
}

func validName(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	for _, bad := range []string{"", "a b", "tab\t", "nl\n", "\x7f", strings.Repeat("x", names.MaxNameLen+1)} {
		if err := s.Set(ctx, bad, Ref(1), 1); !errors.Is(err, names.ErrInvalidName) {
			t.Errorf("Set(%q) = %v, want ErrInvalidName", bad, err)
		}
		if _, err := s.WaitFor(ctx, bad); !errors.Is(err, names.ErrInvalidName) {
			t.Errorf("WaitFor(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	long := strings.Repeat("x", names.MaxNameLen)
	if err := s.Set(ctx, long, Ref(1), 1); err != nil {
		t.Errorf("name of %d bytes: %v", names.MaxNameLen, err)
	}
	if r, err := s.Get(ctx, long); err != nil || r != Ref(1) {
		t.Errorf("get name of %d bytes = %v, %v", names.MaxNameLen, r, err)
	}
}

func classAndCount(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	for i := 0; i < 3; i++ {
		if err := s.Set(ctx, fmt.Sprintf("spawnd.%d", i), Ref(uint64(i)), 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Set(ctx, "spawnd", Ref(9), 1); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Count(ctx, "spawnd"); err != nil || n != 4 {
		t.Errorf("count = %d, %v; want 4", n, err)
	}
	if err := s.Remove(ctx, "spawnd.1", 1); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Count(ctx, "spawnd"); err != nil || n != 3 {
		t.Errorf("count after remove = %d, %v; want 3", n, err)
	}
	if n, err := s.Count(ctx, "nothing"); err != nil || n != 0 {
		t.Errorf("count of unknown class = %d, %v", n, err)
	}
}

func waitFor(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	type result struct {
		ref wire.Iref
		err error
	}
	got := make(chan result, 1)
	go func() {
		r, err := s.WaitFor(ctx, "late")
		got <- result{r, err}
	}()
	// Whether the WaitFor has begun to wait or not, it must see the set.
	time.Sleep(20 * time.Millisecond)
	if err := s.Set(ctx, "late", Ref(3), 1); err != nil {
		t.Fatal(err)
	}
	if r := testkit.Await(t, "the WaitFor of late", got); r.err != nil || r.ref != Ref(3) {
		t.Fatalf("waited = %v, %v", r.ref, r.err)
	}
	// Already there: returns at once.
	if r, err := s.WaitFor(ctx, "late"); err != nil || r != Ref(3) {
		t.Fatalf("WaitFor existing = %v, %v", r, err)
	}
	// Deadline: an error that matches the context's.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.WaitFor(cctx, "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor never = %v", err)
	}
}

func list(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	for _, n := range []string{"b.2", "a", "b.1", "b.3", "c", "b.10"} {
		if err := s.Set(ctx, n, Ref(1), 1); err != nil {
			t.Fatal(err)
		}
	}
	page, more, _ := s.List(ctx, "b.", "", 2)
	if fmt.Sprint(page) != "[b.1 b.10]" || !more {
		t.Fatalf("page 1 = %v %v", page, more)
	}
	page, more, _ = s.List(ctx, "b.", page[len(page)-1], 2)
	if fmt.Sprint(page) != "[b.2 b.3]" || more {
		t.Fatalf("page 2 = %v %v", page, more)
	}
	page, more, _ = s.List(ctx, "", "", 100)
	if fmt.Sprint(page) != "[a b.1 b.10 b.2 b.3 c]" || more {
		t.Fatalf("all = %v %v", page, more)
	}
	page, _, _ = s.List(ctx, "b.", "a", 10) // after sorts before the prefix
	if len(page) != 4 {
		t.Fatalf("after before prefix = %v", page)
	}
	if _, _, err := s.List(ctx, "", "", 0); err == nil {
		t.Fatal("limit 0 accepted")
	}
}

func watchAndRelease(t *testing.T, s Store) {
	ctx, cancel := context.WithCancel(testkit.Context(t))
	w, err := s.Watch(ctx, "svc.")
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range []struct {
		name  string
		ref   uint64
		owner names.Owner
	}{{"svc.a", 1, 5}, {"other", 2, 5}, {"svc.b", 3, 6}} {
		if err := s.Set(ctx, set.name, Ref(set.ref), set.owner); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Release(ctx, 5); err != nil { // removes svc.a and other
		t.Fatal(err)
	}
	want := []names.Event{{Name: "svc.a", Ref: Ref(1)}, {Name: "svc.b", Ref: Ref(3)}, {Name: "svc.a", Ref: Ref(1), Removed: true}}
	for _, ev := range want {
		if got := testkit.Await(t, "a watch event", w.C); got != ev {
			t.Fatalf("event = %+v, want %+v", got, ev)
		}
	}
	if _, err := s.Get(ctx, "other"); !errors.Is(err, names.ErrNotFound) {
		t.Fatalf("other after release: %v", err)
	}
	if r, err := s.Get(ctx, "svc.b"); err != nil || r != Ref(3) {
		t.Fatalf("svc.b after release of another owner = %v, %v", r, err)
	}
	cancel()
	for ev := range w.C {
		t.Fatalf("event after cancel: %+v", ev)
	}
	if w.Err() != nil {
		t.Fatalf("Err after cancel = %v", w.Err())
	}
}

// overflowSets is more sets than any store's watcher may fall behind by
// (1024 for both stores).
const overflowSets = 1100

func watchOverflow(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	w, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	// Concurrent sets, so that a replicated store is quick about it; the
	// watcher reads nothing until they are done.
	const workers = 16
	errc := make(chan error, workers)
	for k := range workers {
		go func() {
			for i := k; i < overflowSets; i += workers {
				if err := s.Set(ctx, fmt.Sprintf("n.%d", i), Ref(1), 1); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range workers {
		if err := testkit.Await(t, "the sets", errc); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for range w.C {
		n++
	}
	if n >= overflowSets || !errors.Is(w.Err(), names.ErrWatchOverflow) {
		t.Fatalf("got %d events of %d, err %v", n, overflowSets, w.Err())
	}
	w.Stop() // after the drop: harmless
}

func closeEnds(t *testing.T, s Store) {
	ctx := testkit.Context(t)
	w, err := s.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := s.WaitFor(ctx, "x")
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // most likely waiting by now; either way it must end
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Await(t, "the WaitFor's end", errc); !errors.Is(err, names.ErrClosed) {
		t.Fatalf("WaitFor after Close = %v", err)
	}
	for range w.C {
	}
	if !errors.Is(w.Err(), names.ErrClosed) {
		t.Fatalf("watch after Close: err %v", w.Err())
	}
	if err := s.Set(ctx, "y", Ref(1), 1); !errors.Is(err, names.ErrClosed) {
		t.Fatalf("Set after Close = %v", err)
	}
	if _, err := s.Get(ctx, "y"); !errors.Is(err, names.ErrClosed) {
		t.Fatalf("Get after Close = %v", err)
	}
}
