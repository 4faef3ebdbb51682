package names

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/wire"
)

func ref(n uint64) wire.Iref { return wire.Iref{Machine: 1, Export: n, Token: [16]byte{byte(n)}} }

func TestSetGetRemove(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	if err := m.Set(ctx, "kv", ref(1), 7); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(ctx, "kv", ref(2), 8); !errors.Is(err, ErrExists) {
		t.Fatalf("second set: %v, want ErrExists", err)
	}
	if r, err := m.Get(ctx, "kv"); err != nil || r != ref(1) {
		t.Fatalf("get = %v, %v", r, err)
	}
	if err := m.Remove(ctx, "kv", 8); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("remove by other: %v", err)
	}
	if err := m.Remove(ctx, "kv", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, "kv"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after remove: %v", err)
	}
	if err := m.Remove(ctx, "kv", 7); !errors.Is(err, ErrNotFound) {
		t.Fatalf("remove twice: %v", err)
	}
}

func TestValidName(t *testing.T) {
	for _, bad := range []string{"", "a b", "tab\t", "nl\n", "\x7f", string(make([]byte, MaxNameLen+1))} {
		if err := m().Set(context.Background(), bad, ref(1), 1); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Set(%q) = %v, want ErrInvalidName", bad, err)
		}
	}
	long := make([]byte, MaxNameLen)
	for i := range long {
		long[i] = 'x'
	}
	if err := m().Set(context.Background(), string(long), ref(1), 1); err != nil {
		t.Errorf("name of %d bytes: %v", MaxNameLen, err)
	}
}

func m() *Memory { return NewMemory() }

func TestClassAndCount(t *testing.T) {
	for name, class := range map[string]string{
		"spawnd.0": "spawnd", "spawnd.12": "spawnd", "spawnd": "spawnd", "a.b": "a.b",
		"a.b.3": "a.b", "x.": "x.", ".5": "", "v1.2x": "v1.2x",
	} {
		if got := Class(name); got != class {
			t.Errorf("Class(%q) = %q, want %q", name, got, class)
		}
	}
	ctx := context.Background()
	s := NewMemory()
	for i := 0; i < 3; i++ {
		if err := s.Set(ctx, fmt.Sprintf("spawnd.%d", i), ref(uint64(i)), 1); err != nil {
			t.Fatal(err)
		}
	}
	s.Set(ctx, "spawnd", ref(9), 1)
	if n, _ := s.Count(ctx, "spawnd"); n != 4 {
		t.Errorf("count = %d, want 4", n)
	}
	s.Remove(ctx, "spawnd.1", 1)
	if n, _ := s.Count(ctx, "spawnd"); n != 3 {
		t.Errorf("count after remove = %d, want 3", n)
	}
	if n, _ := s.Count(ctx, "nothing"); n != 0 {
		t.Errorf("count of unknown class = %d", n)
	}
}

func TestWaitFor(t *testing.T) {
	ctx := context.Background()
	s := NewMemory()
	got := make(chan wire.Iref)
	go func() {
		r, err := s.WaitFor(ctx, "late")
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	waiting(t, s, "late") // the blocking path, not the lookup
	s.Set(ctx, "late", ref(3), 1)
	if r := <-got; r != ref(3) {
		t.Fatalf("waited ref = %v", r)
	}
	// Already there: returns at once.
	if r, err := s.WaitFor(ctx, "late"); err != nil || r != ref(3) {
		t.Fatalf("WaitFor existing = %v, %v", r, err)
	}
	// Deadline: an error that matches the context's, and no waiter left.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.WaitFor(cctx, "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitFor never = %v", err)
	}
	if len(s.waiters) != 0 {
		t.Fatalf("waiters left: %v", s.waiters)
	}
}

func TestList(t *testing.T) {
	ctx := context.Background()
	s := NewMemory()
	for _, n := range []string{"b.2", "a", "b.1", "b.3", "c", "b.10"} {
		s.Set(ctx, n, ref(1), 1)
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

func TestWatchAndRelease(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := NewMemory()
	w, err := s.Watch(ctx, "svc.")
	if err != nil {
		t.Fatal(err)
	}
	s.Set(ctx, "svc.a", ref(1), 5)
	s.Set(ctx, "other", ref(2), 5)
	s.Set(ctx, "svc.b", ref(3), 6)
	s.Release(ctx, 5) // removes svc.a and other
	want := []Event{{"svc.a", ref(1), false}, {"svc.b", ref(3), false}, {"svc.a", ref(1), true}}
	for _, ev := range want {
		if got := <-w.C; got != ev {
			t.Fatalf("event = %+v, want %+v", got, ev)
		}
	}
	if _, err := s.Get(ctx, "other"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other after release: %v", err)
	}
	cancel()
	if _, ok := <-w.C; ok {
		t.Fatal("event after cancel")
	}
	if w.Err() != nil {
		t.Fatalf("Err after cancel = %v", w.Err())
	}
}

func TestWatchOverflow(t *testing.T) {
	ctx := context.Background()
	s := NewMemory()
	w, _ := s.Watch(ctx, "")
	for i := 0; i <= watchBuffer; i++ {
		s.Set(ctx, fmt.Sprintf("n.%d", i), ref(1), 1)
	}
	n := 0
	for range w.C {
		n++
	}
	if n != watchBuffer || !errors.Is(w.Err(), ErrWatchOverflow) {
		t.Fatalf("got %d events, err %v", n, w.Err())
	}
	w.Stop() // after the drop: harmless
}

func TestCloseEndsWaitsAndWatches(t *testing.T) {
	before := runtime.NumGoroutine()
	s := NewMemory()
	w, _ := s.Watch(context.Background(), "")
	errc := make(chan error)
	go func() {
		_, err := s.WaitFor(context.Background(), "x")
		errc <- err
	}()
	waiting(t, s, "x")
	s.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("WaitFor after Close = %v", err)
	}
	if _, ok := <-w.C; ok || !errors.Is(w.Err(), ErrClosed) {
		t.Fatalf("watch after Close: err %v", w.Err())
	}
	if err := s.Set(context.Background(), "y", ref(1), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Set after Close = %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("goroutines: %d before, %d after", before, n)
	}
}

// waiting waits until a WaitFor of name has registered with s.
func waiting(t *testing.T, s *Memory, name string) {
	t.Helper()
	testkit.Eventually(t, "a WaitFor of "+name, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.waiters[name]) > 0
	})
}
