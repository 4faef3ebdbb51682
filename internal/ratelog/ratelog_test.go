package ratelog

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/chanos/chanos/internal/testkit"
)

// A line per interval per kind; the count of those left out comes on a
// line of its own when the interval ends without another; kinds made of
// errors' texts are bounded; Close logs what is pending.
func TestLog(t *testing.T) {
	out := &testkit.Output{}
	l := New(slog.New(slog.NewTextHandler(out, nil)), 100*time.Millisecond)
	for range 100 {
		l.Log(slog.LevelWarn, "full", "refused", "n", 1)
	}
	l.Log(slog.LevelInfo, "other", "dropped")
	if n := out.Count("refused"); n != 1 {
		t.Fatalf("%d lines of a kind within the interval, want 1", n)
	}
	if out.Count("dropped") != 1 {
		t.Fatal("another kind was held back")
	}
	deadline := time.Now().Add(10 * time.Second)
	for out.Count("refused (more of the same)", "suppressed=99", "level=WARN") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the count of the lines left out was not logged:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The next line after the interval goes out, and carries any count.
	time.Sleep(110 * time.Millisecond)
	l.Log(slog.LevelWarn, "full", "refused again")
	l.Log(slog.LevelWarn, "full", "refused again")
	if out.Count("refused again") != 1 {
		t.Fatal("the line after the interval did not go out")
	}
	l.Close()
	if out.Count("refused again (more of the same)", "suppressed=1") != 1 {
		t.Fatalf("Close did not log the pending count:\n%s", out.String())
	}
	for i := range 1000 {
		l.Log(slog.LevelWarn, KindOf("x", fmt.Errorf("reason %d", i)), "dropped")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.kinds) > MaxDynamic+3 {
		t.Fatalf("%d kinds", len(l.kinds))
	}
}
