package etcd

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chanos/chanos/internal/testkit"
	"github.com/chanos/chanos/internal/testkit/etcdtest"
	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// faultyNames is a Names whose etcd client passes every unary request
// through intercept, which sends it (invoke) when it likes and answers
// what it likes; and the raw client, to look at and change etcd behind the
// store's back.
type faultyNames struct {
	*Names
	sess *Session
	raw  *clientv3.Client

	mu   sync.Mutex
	lost []string // as OnLost reported them
}

func (f *faultyNames) lostNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.lost)
}

// An interceptor of faultyNames: invoke sends the request under ctx, and
// returns etcd's answer.
type interceptor func(ctx context.Context, method string, invoke func(context.Context) error) error

func newFaultyNames(t *testing.T, adjust func(*Config), intercept interceptor) *faultyNames {
	t.Helper()
	ec := etcdtest.Start(t, etcdtest.Options{})
	ctx := testkit.Context(t)
	f := &faultyNames{}
	client, err := clientv3.New(clientv3.Config{
		Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				return intercept(ctx, method, func(ictx context.Context) error {
					if ictx == ctx {
						return invoker(ctx, method, req, reply, cc, opts...)
					}
					// Sent after the caller has had its answer: the
					// answer goes nowhere.
					fresh := reflect.New(reflect.TypeOf(reply).Elem()).Interface()
					return invoker(ictx, method, req, fresh, cc, opts...)
				})
			})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	f.raw, err = clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.raw.Close() })
	cfg := Config{Endpoints: ec.Endpoints(), Cluster: freshCluster(), Machine: 1, Logger: quiet(),
		OnLost: func(_ names.Owner, name string) {
			f.mu.Lock()
			f.lost = append(f.lost, name)
			f.mu.Unlock()
		}}
	if adjust != nil {
		adjust(&cfg)
	}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	if f.sess, err = newSession(ctx, client, &cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.sess.close(true) })
	if f.Names, err = newNames(ctx, client, f.sess, &cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Names.Close() })
	return f
}

// inEtcd reports whether etcd has the name.
func (f *faultyNames) inEtcd(t *testing.T, name string) bool {
	t.Helper()
	resp, err := f.raw.Get(testkit.Context(t), f.key(name))
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.Kvs) > 0
}

// settle returns once the watch has applied, and reported, everything
// done in etcd before it was called: a name another machine sets then
// shows here.
func (f *faultyNames) settle(t *testing.T) {
	t.Helper()
	ctx := testkit.Context(t)
	ref := wire.Iref{Machine: 9, Export: 1, Token: [16]byte{9}}
	if _, err := f.raw.Put(ctx, f.key("settle"), encodeRecord(9, 1, ref)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the watch to bring the marker", func() bool {
		_, err := f.Get(ctx, "settle")
		return err == nil
	})
	if _, err := f.raw.Delete(ctx, f.key("settle")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the watch to bring the marker's delete", func() bool {
		_, err := f.Get(ctx, "settle")
		return errors.Is(err, names.ErrNotFound)
	})
}

