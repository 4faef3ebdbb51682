package ratelog

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// output is a log's text, safe for the timers' goroutines.
type output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *output) count(subs ...string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for line := range strings.SplitSeq(o.b.String(), "\n") {
		all := line != ""
		for _, s := range subs {
			all = all && strings.Contains(line, s)
		}
		if all {
			n++
		}
	}
	return n
}

// A line per interval per kind; the count of those left out comes on a
// line of its own when the interval ends without another; kinds made of
// errors' texts are bounded; Close logs what is pending.
func TestLog(t *testing.T) {
	out := &output{}
	l := New(slog.New(slog.NewTextHandler(out, nil)), 100*time.Millisecond)
	for range 100 {
		l.Log(slog.LevelWarn, "full", "refused", "n", 1)
	}
	l.Log(slog.LevelInfo, "other", "dropped")
	if n := out.count("refused"); n != 1 {
		t.Fatalf("%d lines of a kind within the interval, want 1", n)
	}
	if out.count("dropped") != 1 {
		t.Fatal("another kind was held back")
	}
	deadline := time.Now().Add(10 * time.Second)
	for out.count("refused (more of the same)", "suppressed=99", "level=WARN") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the count of the lines left out was not logged:\n%s", out.b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The next line after the interval goes out, and carries any count.
	time.Sleep(110 * time.Millisecond)
	l.Log(slog.LevelWarn, "full", "refused again")
	l.Log(slog.LevelWarn, "full", "refused again")
	if out.count("refused again") != 1 {
		t.Fatal("the line after the interval did not go out")
	}
	l.Close()
	if out.count("refused again (more of the same)", "suppressed=1") != 1 {
		t.Fatalf("Close did not log the pending count:\n%s", out.b.String())
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
