package spawn

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	api "github.com/chanos/chanos/interfaces/spawn"
)

// refusalInterval is how often a kind of refusal is logged at most
// (docs/spawn.md#security), as the monitor's own refusals are: a peer that
// floods the service with requests it refuses costs a line a second, not
// a line each.
const refusalInterval = time.Second

// refused logs err, the refusal of a call, with log's attributes, at most
// once a refusalInterval per call and kind of error.
func (s *Service) refused(log *slog.Logger, call, msg string, err error) {
	s.refusals.logf(log, call+" "+errorKind(err), msg, "err", err)
}

// errorKind names the class of a refusal's error, as its code does.
func errorKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{api.ErrNotFound, "not_found"}, {api.ErrDenied, "denied"}, {api.ErrInvalid, "invalid"},
		{api.ErrExhausted, "exhausted"}, {api.ErrFailed, "failed"}, {api.ErrUnavailable, "unavailable"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other"
}

// rateLog logs each kind of event at most once an interval, and counts
// the lines it leaves out: the next line of the kind carries the count
// (suppressed=N), or, if none comes by the end of the interval, a line of
// its own. The kinds are few (the calls, by class of error), so their
// records are kept.
type rateLog struct {
	log      *slog.Logger
	interval time.Duration

	mu     sync.Mutex
	kinds  map[string]*rateKind
	closed bool
}

type rateKind struct {
	next       time.Time // no line of the kind before then
	suppressed int       // lines left out since the last one
	msg        string    // the last one's message
	flush      *time.Timer
}

func newRateLog(log *slog.Logger, interval time.Duration) *rateLog {
	return &rateLog{log: log, interval: interval, kinds: map[string]*rateKind{}}
}

// logf logs msg with args at WARN, through log, unless a line of kind was
// logged less than an interval ago.
func (r *rateLog) logf(log *slog.Logger, kind, msg string, args ...any) {
	now := time.Now()
	r.mu.Lock()
	k := r.kinds[kind]
	if k == nil {
		k = &rateKind{}
		r.kinds[kind] = k
	}
	if now.Before(k.next) {
		k.suppressed++
		k.msg = msg
		if k.flush == nil && !r.closed {
			k.flush = time.AfterFunc(k.next.Sub(now), func() { r.flushKind(kind) })
		}
		r.mu.Unlock()
		return
	}
	n := k.suppressed
	k.suppressed, k.next = 0, now.Add(r.interval)
	r.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	log.Warn(msg, append(args, "kind", kind)...)
}

// flushKind logs the count of kind's lines left out, once its interval
// has passed without a line to carry it.
func (r *rateLog) flushKind(kind string) {
	now := time.Now()
	r.mu.Lock()
	k := r.kinds[kind]
	if now.Before(k.next) && k.suppressed > 0 && !r.closed {
		// A line came meanwhile, and the count is of a later interval.
		k.flush.Reset(k.next.Sub(now))
		r.mu.Unlock()
		return
	}
	k.flush = nil
	n, msg := k.suppressed, k.msg
	if n == 0 {
		r.mu.Unlock()
		return
	}
	k.suppressed, k.next = 0, now.Add(r.interval)
	r.mu.Unlock()
	r.log.Warn(msg+" (more of the same)", "kind", kind, "suppressed", n)
}

// close logs the counts not yet logged, and stops the timers.
func (r *rateLog) close() {
	r.mu.Lock()
	r.closed = true
	var kinds []string
	for kind, k := range r.kinds {
		if k.flush != nil {
			k.flush.Stop()
			k.flush = nil
		}
		if k.suppressed > 0 {
			k.next = time.Time{}
			kinds = append(kinds, kind)
		}
	}
	r.mu.Unlock()
	for _, kind := range kinds {
		r.flushKind(kind)
	}
}