// TestSetAfterWatchedDelete: a set whose answer comes after the watch has
// brought its put and then the name's delete (the key deleted behind
// chanos's back, or the machine's lease gone) does not bring the name
// back into this machine's cache, and its owner is told it lost it.
func TestSetAfterWatchedDelete(t *testing.T) {
	t.Parallel() // each test has its own etcd
	for _, how := range []string{"delete", "lease"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			var hold atomic.Bool
			held := make(chan struct{})
			release := make(chan struct{})
			f := newFaultyNames(t, short, func(ctx context.Context, method string, invoke func(context.Context) error) error {
				err := invoke(ctx)
				if method == "/etcdserverpb.KV/Txn" && hold.CompareAndSwap(true, false) {
					close(held)
					<-release
				}
				return err
			})
			ctx := testkit.Context(t)
			ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}
			hold.Store(true)
			set := make(chan error, 1)
			go func() { set <- f.Set(ctx, "ghost", ref, 7) }()
			testkit.Await(t, "the set's transaction to be done", held)
			testkit.Eventually(t, "the watch to bring the put", func() bool {
				_, err := f.Get(ctx, "ghost")
				return err == nil
			})
			if how == "delete" {
				if _, err := f.raw.Delete(ctx, f.key("ghost")); err != nil {
					t.Fatal(err)
				}
			} else if _, err := f.raw.Revoke(ctx, clientv3.LeaseID(f.sess.Lease())); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, "the watch to bring the delete", func() bool {
				_, err := f.Get(ctx, "ghost")
				return errors.Is(err, names.ErrNotFound)
			})
			close(release)
			if err := <-set; err != nil {
				t.Fatalf("set: %v", err)
			}
			if f.inEtcd(t, "ghost") {
				t.Fatal("etcd has the name again")
			}
			f.settle(t)
			testkit.Eventually(t, "the store to serve reads", func() bool {
				_, err := f.Get(ctx, "ghost")
				return !errors.Is(err, names.ErrUnavailable)
			})
			if _, err := f.Get(ctx, "ghost"); !errors.Is(err, names.ErrNotFound) {
				t.Errorf("get of the deleted name = %v, want ErrNotFound: the cache brought it back", err)
			}
			if n, err := f.Count(ctx, names.Class("ghost")); err != nil || n != 0 {
				t.Errorf("count = %d, %v; want 0", n, err)
			}
			if lost := f.lostNames(); !slices.Equal(lost, []string{"ghost"}) {
				t.Errorf("OnLost reported %q, want the name once", lost)
			}
		})
	}
}

// lateAnswers makes the transactions of the store answer late. While
// txns > 0, each is done but answered only when its context ends, with
// that end. While held > 0, each is answered so without being done, and
// done later, when the test sends on done the channel to close once it
// is.
type lateAnswers struct {
	txns, held atomic.Int32
	later      chan chan struct{}
}

func (l *lateAnswers) intercept(ctx context.Context, method string, invoke func(context.Context) error) error {
	if method != "/etcdserverpb.KV/Txn" {
		return invoke(ctx)
	}
	switch {
	case l.txns.Add(-1) >= 0:
		invoke(ctx)
	case l.held.Add(-1) >= 0:
		go func() {
			done := <-l.later
			invoke(context.Background())
			close(done)
		}()
	default:
		return invoke(ctx)
	}
	<-ctx.Done()
	return status.FromContextError(ctx.Err()).Err()
}

// doHeld has the transaction that lateAnswers holds done, and waits
// until it is.
func (l *lateAnswers) doHeld(t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	l.later <- done
	testkit.Await(t, "the held transaction to be done", done)
}

func shortOps(c *Config) { c.OpTimeout = time.Second }

// TestSetUnansweredIsResolved: a set whose transaction is done but whose
// answer never comes reads the name back and succeeds; the name is its
// owner's, to remove or release.
func TestSetUnansweredIsResolved(t *testing.T) {
	t.Parallel() // each test has its own etcd
	var late lateAnswers
	f := newFaultyNames(t, shortOps, late.intercept)
	ctx := testkit.Context(t)
	ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}

	late.txns.Store(1)
	if err := f.Set(ctx, "removed", ref, 7); err != nil {
		t.Fatalf("set whose answer was lost, and which was done = %v, want nil", err)
	}
	if err := f.Remove(ctx, "removed", 7); err != nil {
		t.Fatalf("remove by its owner: %v", err)
	}
	if f.inEtcd(t, "removed") {
		t.Error("the name outlives its owner's Remove")
	}

	late.txns.Store(1)
	if err := f.Set(ctx, "released", ref, 7); err != nil {
		t.Fatalf("set whose answer was lost, and which was done = %v, want nil", err)
	}
	if err := f.Release(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if f.inEtcd(t, "released") {
		t.Error("the name outlives its owner's Release")
	}
	f.settle(t)
	if lost := f.lostNames(); len(lost) > 0 {
		t.Errorf("OnLost reported %q, which their owner removed", lost)
	}
}

