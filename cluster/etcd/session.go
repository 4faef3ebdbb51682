package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Session is one machine's lease in etcd, kept alive. Whatever the machine
// puts under the lease (its names, its machine record) lives as long as
// the lease: if the machine dies, or is cut off from etcd for longer than
// the TTL, etcd expires the lease and deletes all of it.
//
// Keep-alive: every Config.KeepAlive the session renews the lease with one
// request, bounded by Config.OpTimeout. A failed renewal (etcd unreachable,
// or without a quorum) marks the session unhealthy until one succeeds;
// the lease itself is declared lost only when etcd says it is gone. The
// session then reports the loss to its subscribers (the names store tells
// every owner whose names went with it) and grants itself a fresh lease;
// nothing put under the old lease is put again.
//
// The idea is that of etcd's client/v3/concurrency.Session, with the
// interval under our control and the loss reported rather than ending the
// session.
type Session struct {
	client   *clientv3.Client
	ttl      time.Duration
	interval time.Duration
	opTO     time.Duration
	log      *slog.Logger

	mu      sync.Mutex
	lease   clientv3.LeaseID // 0 while a fresh lease is being granted
	healthy bool             // the last renewal (or grant) succeeded
	// renewed is when the last renewal (or grant) that etcd confirmed was
	// sent: the lease lives at least its TTL from then.
	renewed time.Time
	lost    []func(old int64)
	fresh   []func(lease int64)
	paused  bool // tests: stop renewing, as a machine that froze

	stop chan struct{}
	done chan struct{}
}

// retryInterval is how often an unhealthy session tries to renew.
const retryInterval = 200 * time.Millisecond

// errLeaseGone reports that etcd no longer has a lease.
var errLeaseGone = errors.New("lease not found")

func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) || errors.Is(err, errLeaseGone)
}

func newSession(ctx context.Context, client *clientv3.Client, cfg *Config) (*Session, error) {
	s := &Session{
		client:   client,
		ttl:      cfg.TTL,
		interval: cfg.KeepAlive,
		opTO:     cfg.OpTimeout,
		log:      cfg.Logger,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	sent := time.Now()
	id, err := s.grant(ctx)
	if err != nil {
		return nil, err
	}
	s.lease, s.healthy, s.renewed = id, true, sent
	go s.run()
	return s, nil
}

func (s *Session) grant(ctx context.Context) (clientv3.LeaseID, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opTO)
	defer cancel()
	secs := int64((s.ttl + time.Second - 1) / time.Second)
	resp, err := s.client.Grant(ctx, secs)
	if err != nil {
		return 0, fmt.Errorf("grant a lease of %ds: %w", secs, err)
	}
	return resp.ID, nil
}

// Lease returns the current lease's id, or 0 while the session is getting
// a fresh one after a loss.
func (s *Session) Lease() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int64(s.lease)
}

// Healthy reports whether the last renewal of the lease succeeded, within
// the lease's TTL: when it is false, etcd is unreachable or has no quorum,
// as far as this machine can tell, or the lease may have expired. A
// renewal that hangs (etcd's link stalled: nothing answers, nothing is
// refused) fails only at OpTimeout, which may be longer than the TTL; the
// lease is not taken for alive past the TTL meanwhile.
func (s *Session) Healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.healthy && s.lease != 0 && !s.paused && time.Since(s.renewed) < s.ttl
}

// LastRenewed returns when the last renewal (or grant) of the lease that
// etcd confirmed was sent.
func (s *Session) LastRenewed() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewed
}

// TTL returns the lease's time to live: a machine that stops renewing is
// gone from the cluster at most this long after its last renewal.
func (s *Session) TTL() time.Duration { return s.ttl }

// KeepAliveInterval returns how often the lease is renewed.
func (s *Session) KeepAliveInterval() time.Duration { return s.interval }

// OnLost registers fn, called with the old lease's id each time etcd
// reports the lease gone (it expired while this machine was cut off or
// frozen). fn runs on the session's goroutine and must not block.
func (s *Session) OnLost(fn func(old int64)) {
	s.mu.Lock()
	s.lost = append(s.lost, fn)
	s.mu.Unlock()
}

// OnFresh registers fn, called with the new lease's id each time the
// session has taken a fresh lease after a loss. fn runs on the session's
// goroutine and must not block.
func (s *Session) OnFresh(fn func(lease int64)) {
	s.mu.Lock()
	s.fresh = append(s.fresh, fn)
	s.mu.Unlock()
}

// setPaused stops (or resumes) renewals, for tests that play a machine
// that froze.
func (s *Session) setPaused(p bool) {
	s.mu.Lock()
	s.paused = p
	s.mu.Unlock()
}

func (s *Session) run() {
	defer close(s.done)
	timer := time.NewTimer(s.interval)
	defer timer.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-timer.C:
		}
		s.mu.Lock()
		id, paused, healthy := s.lease, s.paused, s.healthy
		s.mu.Unlock()
		// While etcd is out of reach, try more often, so that the
		// machine is back soon after etcd is.
		next := s.interval
		if !healthy {
			next = min(s.interval, retryInterval)
		}
		timer.Reset(next)
		if paused {
			continue
		}
		if id == 0 {
			s.regrant()
			continue
		}
		sent := time.Now()
		err := s.renew(id)
		switch {
		case err == nil:
			s.mu.Lock()
			s.healthy, s.renewed = true, sent
			s.mu.Unlock()
		case isLeaseNotFound(err):
			s.log.Warn("etcd: the machine's lease is lost; its names are gone", "lease", fmt.Sprintf("%x", int64(id)))
			s.mu.Lock()
			s.lease, s.healthy = 0, false
			subs := append([]func(int64){}, s.lost...)
			s.mu.Unlock()
			for _, fn := range subs {
				fn(int64(id))
			}
			s.regrant()
		default:
			s.mu.Lock()
			wasHealthy := s.healthy
			s.healthy = false
			s.mu.Unlock()
			if wasHealthy {
				s.log.Warn("etcd: lease renewal failed", "err", err)
			}
		}
	}
}

func (s *Session) renew(id clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opTO)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	resp, err := s.client.KeepAliveOnce(ctx, id)
	if err != nil {
		return err
	}
	if resp.TTL <= 0 {
		return errLeaseGone
	}
	return nil
}

func (s *Session) regrant() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	sent := time.Now()
	id, err := s.grant(ctx)
	if err != nil {
		s.log.Warn("etcd: granting a fresh lease failed; retrying", "err", err)
		return
	}
	s.mu.Lock()
	s.lease, s.healthy, s.renewed = id, true, sent
	subs := append([]func(int64){}, s.fresh...)
	s.mu.Unlock()
	s.log.Info("etcd: the machine has a fresh lease", "lease", fmt.Sprintf("%x", int64(id)))
	for _, fn := range subs {
		fn(int64(id))
	}
}

// close stops renewing. With revoke, the lease is revoked, so that what was
// put under it goes at once (a machine leaving cleanly); without, it
// expires after the TTL (as if the machine had died).
func (s *Session) close(revoke bool) error {
	select {
	case <-s.stop:
		return nil
	default:
	}
	close(s.stop)
	<-s.done
	if !revoke {
		return nil
	}
	s.mu.Lock()
	id := s.lease
	s.lease, s.healthy = 0, false
	s.mu.Unlock()
	if id == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opTO)
	defer cancel()
	if _, err := s.client.Revoke(ctx, id); err != nil && !isLeaseNotFound(err) {
		return fmt.Errorf("revoke the machine's lease: %w", err)
	}
	return nil
}
