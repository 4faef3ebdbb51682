// Package ratelog logs each kind of event at most once an interval, and
// counts the lines it leaves out: the next line of the kind carries the
// count (suppressed=N), or, when none comes by the end of the interval, a
// line of its own ("... (more of the same)"). A peer that floods a service
// with requests it refuses thus costs a line a second per kind, not a line
// each, and no count is lost.
package ratelog

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// MaxDynamic bounds the kinds made of errors' texts (KindOf) that a Log
// tells apart; the others share one, "~other".
const MaxDynamic = 64

// Log is a rate-limited log. Its zero value is not usable: see New.
type Log struct {
	log      *slog.Logger
	interval time.Duration

	mu      sync.Mutex
	kinds   map[string]*kind
	dynamic int // kinds made by KindOf
	closed  bool
}

type kind struct {
	next       time.Time // no line of the kind before then
	suppressed int       // lines left out since the last one
	level      slog.Level
	msg        string      // the last one left out's message
	flush      *time.Timer // logs the count once the interval ends
}

// New returns a Log that writes to log, a line per kind per interval.
func New(log *slog.Logger, interval time.Duration) *Log {
	return &Log{log: log, interval: interval, kinds: map[string]*kind{}}
}

// KindOf makes a kind of prefix and an error's text, cut short: events
// told apart by what went wrong, of which a Log keeps MaxDynamic.
func KindOf(prefix string, err error) string {
	k := "~" + prefix + " " + err.Error()
	if len(k) > 96 {
		k = k[:96]
	}
	return k
}

// Log logs msg with args at level, with the attribute kind, unless a line
// of kind went out less than an interval ago; then it only counts it. The
// kinds should be few (a fixed set, or made by KindOf).
func (l *Log) Log(level slog.Level, kindName, msg string, args ...any) {
	l.LogTo(l.log, level, kindName, msg, args...)
}

// LogTo is Log through log, a logger with attributes of the event's own
// (the line of the count left out, if any, goes through the Log's).
func (l *Log) LogTo(log *slog.Logger, level slog.Level, kindName, msg string, args ...any) {
	now := time.Now()
	l.mu.Lock()
	k := l.kinds[kindName]
	if k == nil {
		if strings.HasPrefix(kindName, "~") {
			if l.dynamic >= MaxDynamic {
				kindName = "~other"
				k = l.kinds[kindName]
			} else {
				l.dynamic++
			}
		}
		if k == nil {
			k = &kind{}
			l.kinds[kindName] = k
		}
	}
	if now.Before(k.next) {
		k.suppressed++
		k.level, k.msg = level, msg
		if k.flush == nil && !l.closed {
			name := kindName
			k.flush = time.AfterFunc(k.next.Sub(now), func() { l.flushKind(name) })
		}
		l.mu.Unlock()
		return
	}
	n := k.suppressed
	k.suppressed, k.next = 0, now.Add(l.interval)
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	log.Log(context.Background(), level, msg, append(args, "kind", kindName)...)
}

// flushKind logs the count of name's lines left out, once its interval
// has passed without a line to carry it.
func (l *Log) flushKind(name string) {
	now := time.Now()
	l.mu.Lock()
	k := l.kinds[name]
	if now.Before(k.next) && k.suppressed > 0 && !l.closed {
		// A line came meanwhile, and the count is of a later interval.
		k.flush.Reset(k.next.Sub(now))
		l.mu.Unlock()
		return
	}
	k.flush = nil
	n, msg, level := k.suppressed, k.msg, k.level
	if n == 0 {
		l.mu.Unlock()
		return
	}
	k.suppressed, k.next = 0, now.Add(l.interval)
	l.mu.Unlock()
	l.log.Log(context.Background(), level, msg+" (more of the same)", "kind", name, "suppressed", n)
}

// Close logs the counts not logged yet and stops the timers; later lines
// are still rate-limited, but a count no line carries is logged only by
// the next Close.
func (l *Log) Close() {
	l.mu.Lock()
	l.closed = true
	var names []string
	for name, k := range l.kinds {
		if k.flush != nil {
			k.flush.Stop()
			k.flush = nil
		}
		if k.suppressed > 0 {
			k.next = time.Time{}
			names = append(names, name)
		}
	}
	l.mu.Unlock()
	for _, name := range names {
		l.flushKind(name)
	}
}