// TestSetUnansweredUnresolved: a set whose answer never comes, and whose
// put etcd has not done when the store reads the name back, fails with
// ErrUnavailable; the put, done later, is its owner's all the same: a set
// again of the same name and iref succeeds, and the owner's Remove or
// Release deletes it.
func TestSetUnansweredUnresolved(t *testing.T) {
	t.Parallel() // each test has its own etcd
	late := lateAnswers{later: make(chan chan struct{})}
	f := newFaultyNames(t, shortOps, late.intercept)
	ctx := testkit.Context(t)
	ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}

	for _, name := range []string{"again", "released"} {
		late.held.Store(1)
		if err := f.Set(ctx, name, ref, 7); !errors.Is(err, names.ErrUnavailable) {
			t.Fatalf("set %q = %v, want ErrUnavailable", name, err)
		}
		late.doHeld(t)
		if !f.inEtcd(t, name) {
			t.Fatalf("the set of %q was not done; the test needs it done", name)
		}
	}
	testkit.Eventually(t, "the watch to bring the put", func() bool {
		_, err := f.Get(ctx, "again")
		return err == nil
	})
	if err := f.Set(ctx, "again", ref, 7); err != nil {
		t.Fatalf("set again of the name whose set was done unanswered = %v, want nil", err)
	}
	if err := f.Set(ctx, "again", ref, 7); !errors.Is(err, names.ErrExists) {
		t.Fatalf("a third set = %v, want ErrExists", err)
	}
	if err := f.Set(ctx, "again", ref, 8); !errors.Is(err, names.ErrExists) {
		t.Fatalf("a set by another owner = %v, want ErrExists", err)
	}
	if err := f.Remove(ctx, "again", 7); err != nil {
		t.Fatalf("remove by its owner: %v", err)
	}
	if f.inEtcd(t, "again") {
		t.Error("the name outlives its owner's Remove")
	}
	if err := f.Release(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if f.inEtcd(t, "released") {
		t.Error("the name outlives its owner's Release")
	}
	f.settle(t)
	if lost := f.lostNames(); len(lost) > 0 {
		t.Errorf("OnLost reported %q, which their owner removed", lost)
	}
}

// TestRemoveUnansweredIsNotLost: a remove or release whose answer never
// comes fails with ErrUnavailable; its delete, done only later, is not
// reported as a loss when the watch brings it, since the owner removed
// the name.
func TestRemoveUnansweredIsNotLost(t *testing.T) {
	t.Parallel() // each test has its own etcd
	for _, how := range []string{"remove", "release"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			late := lateAnswers{later: make(chan chan struct{})}
			f := newFaultyNames(t, shortOps, late.intercept)
			ctx := testkit.Context(t)
			ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}
			if err := f.Set(ctx, "n", ref, 7); err != nil {
				t.Fatal(err)
			}
			late.held.Store(1)
			var err error
			if how == "remove" {
				err = f.Remove(ctx, "n", 7)
			} else {
				err = f.Release(ctx, 7)
			}
			if !errors.Is(err, names.ErrUnavailable) {
				t.Fatalf("%s = %v, want ErrUnavailable", how, err)
			}
			late.doHeld(t)
			if f.inEtcd(t, "n") {
				t.Fatalf("the %s was not done; the test needs it done", how)
			}
			f.settle(t)
			if _, err := f.Get(ctx, "n"); !errors.Is(err, names.ErrNotFound) {
				t.Fatalf("get = %v, want ErrNotFound", err)
			}
			if lost := f.lostNames(); len(lost) > 0 {
				t.Errorf("OnLost reported %q, which its owner removed", lost)
			}
			if err := f.Release(ctx, 7); err != nil {
				t.Errorf("release after: %v", err)
			}
		})
	}
}

