package spawn

import (
	"errors"
	"log/slog"
	"time"

	api "github.com/chanos/chanos/interfaces/spawn"
)

// refusalInterval is how often a kind of refusal is logged at most
// (docs/spawn.md#security), as the monitor's own refusals are: a peer that
// floods the service with requests it refuses costs a line a second, not
// a line each.
const refusalInterval = time.Second

// refused logs err, the refusal of a call, through log, with its
// attributes, at most once a refusalInterval per call and kind of error.
func (s *Service) refused(log *slog.Logger, call, msg string, err error) {
	s.refusals.LogTo(log, slog.LevelWarn, call+" "+errorKind(err), msg, "err", err)
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
