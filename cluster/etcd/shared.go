package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrConflict: a Shared value changed since the revision a Replace was
// given.
var ErrConflict = errors.New("the shared value changed meanwhile")

// Shared is a value that the machines of a cluster share, at the key
// /chanos/<cluster>/shared/<name>. Unlike a name or a machine's record it
// is not leased: it outlives the machine that wrote it. Each machine
// keeps its copy with a watch; what the value means, and who may replace
// it with what, is the caller's (the monitor shares the cluster's
// revocation list, which only the root can sign).
type Shared struct {
	client *clientv3.Client
	key    string
	opTO   time.Duration

	mu      sync.Mutex
	val     []byte
	rev     int64 // the value's mod revision, 0 when there is none
	seen    int64 // the store revision the copy is as of
	changed chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
}

// Shared loads the cluster's shared value name (letters, digits, '-',
// '_' and '.') and keeps it up to date until Close.
func (m *Machine) Shared(ctx context.Context, name string) (*Shared, error) {
	if err := validCluster(name); err != nil {
		return nil, fmt.Errorf("shared value: %w", err)
	}
	s := &Shared{
		client:  m.client,
		key:     strings.TrimSuffix(m.names.prefix, "names/") + "shared/" + name,
		opTO:    m.names.opTO,
		changed: make(chan struct{}),
		done:    make(chan struct{}),
	}
	if err := s.load(ctx); err != nil {
		return nil, unavailable(ctx, "load shared value "+name, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(runCtx)
	return s, nil
}

// Value returns the value, and the revision to give Replace (0 when
// there is none).
func (s *Shared) Value() ([]byte, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.val, s.rev
}

// Changed returns a channel that is closed at the next change: take it,
// read Value, then wait on it, and no change is missed.
func (s *Shared) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// Replace puts val if the value is still at revision rev (0: there is
// none), in one transaction; otherwise it fails with ErrConflict.
func (s *Shared) Replace(ctx context.Context, rev int64, val []byte) error {
	octx, cancel := context.WithTimeout(ctx, s.opTO)
	defer cancel()
	resp, err := s.client.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(s.key), "=", rev)).
		Then(clientv3.OpPut(s.key, string(val))).Commit()
	if err != nil {
		return unavailable(ctx, "replace "+s.key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("replace %s: %w", s.key, ErrConflict)
	}
	s.apply(val, resp.Header.Revision, resp.Header.Revision)
	return nil
}

// apply sets the copy to val, of mod revision rev, as of store revision
// seen, unless the copy is newer.
func (s *Shared) apply(val []byte, rev, seen int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seen < s.seen {
		return
	}
	s.seen = seen
	if rev == s.rev {
		return
	}
	s.val, s.rev = val, rev
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Shared) load(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), s.opTO)
	defer cancel()
	resp, err := s.client.Get(lctx, s.key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		s.apply(nil, 0, resp.Header.Revision)
	} else {
		s.apply(resp.Kvs[0].Value, resp.Kvs[0].ModRevision, resp.Header.Revision)
	}
	return nil
}

// run keeps the copy (follow) with a watch from the revision it is as of,
// and loads it again whenever the watch breaks.
func (s *Shared) run(ctx context.Context) {
	defer close(s.done)
	s.mu.Lock()
	from := s.seen
	s.mu.Unlock()
	follow(ctx, s.client, s.key, false, from, retryInterval,
		func(ctx context.Context) (int64, error) {
			if err := s.load(ctx); err != nil {
				return 0, err
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.seen, nil
		},
		func(evs []*clientv3.Event) {
			for _, ev := range evs {
				if ev.Type == mvccpb.DELETE {
					s.apply(nil, 0, ev.Kv.ModRevision)
				} else {
					s.apply(ev.Kv.Value, ev.Kv.ModRevision, ev.Kv.ModRevision)
				}
			}
		},
		nil)
}

// Close stops keeping the value.
func (s *Shared) Close() {
	s.cancel()
	<-s.done
}