// TestSetUnansweredGivenUp: the put of a set whose answer never came,
// done by etcd only after the store gave up on that set (its owner's
// Release, or a set again that succeeded and was then removed), belongs
// to nobody: the store deletes it when the watch brings it, so that the
// name is free for any owner, and never deletes the name set after that.
func TestSetUnansweredGivenUp(t *testing.T) {
	t.Parallel() // each test has its own etcd
	for _, how := range []string{"release", "set-remove"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			late := lateAnswers{later: make(chan chan struct{})}
			f := newFaultyNames(t, shortOps, late.intercept)
			ctx := testkit.Context(t)
			ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}
			late.held.Store(1)
			if err := f.Set(ctx, "late", ref, 7); !errors.Is(err, names.ErrUnavailable) {
				t.Fatalf("set = %v, want ErrUnavailable", err)
			}
			if how == "release" {
				if err := f.Release(ctx, 7); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := f.Set(ctx, "late", ref, 7); err != nil {
					t.Fatalf("set again, before the first set's put is done = %v, want nil", err)
				}
				if err := f.Remove(ctx, "late", 7); err != nil {
					t.Fatal(err)
				}
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			puts := f.raw.Watch(wctx, f.key("late"))
			late.doHeld(t)
			if ev := <-puts; ev.Err() != nil || len(ev.Events) == 0 || !ev.Events[0].IsCreate() {
				t.Fatalf("watch = %v, %v; the test needs the late put done", ev.Err(), ev.Events)
			}

			testkit.Eventually(t, "the late put to be deleted", func() bool {
				return !f.inEtcd(t, "late")
			})
			other := wire.Iref{Machine: 1, Export: 2, Token: [16]byte{2}}
			if err := f.Set(ctx, "late", other, 8); err != nil {
				t.Fatalf("set by another owner = %v, want nil", err)
			}
			f.settle(t)
			if got, err := f.Get(ctx, "late"); err != nil || got != other {
				t.Errorf("get = %v, %v; want the other owner's %v", got, err, other)
			}
			if lost := f.lostNames(); len(lost) > 0 {
				t.Errorf("OnLost reported %q", lost)
			}
		})
	}
}

// TestSetAgainAfterGivingUp: a set of the same name, owner and iref as
// one the store gave up on, made while the put of the latter could still
// turn up, is kept: the watch brings its put before the set has its
// answer, and the store does not take it for the late one.
func TestSetAgainAfterGivingUp(t *testing.T) {
	t.Parallel() // each test has its own etcd
	late := lateAnswers{later: make(chan chan struct{})}
	var slow atomic.Bool
	held := make(chan struct{})
	release := make(chan struct{})
	f := newFaultyNames(t, shortOps, func(ctx context.Context, method string, invoke func(context.Context) error) error {
		if method == "/etcdserverpb.KV/Txn" && slow.CompareAndSwap(true, false) {
			err := invoke(ctx)
			close(held)
			<-release
			return err
		}
		return late.intercept(ctx, method, invoke)
	})
	ctx := testkit.Context(t)
	ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}
	late.held.Store(1)
	if err := f.Set(ctx, "n", ref, 7); !errors.Is(err, names.ErrUnavailable) {
		t.Fatalf("set = %v, want ErrUnavailable", err)
	}
	if err := f.Release(ctx, 7); err != nil {
		t.Fatal(err)
	}
	slow.Store(true)
	set := make(chan error, 1)
	go func() { set <- f.Set(ctx, "n", ref, 7) }()
	testkit.Await(t, "the set's transaction to be done", held)
	testkit.Eventually(t, "the watch to bring the put", func() bool {
		_, err := f.Get(ctx, "n")
		return err == nil
	})
	f.settle(t)
	close(release)
	if err := <-set; err != nil {
		t.Fatalf("set again = %v, want nil", err)
	}
	late.doHeld(t) // refused: the name exists
	f.settle(t)
	if !f.inEtcd(t, "n") {
		t.Fatal("the store deleted the name its owner set again")
	}
	if err := f.Remove(ctx, "n", 7); err != nil {
		t.Errorf("remove by its owner: %v", err)
	}
	if lost := f.lostNames(); len(lost) > 0 {
		t.Errorf("OnLost reported %q", lost)
	}
}

// TestTombsBounded: the store remembers the unanswered sets it gave up
// on only while their puts may still be done, and at most maxTombs of
// them, forgetting first those nearest their end.
func TestTombsBounded(t *testing.T) {
	s := &Names{machine: 1, late: time.Minute, log: quiet(), entries: map[string]entry{}, tombs: map[string][]tomb{}}
	ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}
	now := time.Now()
	const extra = 10
	for i := range maxTombs + extra {
		s.buryLocked(fmt.Sprint("n", i), doubt{owner: 7, ref: ref, lease: 1, sent: now.Add(time.Duration(i) * time.Millisecond)})
	}
	s.buryLocked("sent-long-ago", doubt{owner: 7, ref: ref, lease: 1, sent: now.Add(-time.Minute)})
	n := 0
	for _, ts := range s.tombs {
		n += len(ts)
	}
	if n != maxTombs || s.ntombs != maxTombs {
		t.Fatalf("%d tombs (counted %d), want %d", n, s.ntombs, maxTombs)
	}
	for _, i := range []int{0, extra - 1, extra, maxTombs + extra - 1} {
		name := fmt.Sprint("n", i)
		if got, want := s.unburyLocked(name, doubt{owner: 7, ref: ref, lease: 1}), i >= extra; got != want {
			t.Errorf("tomb of %s kept = %v, want %v", name, got, want)
		}
	}
	if s.ntombs != maxTombs-2 {
		t.Errorf("%d tombs after taking 2, want %d", s.ntombs, maxTombs-2)
	}
}

// The notes of unanswered sets are bounded: past maxDoubts, the oldest is
// given up, becoming a tomb, so that its put, should it come, is deleted.
func TestDoubtsBounded(t *testing.T) {
	s := &Names{machine: 1, late: time.Minute, log: quiet(), entries: map[string]entry{}, unsure: map[string]doubt{}, tombs: map[string][]tomb{}}
	ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}
	now := time.Now()
	const extra = 3
	for i := range maxDoubts + extra {
		name := fmt.Sprint("n", i)
		if len(s.unsure) >= maxDoubts {
			s.giveUpOldestLocked()
		}
		s.unsure[name] = doubt{owner: 7, ref: ref, lease: 1, sent: now.Add(time.Duration(i) * time.Millisecond)}
	}
	if len(s.unsure) != maxDoubts {
		t.Fatalf("%d notes, want %d", len(s.unsure), maxDoubts)
	}
	for i := range extra {
		name := fmt.Sprint("n", i)
		if _, ok := s.unsure[name]; ok {
			t.Errorf("the note of %s, among the oldest, was kept", name)
		}
		if !s.unburyLocked(name, doubt{owner: 7, ref: ref, lease: 1}) {
			t.Errorf("no tomb for %s, given up", name)
		}
	}
	if _, ok := s.unsure[fmt.Sprint("n", extra)]; !ok {
		t.Errorf("the note of n%d, the oldest kept, is gone", extra)
	}
}

// settleWithin bounds how long the store may take to settle the record of
// an unanswered transfer while etcd answers: a few of its retries.
const settleWithin = 10 * time.Second

// ownerInEtcd returns the owner that etcd's record of name names, and its
// mod revision; ok is false when etcd has no such name.
func (f *faultyNames) ownerInEtcd(t *testing.T, name string) (owner names.Owner, mod int64, ok bool) {
	t.Helper()
	resp, err := f.raw.Get(testkit.Context(t), f.key(name))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0, false
	}
	e, err := decodeRecord(resp.Kvs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return e.owner, resp.Kvs[0].ModRevision, true
}

// awaitOwnerInEtcd waits, at most settleWithin, for etcd's record of
// name to name owner, and returns its mod revision.
func (f *faultyNames) awaitOwnerInEtcd(t *testing.T, name string, owner names.Owner) int64 {
	t.Helper()
	limit := time.Now().Add(settleWithin)
	for {
		got, mod, ok := f.ownerInEtcd(t, name)
		if ok && got == owner {
			return mod
		}
		if time.Now().After(limit) {
			t.Fatalf("after %v, etcd's record of %q names owner %d (there: %v), want %d", settleWithin, name, got, ok, owner)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkOwner checks that the store holds name for owner, and not for
// other: its cache says so, and only owner may transfer or remove it.
func (f *faultyNames) checkOwner(t *testing.T, name string, ref wire.Iref, owner, other names.Owner) {
	t.Helper()
	ctx := testkit.Context(t)
	if got, machine, o, err := f.Lookup(ctx, name); err != nil || got != ref || machine != 1 || o != owner {
		t.Errorf("lookup = %v, %d, %d, %v; want %v, 1, %d", got, machine, o, err, ref, owner)
	}
	if got, err := f.Get(ctx, name); err != nil || got != ref {
		t.Errorf("get = %v, %v; want %v", got, err, ref)
	}
	if err := f.Transfer(ctx, name, other, 3); !errors.Is(err, names.ErrNotOwner) {
		t.Errorf("transfer by %d = %v, want ErrNotOwner", other, err)
	}
	if err := f.Remove(ctx, name, other); !errors.Is(err, names.ErrNotOwner) {
		t.Errorf("remove by %d = %v, want ErrNotOwner", other, err)
	}
	if err := f.Release(ctx, other); err != nil {
		t.Errorf("release of %d: %v", other, err)
	}
	if !f.inEtcd(t, name) {
		t.Fatalf("%d's release removed the name %d holds", other, owner)
	}
}

// TestTransferUnansweredIsUndone: a transfer whose put is done but whose
// answer never comes fails, and the name stays its former owner's
// everywhere: the store rewrites etcd's record back to that owner, its
// cache says so meanwhile, and only that owner may remove, release or
// transfer it, which then holds.
func TestTransferUnansweredIsUndone(t *testing.T) {
	t.Parallel() // each test has its own etcd
	for _, how := range []string{"remove", "release", "transfer"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			var late lateAnswers
			f := newFaultyNames(t, shortOps, late.intercept)
			ctx := testkit.Context(t)
			ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}
			if err := f.Set(ctx, "n", ref, 7); err != nil {
				t.Fatal(err)
			}
			_, set, _ := f.ownerInEtcd(t, "n")
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			puts := f.raw.Watch(wctx, f.key("n"), clientv3.WithRev(set+1))

			late.txns.Store(1)
			if err := f.Transfer(ctx, "n", 7, 9); !errors.Is(err, names.ErrUnavailable) {
				t.Fatalf("transfer whose answer was lost = %v, want ErrUnavailable", err)
			}
			ev := <-puts
			if ev.Err() != nil || len(ev.Events) == 0 || ev.Events[0].Type != clientv3.EventTypePut {
				t.Fatalf("watch = %v, %v; the test needs the transfer's put done", ev.Err(), ev.Events)
			}
			if e, err := decodeRecord(ev.Events[0].Kv.Value); err != nil || e.owner != 9 {
				t.Fatalf("the first put after the set = %+v, %v; the test needs the transfer's, to owner 9", e, err)
			}
			f.awaitOwnerInEtcd(t, "n", 7)
			f.settle(t)
			f.checkOwner(t, "n", ref, 7, 9)

			switch how {
			case "remove":
				if err := f.Remove(ctx, "n", 7); err != nil {
					t.Fatalf("remove by the owner the transfer was from: %v", err)
				}
			case "release":
				if err := f.Release(ctx, 7); err != nil {
					t.Fatal(err)
				}
			case "transfer":
				if err := f.Transfer(ctx, "n", 7, 9); err != nil {
					t.Fatalf("transfer again: %v", err)
				}
				f.settle(t)
				time.Sleep(3 * retryInterval) // a settling, were one left, would undo it
				if o, _, ok := f.ownerInEtcd(t, "n"); !ok || o != 9 {
					t.Fatalf("etcd's record names owner %d (there: %v) after the transfer again, want 9", o, ok)
				}
				f.checkOwner(t, "n", ref, 9, 7)
				if err := f.Remove(ctx, "n", 9); err != nil {
					t.Fatalf("remove by the new owner: %v", err)
				}
			}
			if f.inEtcd(t, "n") {
				t.Error("the name outlives its owner's " + how)
			}
			f.settle(t)
			if _, err := f.Get(ctx, "n"); !errors.Is(err, names.ErrNotFound) {
				t.Errorf("get = %v, want ErrNotFound", err)
			}
			if lost := f.lostNames(); len(lost) > 0 {
				t.Errorf("OnLost reported %q, which their owner removed", lost)
			}
		})
	}
}

// TestTransferUnansweredLate: a transfer answered (its time up) before
// etcd does it fails, and its put, should it reach etcd later, is not
// done: the store moved the record on, still naming the owner the
// transfer was from.
func TestTransferUnansweredLate(t *testing.T) {
	t.Parallel() // each test has its own etcd
	late := lateAnswers{later: make(chan chan struct{})}
	f := newFaultyNames(t, shortOps, late.intercept)
	ctx := testkit.Context(t)
	ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}
	if err := f.Set(ctx, "n", ref, 7); err != nil {
		t.Fatal(err)
	}
	_, set, _ := f.ownerInEtcd(t, "n")
	late.held.Store(1)
	if err := f.Transfer(ctx, "n", 7, 9); !errors.Is(err, names.ErrUnavailable) {
		t.Fatalf("transfer = %v, want ErrUnavailable", err)
	}
	limit := time.Now().Add(settleWithin)
	for {
		if o, mod, ok := f.ownerInEtcd(t, "n"); !ok || o != 7 {
			t.Fatalf("etcd's record names owner %d (there: %v) before the transfer's put was sent, want 7", o, ok)
		} else if mod > set {
			break // settled: the record moved past the transfer's fence
		}
		if time.Now().After(limit) {
			t.Fatalf("after %v, the record was not settled: the transfer's late put could still be done", settleWithin)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, settled, _ := f.ownerInEtcd(t, "n")
	late.doHeld(t)
	f.settle(t)
	if o, mod, ok := f.ownerInEtcd(t, "n"); !ok || o != 7 || mod != settled {
		t.Fatalf("after the late put: etcd's record names owner %d at %d (there: %v), want 7 at %d", o, mod, ok, settled)
	}
	f.checkOwner(t, "n", ref, 7, 9)
	if err := f.Remove(ctx, "n", 7); err != nil {
		t.Fatalf("remove by its owner: %v", err)
	}
	if f.inEtcd(t, "n") {
		t.Error("the name outlives its owner's Remove")
	}
}

// TestTransferUnansweredThenRemoved: a name whose transfer went
// unanswered, and which its owner removes (or releases) before the store
// could settle its record, stays removed: nothing is rewritten, and a
// name set since under the same key is left alone.
func TestTransferUnansweredThenRemoved(t *testing.T) {
	t.Parallel() // each test has its own etcd
	for _, how := range []string{"remove", "release"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			// Transactions under a context marked through reach etcd;
			// once the lost one is done, the others (the store's own,
			// settling) do not, while cut.
			type through struct{}
			var lose, cut atomic.Bool
			f := newFaultyNames(t, shortOps, func(ctx context.Context, method string, invoke func(context.Context) error) error {
				if method != "/etcdserverpb.KV/Txn" || ctx.Value(through{}) != nil {
					return invoke(ctx)
				}
				if lose.CompareAndSwap(true, false) {
					invoke(ctx)
					cut.Store(true)
					<-ctx.Done()
					return status.FromContextError(ctx.Err()).Err()
				}
				if cut.Load() {
					return status.Error(codes.Unavailable, "cut off by the test")
				}
				return invoke(ctx)
			})
			ctx := testkit.Context(t)
			tctx := context.WithValue(ctx, through{}, true)
			ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}
			if err := f.Set(ctx, "n", ref, 7); err != nil {
				t.Fatal(err)
			}
			lose.Store(true)
			if err := f.Transfer(ctx, "n", 7, 9); !errors.Is(err, names.ErrUnavailable) {
				t.Fatalf("transfer = %v, want ErrUnavailable", err)
			}
			if o, _, ok := f.ownerInEtcd(t, "n"); !ok || o != 9 {
				t.Fatalf("etcd's record names owner %d (there: %v); the test needs the transfer's put done, not settled", o, ok)
			}
			var err error
			if how == "remove" {
				err = f.Remove(tctx, "n", 7)
			} else {
				err = f.Release(tctx, 7)
			}
			if err != nil {
				t.Fatalf("%s by the owner the transfer was from: %v", how, err)
			}
			if f.inEtcd(t, "n") {
				t.Fatalf("the name outlives its owner's %s", how)
			}
			cut.Store(false)
			other := wire.Iref{Machine: 1, Export: 2, Token: [16]byte{2}}
			if err := f.Set(ctx, "n", other, 8); err != nil {
				t.Fatalf("set by another owner: %v", err)
			}
			_, set, _ := f.ownerInEtcd(t, "n")
			time.Sleep(3 * retryInterval) // a settling, were one left, would be done
			f.settle(t)
			if o, mod, ok := f.ownerInEtcd(t, "n"); !ok || o != 8 || mod != set {
				t.Fatalf("etcd's record names owner %d at %d (there: %v), want the new set's, 8 at %d", o, mod, ok, set)
			}
			f.checkOwner(t, "n", other, 8, 7)
			if lost := f.lostNames(); len(lost) > 0 {
				t.Errorf("OnLost reported %q", lost)
			}
		})
	}
}

// The unanswered transfers the store keeps to settle are bounded: past
// maxTurns, the oldest is given up.
func TestTurnsBounded(t *testing.T) {
	s := &Names{log: quiet(), mine: map[string]*held{}, turns: map[string]*turn{}}
	ref := wire.Iref{Machine: 1, Export: 1, Token: [16]byte{1}}
	now := time.Now()
	const extra = 3
	for i := range maxTurns + extra {
		name := fmt.Sprint("n", i)
		s.mine[name] = &held{owner: 7, create: 1, lease: 1}
		s.transferUnanswered(name, turn{ref: ref, create: 1, guard: 1, to: 9, sent: now.Add(time.Duration(i) * time.Millisecond)})
	}
	if len(s.turns) != maxTurns {
		t.Fatalf("%d turns, want %d", len(s.turns), maxTurns)
	}
	for i := range extra + 1 {
		name := fmt.Sprint("n", i)
		if _, ok := s.turns[name]; ok != (i == extra) {
			t.Errorf("the turn of %s kept = %v, want %v", name, ok, i == extra)
		}
	}
	s.transferUnanswered("n5", turn{ref: ref, create: 1, guard: 2, to: 9, sent: now.Add(time.Hour)})
	if len(s.turns) != maxTurns || s.turns["n5"].guard != 2 {
		t.Errorf("a later transfer of a name with a turn: %d turns, guard %d; want %d, the later one's", len(s.turns), s.turns["n5"].guard, maxTurns)
	}
	s.transferUnanswered("gone", turn{ref: ref, create: 1, guard: 1, to: 9, sent: now})
	if _, ok := s.turns["gone"]; ok {
		t.Error("a turn for a name the store does not hold")
	}
}
