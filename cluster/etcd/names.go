package etcd

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/chanos/chanos/names"
	"github.com/chanos/chanos/wire"
)

// watchBuffer is how many events a watcher may fall behind before it is
// dropped with names.ErrWatchOverflow, as in names.Memory.
const watchBuffer = 1024

// releaseBatch is how many deletes one Release transaction carries, well
// under etcd's default limit of 128 operations per transaction.
const releaseBatch = 64

// maxTombs bounds how many unanswered sets the store remembers having
// given up on (tombs), whatever the owners do: a domain that sets many
// names while etcd does not answer, then releases them, costs at most
// this many (some 300 bytes each). Past it the tombs nearest their end go
// first, and the puts they stood for, should they still be done, stay
// until the lease ends.
const maxTombs = 4096

// maxDoubts bounds the unanswered sets the store keeps a note of (unsure),
// whatever the owners do: past it, the oldest note is given up (made a
// tomb, buryLocked), as its owner's Release would. Its owner was told
// that the set failed; should its put be done, it is deleted rather than
// made the owner's.
const maxDoubts = 4096

// maxTurns bounds the unanswered transfers whose records the store has
// yet to settle (turns), whatever the owners do: past it, the oldest is
// given up, and its put, should etcd have done it, leaves the record
// naming the owner the transfer was to, while this machine holds the name
// for the owner it was from, until the name goes.
const maxTurns = 4096

// transferTries bounds how often a Transfer, or the settling of a turn,
// sends its transaction again when the record changed under it and is
// still this store's: only this store writes it, and a settle or a
// Transfer under way moves its mod revision at most once or twice.
const transferTries = 3

// Names is the cluster-wide names.Store on etcd, as one machine sees it.
//
// Each name is a key /chanos/<cluster>/names/<name> whose value is a
// record (JSON: {"machine":M,"owner":O,"ref":{"machine":M,"export":E,
// "token":"<32 hex digits>"}}) put under the machine's lease. Set is a
// transaction that puts only if the key does not exist; Remove and
// Release delete only if the key still has the create revision this
// machine's put gave it, so a name that was lost and taken by another
// machine is never removed or overwritten by the one that lost it.
//
// Reads (Get, Count, List, and WaitFor's first look) are served from a
// local cache that a watch on the names keeps, in revision order. Set,
// Remove and Release return once the cache has seen their own change, so
// that this machine reads its own writes. A change made on another
// machine shows here once the watch delivers it (typically a millisecond
// on a LAN); WaitFor registers with the cache under the lock that applies
// the watch's events, so a set at any time, before or after, wakes it.
//
// Transfer rewrites a name's record with its new owner, fenced by the
// record's mod revision as well as its create revision, so that its put,
// if its answer is lost, can only be done on the record as it was sent.
// The caller is told that it failed, and so the store settles the record
// back (a turn, settle): it rewrites the owner this machine holds the
// name for, fenced by the mod revision, which undoes the put if it was
// done, and otherwise moves the record past the fence, so that the put
// never is. Meanwhile the cache shows, for the names this machine holds,
// the owner it holds them for, whatever their records say.
//
// When etcd cannot be reached, or has no quorum, the reads fail with
// names.ErrUnavailable rather than serve a view that may be stale: the
// machine knows this from its lease's renewals and from the watch, which
// asks for a leader. Every request to etcd is bounded by
// Config.OpTimeout.
type Names struct {
	client  *clientv3.Client
	sess    *Session
	machine uint64
	prefix  string
	opTO    time.Duration
	onLost  func(names.Owner, string)
	log     *slog.Logger

	mu       sync.Mutex
	entries  map[string]entry
	sorted   []string // the keys of entries, sorted, for List
	classes  map[string]uint64
	waiters  map[string][]chan wire.Iref
	watchers map[*names.Watcher]*watcher
	mine     map[string]*held  // names this machine set and has not removed
	unsure   map[string]doubt  // names whose set's answer was lost, by name
	gone     map[string]int64  // names deleted at a revision the watch has not reached
	setting  map[string]int    // this machine's Sets under way, by name
	tombs    map[string][]tomb // unanswered sets given up on, by name
	turns    map[string]*turn  // unanswered transfers to settle, by name
	moving   map[string]int    // this machine's Transfers under way, by name
	ntombs   int               // how many tombs, at most maxTombs
	late     time.Duration     // Config.LateCommit
	reaps    map[string]int64  // late puts to delete, by name: their create revisions
	reapc    chan struct{}     // wakes the reaper
	rev      int64             // the watch has delivered every change up to rev
	synced   bool              // the watch is running from rev
	closed   bool

	cancel context.CancelFunc
	done   chan struct{}
	reaped chan struct{} // closed when the reaper ends
}

type entry struct {
	ref     wire.Iref
	owner   names.Owner
	machine uint64
	create  int64 // the key's create revision: the fence
	mod     int64 // the revision of the last change applied to it
	lease   int64 // the lease the key lives under
}

type held struct {
	owner    names.Owner
	create   int64
	lease    int64
	removing bool // our own Remove or Release is deleting it
	// doubtful: the delete of a Remove or Release went unanswered, and
	// may or may not have been done. The name stays marked removing, so
	// that its delete is not reported lost, but a later Remove or
	// Release of its owner tries again.
	doubtful bool
	// adopted: the name is the put of a Set whose answer was lost, made
	// the owner's since (adoptLocked), and no Set has yet told the owner.
	adopted bool
}

// doubt is a Set whose answer did not come (a timeout, a connection
// lost): its put may have been done, under lease, or may still be. A put
// of the name that matches it, wherever this machine sees it (the watch,
// a read), makes the name the owner's as if the Set had returned.
type doubt struct {
	owner names.Owner
	ref   wire.Iref
	lease int64
	sent  time.Time // when the Set sent its transaction
}

// is reports whether e is the put d stands for: this machine's, under
// the same lease, with the same owner and iref.
func (d doubt) is(machine uint64, e entry) bool {
	return e.machine == machine && e.lease == d.lease && e.owner == d.owner && e.ref == d.ref
}

// tomb is a doubt the store gave up on (the owner's Release, or a later
// Set of the name that succeeded), while its put may still be done: until
// then, a put that matches it is nobody's, and the store deletes it
// (lateLocked).
type tomb struct {
	doubt
	until time.Time
}

// turn is a Transfer whose answer did not come: its put may have been
// done, or may still be while the record's mod revision is guard. Its
// caller was told that it failed, so the record is to name again the
// owner this machine holds the name for (settle).
type turn struct {
	ref    wire.Iref
	create int64
	guard  int64       // the mod revision the Transfer's put was fenced by
	to     names.Owner // the owner the Transfer's put names
	sent   time.Time
}

type watcher struct {
	prefix string
	send   func(names.Event) bool
	end    func(error)
	ended  chan struct{} // closed when the watch ends
}

// record is a name's value in etcd.
type record struct {
	Machine uint64    `json:"machine"`
	Owner   uint64    `json:"owner"`
	Ref     recordRef `json:"ref"`
}

type recordRef struct {
	Machine uint64 `json:"machine"`
	Export  uint64 `json:"export"`
	Token   string `json:"token"`
}

func encodeRecord(machine uint64, owner names.Owner, ref wire.Iref) string {
	b, _ := json.Marshal(record{Machine: machine, Owner: uint64(owner), Ref: recordRef{
		Machine: ref.Machine, Export: ref.Export, Token: hex.EncodeToString(ref.Token[:]),
	}})
	return string(b)
}

func decodeRecord(v []byte) (entry, error) {
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return entry{}, err
	}
	tok, err := hex.DecodeString(r.Ref.Token)
	if err != nil || len(tok) != 16 {
		return entry{}, fmt.Errorf("token %q is not 32 hex digits", r.Ref.Token)
	}
	e := entry{owner: names.Owner(r.Owner), machine: r.Machine}
	e.ref.Machine, e.ref.Export = r.Ref.Machine, r.Ref.Export
	copy(e.ref.Token[:], tok)
	return e, nil
}

var _ names.Store = (*Names)(nil)

func newNames(ctx context.Context, client *clientv3.Client, sess *Session, cfg *Config) (*Names, error) {
	s := &Names{
		client:   client,
		sess:     sess,
		machine:  cfg.Machine,
		prefix:   "/chanos/" + cfg.Cluster + "/names/",
		opTO:     cfg.OpTimeout,
		onLost:   cfg.OnLost,
		log:      cfg.Logger,
		entries:  map[string]entry{},
		classes:  map[string]uint64{},
		waiters:  map[string][]chan wire.Iref{},
		watchers: map[*names.Watcher]*watcher{},
		mine:     map[string]*held{},
		unsure:   map[string]doubt{},
		gone:     map[string]int64{},
		setting:  map[string]int{},
		tombs:    map[string][]tomb{},
		turns:    map[string]*turn{},
		moving:   map[string]int{},
		late:     cfg.LateCommit,
		reaps:    map[string]int64{},
		reapc:    make(chan struct{}, 1),
		done:     make(chan struct{}),
		reaped:   make(chan struct{}),
	}
	if err := s.resync(ctx); err != nil {
		return nil, unavailable(ctx, "load the names", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	sess.OnLost(s.leaseLost)
	go s.run(runCtx)
	go s.reaper(runCtx)
	return s, nil
}

func (s *Names) key(name string) string { return s.prefix + name }

// run keeps the cache (follow): a watch from the cache's revision, and a
// full reload whenever the watch breaks (no leader, compaction, etcd gone).
func (s *Names) run(ctx context.Context) {
	defer close(s.done)
	s.mu.Lock()
	from := s.rev // as loaded by the constructor
	s.mu.Unlock()
	follow(ctx, s.client, s.prefix, true, from, 100*time.Millisecond,
		func(ctx context.Context) (int64, error) {
			if err := s.resync(ctx); err != nil {
				return 0, err
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.rev, nil
		},
		func(evs []*clientv3.Event) {
			var lost []lostName
			s.mu.Lock()
			for _, ev := range evs {
				lost = s.applyLocked(ev, lost)
			}
			s.pruneLocked()
			s.mu.Unlock()
			s.tell(lost)
		},
		func(err error) {
			if err != nil && ctx.Err() == nil {
				s.log.Warn("etcd: the names' watch broke; reloading", "err", err)
			}
			s.mu.Lock()
			s.synced = false
			s.mu.Unlock()
		})
}

type lostName struct {
	owner names.Owner
	name  string
}

func (s *Names) applyLocked(ev *clientv3.Event, lost []lostName) []lostName {
	name, ok := strings.CutPrefix(string(ev.Kv.Key), s.prefix)
	if !ok {
		return lost
	}
	switch ev.Type {
	case mvccpb.PUT:
		e, err := decodeRecord(ev.Kv.Value)
		if err != nil {
			s.log.Warn("etcd: a name's value is not a chanos record; ignored", "name", name, "err", err)
			break
		}
		e.create, e.mod, e.lease = ev.Kv.CreateRevision, ev.Kv.ModRevision, ev.Kv.Lease
		lost = s.putLocked(name, e, lost)
	case mvccpb.DELETE:
		lost = s.deleteLocked(name, ev.Kv.ModRevision, lost)
	}
	s.rev = max(s.rev, ev.Kv.ModRevision)
	return lost
}

// putLocked applies the put of name at revision e.mod, unless the cache
// already holds a later change to it: this machine applies its own
// changes as soon as etcd confirms them, before the watch brings them
// (with whatever came before them), so events may arrive late.
func (s *Names) putLocked(name string, e entry, lost []lostName) []lostName {
	old, had := s.entries[name]
	if had && e.mod <= old.mod {
		return lost
	}
	if at, ok := s.gone[name]; ok {
		if e.mod <= at {
			return lost
		}
		delete(s.gone, name)
	}
	if had {
		if old.create == e.create {
			// A Transfer's put, or its settling. The put of one whose
			// answer was lost names an owner its caller was told it
			// did not become, until settled.
			if h, ok := s.mine[name]; ok && h.create == e.create {
				e.owner = h.owner
			}
			s.entries[name] = e
			return lost
		}
		lost = s.removeLocked(name, old, lost)
	}
	s.insertLocked(name, e)
	s.adoptLocked(name, e)
	s.lateLocked(name, e)
	return lost
}

// adoptLocked makes name, as the cache now holds it (e), the owner's if
// it is the put of a Set whose answer was lost: the put of this machine,
// under the same lease, with the same owner and iref. While a Set of the
// name is under way on this machine, the put may be that Set's, which
// looks the same when it is of the same owner and iref, and leaves the
// doubt's put to be done still: the Set decides (claim, setDone).
func (s *Names) adoptLocked(name string, e entry) {
	if s.setting[name] == 0 {
		s.takeLocked(name, e)
	}
}

// takeLocked is adoptLocked whatever Sets are under way.
func (s *Names) takeLocked(name string, e entry) {
	d, ok := s.unsure[name]
	if !ok || !d.is(s.machine, e) {
		return
	}
	if h, ok := s.mine[name]; ok && h.create == e.create {
		return
	}
	delete(s.unsure, name)
	s.mine[name] = &held{owner: d.owner, create: e.create, lease: d.lease, adopted: true}
}

// buryLocked notes that the store gave up on d, an unanswered Set of
// name, while its put may still be done: until d.sent+LateCommit, a put
// that matches it is deleted when this machine sees it.
func (s *Names) buryLocked(name string, d doubt) {
	now := time.Now()
	until := d.sent.Add(s.late)
	if !now.Before(until) {
		return
	}
	if s.ntombs >= maxTombs {
		s.pruneTombsLocked(now)
	}
	if s.ntombs >= maxTombs {
		s.evictTombLocked()
	}
	s.tombs[name] = append(s.tombs[name], tomb{doubt: d, until: until})
	s.ntombs++
	if e, ok := s.entries[name]; ok {
		s.lateLocked(name, e)
	}
}

// unburyLocked drops the tomb of name that d matches (same owner, iref
// and lease), with those whose time is up, and reports whether it was
// there.
func (s *Names) unburyLocked(name string, d doubt) bool {
	now, found := time.Now(), false
	ts := s.tombs[name]
	kept := ts[:0]
	for _, t := range ts {
		switch {
		case !now.Before(t.until):
		case !found && t.owner == d.owner && t.ref == d.ref && t.lease == d.lease:
			found = true
		default:
			kept = append(kept, t)
			continue
		}
		s.ntombs--
	}
	clear(ts[len(kept):])
	if len(kept) == 0 {
		delete(s.tombs, name)
	} else {
		s.tombs[name] = kept
	}
	return found
}

// pruneTombsLocked drops the tombs whose time is up.
func (s *Names) pruneTombsLocked(now time.Time) {
	for name, ts := range s.tombs {
		kept := slices.DeleteFunc(ts, func(t tomb) bool { return !now.Before(t.until) })
		s.ntombs -= len(ts) - len(kept)
		if len(kept) == 0 {
			delete(s.tombs, name)
		} else {
			s.tombs[name] = kept
		}
	}
}

// evictTombLocked drops the tomb nearest its end, to make room: its put,
// should it be done still, then stays until the lease ends.
func (s *Names) evictTombLocked() {
	var first string
	at := -1
	for name, ts := range s.tombs {
		for i, t := range ts {
			if at < 0 || t.until.Before(s.tombs[first][at].until) {
				first, at = name, i
			}
		}
	}
	if at < 0 {
		return
	}
	s.log.Warn("etcd: too many unanswered sets given up on; forgetting one, whose put, should etcd still do it, stays until the lease ends",
		"name", first, "owner", uint64(s.tombs[first][at].owner), "max", maxTombs)
	if ts := slices.Delete(s.tombs[first], at, at+1); len(ts) == 0 {
		delete(s.tombs, first)
	} else {
		s.tombs[first] = ts
	}
	s.ntombs--
}

// lateLocked queues the delete of e, the cache's entry for name, if it is
// the put of an unanswered Set that the store gave up on (a tomb): it is
// nobody's, and would otherwise hold the name until the lease ends. A
// Set of the name under way on this machine defers it (setDone looks
// again), since its put, which the watch may bring before its answer,
// matches the tomb as well when it is of the same owner and iref.
func (s *Names) lateLocked(name string, e entry) {
	if e.machine != s.machine || len(s.tombs[name]) == 0 || s.setting[name] > 0 {
		return
	}
	if h, ok := s.mine[name]; ok && h.create == e.create {
		return
	}
	if d, ok := s.unsure[name]; ok && d.is(s.machine, e) {
		return // an unanswered Set of the owner's that still stands has it
	}
	if !s.unburyLocked(name, doubt{owner: e.owner, ref: e.ref, lease: e.lease}) {
		return
	}
	s.reaps[name] = e.create
	select {
	case s.reapc <- struct{}{}:
	default: // the reaper is awake already
	}
}

// reaper deletes the late puts that lateLocked queues, each fenced by its
// create revision, so that whatever was set under the name since is never
// deleted, and settles the records of unanswered transfers (settle). It
// runs apart from the watch, which only queues, and retries while etcd
// cannot be reached, until the store is closed.
func (s *Names) reaper(ctx context.Context) {
	defer close(s.reaped)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.reapc:
		}
		for {
			retry := s.reapOnce(ctx)
			if s.settleOnce(ctx) {
				retry = true
			}
			if !retry {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryInterval):
			}
		}
	}
}

// reapOnce tries each queued delete once, and reports whether some failed
// for want of an answer.
func (s *Names) reapOnce(ctx context.Context) (retry bool) {
	s.mu.Lock()
	list := make([]string, 0, len(s.reaps))
	creates := make([]int64, 0, len(s.reaps))
	for name, create := range s.reaps {
		if h, ok := s.mine[name]; ok && h.create == create {
			delete(s.reaps, name) // made an owner's since
			continue
		}
		list, creates = append(list, name), append(creates, create)
	}
	s.mu.Unlock()
	for i, name := range list {
		key := s.key(name)
		octx, cancel := context.WithTimeout(ctx, s.opTO)
		r, err := s.client.Txn(octx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", creates[i])).
			Then(clientv3.OpDelete(key)).Commit()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("etcd: could not delete the late put of an unanswered set; retrying", "name", name, "err", err)
			}
			retry = true
			continue
		}
		s.mu.Lock()
		if s.reaps[name] == creates[i] {
			delete(s.reaps, name)
		}
		s.mu.Unlock()
		if r.Succeeded {
			s.log.Info("etcd: deleted the late put of an unanswered set that was given up on", "name", name)
			s.applyDeletes([]string{name}, r.Header.Revision)
		}
	}
	return retry
}

// deleteLocked applies the delete of name at revision rev.
func (s *Names) deleteLocked(name string, rev int64, lost []lostName) []lostName {
	if old, had := s.entries[name]; had {
		if rev <= old.mod {
			return lost
		}
		lost = s.removeLocked(name, old, lost)
	}
	if rev > s.rev {
		s.gone[name] = max(s.gone[name], rev)
	}
	return lost
}

// pruneLocked forgets the deletes the watch has gone past: no older
// change to those names can arrive any more.
func (s *Names) pruneLocked() {
	for name, at := range s.gone {
		if at <= s.rev {
			delete(s.gone, name)
		}
	}
}

// resync reloads every name, and turns the difference from the cache into
// the events the watch would have delivered.
func (s *Names) resync(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), s.opTO)
	defer cancel()
	resp, err := s.client.Get(rctx, s.prefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	fresh := map[string]entry{}
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), s.prefix)
		e, err := decodeRecord(kv.Value)
		if err != nil {
			s.log.Warn("etcd: a name's value is not a chanos record; ignored", "name", name, "err", err)
			continue
		}
		e.create, e.mod, e.lease = kv.CreateRevision, kv.ModRevision, kv.Lease
		fresh[name] = e
	}
	at := resp.Header.Revision
	var lost []lostName
	s.mu.Lock()
	for _, name := range slices.Clone(s.sorted) {
		old := s.entries[name]
		// A name this machine applied after the snapshot stays.
		if e, ok := fresh[name]; (!ok || e.create != old.create) && old.mod <= at {
			lost = s.removeLocked(name, old, lost)
		}
	}
	var added []string
	for name := range fresh {
		if _, ok := s.entries[name]; !ok {
			added = append(added, name)
		}
	}
	slices.Sort(added)
	for _, name := range added {
		lost = s.putLocked(name, fresh[name], lost)
	}
	s.rev = max(s.rev, at)
	s.synced = true
	s.pruneLocked()
	s.mu.Unlock()
	s.tell(lost)
	return nil
}

func (s *Names) insertLocked(name string, e entry) {
	s.entries[name] = e
	i, _ := slices.BinarySearch(s.sorted, name)
	s.sorted = slices.Insert(s.sorted, i, name)
	s.classes[names.Class(name)]++
	for _, w := range s.waiters[name] {
		w <- e.ref // buffered with room for exactly this value
	}
	delete(s.waiters, name)
	s.notifyLocked(names.Event{Name: name, Ref: e.ref})
}

// removeLocked drops name from the cache; if this machine held it and did
// not remove it itself, it is lost.
func (s *Names) removeLocked(name string, e entry, lost []lostName) []lostName {
	delete(s.entries, name)
	if i, ok := slices.BinarySearch(s.sorted, name); ok {
		s.sorted = slices.Delete(s.sorted, i, i+1)
	}
	class := names.Class(name)
	if s.classes[class]--; s.classes[class] == 0 {
		delete(s.classes, class)
	}
	if h, ok := s.mine[name]; ok && h.create == e.create {
		delete(s.mine, name)
		delete(s.turns, name) // a put fenced by the create revision cannot bring it back
		if !h.removing {
			lost = append(lost, lostName{h.owner, name})
		}
	}
	s.notifyLocked(names.Event{Name: name, Ref: e.ref, Removed: true})
	return lost
}

func (s *Names) notifyLocked(ev names.Event) {
	for w, sub := range s.watchers {
		if !strings.HasPrefix(ev.Name, sub.prefix) {
			continue
		}
		if !sub.send(ev) {
			s.dropLocked(w, names.ErrWatchOverflow)
		}
	}
}

func (s *Names) dropLocked(w *names.Watcher, err error) {
	sub, ok := s.watchers[w]
	if !ok {
		return
	}
	delete(s.watchers, w)
	sub.end(err)
	close(sub.ended)
}

// leaseLost is the session's report that etcd dropped the lease old:
// every name held under it is gone, and each owner is told once.
func (s *Names) leaseLost(old int64) {
	var lost []lostName
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	for name, h := range s.mine {
		if h.lease == old && !h.removing {
			delete(s.mine, name)
			delete(s.turns, name)
			lost = append(lost, lostName{h.owner, name})
		}
	}
	// A put under the old lease can no longer be done (etcd refuses a
	// put under a lease it has dropped), and one that was is gone with
	// the lease: these doubts need no tomb.
	for name, d := range s.unsure {
		if d.lease == old {
			delete(s.unsure, name)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(lost, func(a, b lostName) int { return strings.Compare(a.name, b.name) })
	s.tell(lost)
}

func (s *Names) tell(lost []lostName) {
	for _, l := range lost {
		s.log.Warn("etcd: a name was lost with the machine's lease", "name", l.name, "owner", uint64(l.owner))
		if s.onLost != nil {
			s.onLost(l.owner, l.name)
		}
	}
}

// availableLocked reports whether the cache may be served: the watch runs
// and the lease's last renewal succeeded.
func (s *Names) availableLocked() bool { return s.synced && s.sess.Healthy() }

// Set implements names.Store: a transaction that puts the name under the
// machine's lease only if no key of that name exists.
func (s *Names) Set(ctx context.Context, name string, ref wire.Iref, owner names.Owner) error {
	if err := names.ValidName(name); err != nil {
		return err
	}
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.setting[name]++
	}
	s.mu.Unlock()
	if closed {
		return names.ErrClosed
	}
	defer s.setDone(name)
	lease := s.sess.Lease()
	if lease == 0 {
		return fmt.Errorf("set %q: %w: the machine's lease was lost and is being renewed", name, names.ErrUnavailable)
	}
	sent := time.Now()
	octx, cancel := context.WithTimeout(ctx, s.opTO)
	defer cancel()
	key := s.key(name)
	resp, err := s.client.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, encodeRecord(s.machine, owner, ref), clientv3.WithLease(clientv3.LeaseID(lease)))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		if isLeaseNotFound(err) {
			return fmt.Errorf("set %q: %w: the machine's lease expired", name, names.ErrUnavailable)
		}
		return s.setUnanswered(ctx, name, doubt{owner: owner, ref: ref, lease: lease, sent: sent}, err)
	}
	if !resp.Succeeded {
		// This machine now reads the name it was refused.
		s.applyRead(name, resp.Responses[0].GetResponseRange().Kvs, resp.Header.Revision)
		if s.claim(name, owner, ref) {
			return nil // an earlier set of the owner's, unanswered, was done
		}
		return fmt.Errorf("set %q: %w", name, names.ErrExists)
	}
	rev := resp.Header.Revision
	e := entry{ref: ref, owner: owner, machine: s.machine, create: rev, mod: rev, lease: lease}
	s.mu.Lock()
	var lost []lostName
	if !s.closed {
		// An earlier unanswered set was not done, but may still be,
		// should the name be removed first.
		if d, ok := s.unsure[name]; ok {
			delete(s.unsure, name)
			s.buryLocked(name, d)
		}
		// This machine reads its own write at once, and the watch's
		// event for it comes later and changes nothing. Unless the watch
		// has already gone past it: its view then holds every change up
		// to the put and after, the put's delete included, which must
		// not be undone.
		if s.rev < rev {
			lost = s.putLocked(name, e, nil)
		}
		if cur, ok := s.entries[name]; ok && cur.create == rev {
			s.mine[name] = &held{owner: owner, create: rev, lease: lease}
		} else {
			// The name went (its lease expired, or its key was deleted)
			// before this machine applied its put: that is a loss, which
			// the watch could not report as the name was not yet held.
			lost = append(lost, lostName{owner, name})
		}
	}
	s.mu.Unlock()
	s.tell(lost)
	return nil
}

// oldestSent returns the name in m whose request was sent first (sent
// says when), or "" if m is empty.
func oldestSent[V any](m map[string]V, sent func(V) time.Time) string {
	var oldest string
	var at time.Time
	for name, v := range m {
		if t := sent(v); oldest == "" || t.Before(at) {
			oldest, at = name, t
		}
	}
	return oldest
}

// giveUpOldestLocked gives up the note of the oldest unanswered set, to
// make room (maxDoubts).
func (s *Names) giveUpOldestLocked() {
	oldest := oldestSent(s.unsure, func(d doubt) time.Time { return d.sent })
	if oldest == "" {
		return
	}
	d := s.unsure[oldest]
	delete(s.unsure, oldest)
	s.log.Warn("etcd: too many unanswered sets; giving up the oldest, whose put, should etcd still do it, is deleted", "name", oldest, "owner", uint64(d.owner), "max", maxDoubts)
	s.buryLocked(oldest, d)
}

// lastOut counts one operation on name out of under (the Sets or the
// Transfers under way, by name) and reports whether it was the last.
func lastOut(under map[string]int, name string) bool {
	if under[name]--; under[name] > 0 {
		return false
	}
	delete(under, name)
	return true
}

// setDone ends a Set of name: what the Set deferred is done now, the
// adoption of a doubt's put (adoptLocked) or the delete of a late one
// (lateLocked).
func (s *Names) setDone(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !lastOut(s.setting, name) {
		return
	}
	if e, ok := s.entries[name]; ok && !s.closed {
		s.adoptLocked(name, e)
		s.lateLocked(name, e)
	}
}

// setUnanswered resolves a Set whose transaction failed without an
// answer (err): etcd may have done its put. The store reads the name back
// and, if it holds this put, the set succeeded. Otherwise the set fails
// with names.ErrUnavailable, and the store keeps a note of it: a put that
// is done after all, or that the read could not see, becomes the owner's
// when this machine sees it (adoptLocked), so the owner's Remove and
// Release delete it, and a set again of the same name and iref by the
// same owner succeeds. The note goes with the owner's Release or the
// lease; given up on while the put may still be done, it becomes a tomb
// (buryLocked), and the put, should it turn up, is deleted.
func (s *Names) setUnanswered(ctx context.Context, name string, d doubt, err error) error {
	owner, ref := d.owner, d.ref
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return unavailable(ctx, fmt.Sprintf("set %q", name), err)
	}
	// One note per name, the newer set's: should the older one's put be
	// done, and not be the one the note adopts, it is nobody's.
	if old, ok := s.unsure[name]; ok {
		s.buryLocked(name, old)
	}
	if _, ok := s.unsure[name]; !ok && len(s.unsure) >= maxDoubts {
		s.giveUpOldestLocked()
	}
	s.unsure[name] = d
	s.mu.Unlock()
	if s.claim(name, owner, ref) { // the watch brought the put already
		return nil
	}
	// The caller's context may be what ended: the read gets its own
	// bound.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opTO)
	defer cancel()
	resp, rerr := s.client.Get(rctx, s.key(name))
	if rerr == nil {
		s.applyRead(name, resp.Kvs, resp.Header.Revision)
		if s.claim(name, owner, ref) {
			return nil
		}
	}
	return unavailable(ctx, fmt.Sprintf("set %q", name), err)
}

// claim reports whether owner holds name, set to ref, by a Set whose
// answer was lost and which no Set has reported yet; it then counts as
// reported. A Set that finds it so succeeds: it is the one that was done.
func (s *Names) claim(name string, owner names.Owner, ref wire.Iref) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, in := s.entries[name]
	if in && s.setting[name] == 1 {
		// No other Set of the name is under way: the put is the doubt's,
		// if it matches, or this Set's own, which the doubt stands for.
		s.takeLocked(name, e)
	}
	h, ok := s.mine[name]
	if !ok || !in || !h.adopted || h.owner != owner || h.create != e.create || h.removing || e.ref != ref {
		return false
	}
	h.adopted = false
	return true
}

// applyRead applies what a transaction read of name at revision rev:
// its key (kvs), or that it had none.
func (s *Names) applyRead(name string, kvs []*mvccpb.KeyValue, rev int64) {
	var lost []lostName
	s.mu.Lock()
	if !s.closed {
		if len(kvs) == 0 {
			lost = s.deleteLocked(name, rev, nil)
		} else if e, err := decodeRecord(kvs[0].Value); err == nil {
			e.create, e.mod, e.lease = kvs[0].CreateRevision, kvs[0].ModRevision, kvs[0].Lease
			lost = s.putLocked(name, e, nil)
		}
	}
	s.mu.Unlock()
	s.tell(lost)
}

// applyDeletes applies this machine's own deletes of list at rev.
func (s *Names) applyDeletes(list []string, rev int64) {
	var lost []lostName
	s.mu.Lock()
	if !s.closed {
		for _, name := range list {
			lost = s.deleteLocked(name, rev, lost)
		}
	}
	s.mu.Unlock()
	s.tell(lost)
}

// Get implements names.Store, from the cache.
func (s *Names) Get(ctx context.Context, name string) (wire.Iref, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return wire.Iref{}, names.ErrClosed
	}
	if !s.availableLocked() {
		return wire.Iref{}, fmt.Errorf("get %q: %w", name, names.ErrUnavailable)
	}
	e, ok := s.entries[name]
	if !ok {
		return wire.Iref{}, fmt.Errorf("get %q: %w", name, names.ErrNotFound)
	}
	return e.ref, nil
}

// Lookup is Get that also returns the machine that holds the name and the
// owner there.
func (s *Names) Lookup(ctx context.Context, name string) (ref wire.Iref, machine uint64, owner names.Owner, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return wire.Iref{}, 0, 0, names.ErrClosed
	}
	if !s.availableLocked() {
		return wire.Iref{}, 0, 0, fmt.Errorf("lookup %q: %w", name, names.ErrUnavailable)
	}
	e, ok := s.entries[name]
	if !ok {
		return wire.Iref{}, 0, 0, fmt.Errorf("lookup %q: %w", name, names.ErrNotFound)
	}
	return e.ref, e.machine, e.owner, nil
}

// WaitFor implements names.Store. It looks in the cache and, under the same
// lock, registers to be woken by the watch, which delivers every change
// after the cache's revision: a set that races with the look is never
// missed. While etcd is unreachable it keeps waiting, until ctx ends.
func (s *Names) WaitFor(ctx context.Context, name string) (wire.Iref, error) {
	if err := names.ValidName(name); err != nil {
		return wire.Iref{}, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return wire.Iref{}, names.ErrClosed
	}
	if e, ok := s.entries[name]; ok {
		s.mu.Unlock()
		return e.ref, nil
	}
	ch := make(chan wire.Iref, 1)
	s.waiters[name] = append(s.waiters[name], ch)
	s.mu.Unlock()

	select {
	case ref, ok := <-ch:
		if !ok {
			return wire.Iref{}, names.ErrClosed
		}
		return ref, nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case ref, ok := <-ch:
			if ok {
				return ref, nil
			}
		default:
		}
		ws := s.waiters[name]
		if i := slices.Index(ws, ch); i >= 0 {
			ws = slices.Delete(ws, i, i+1)
		}
		if len(ws) == 0 {
			delete(s.waiters, name)
		} else {
			s.waiters[name] = ws
		}
		return wire.Iref{}, fmt.Errorf("wait for %q: %w", name, ctx.Err())
	}
}

// Count implements names.Store, from the cache.
func (s *Names) Count(ctx context.Context, class string) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, names.ErrClosed
	}
	if !s.availableLocked() {
		return 0, fmt.Errorf("count %q: %w", class, names.ErrUnavailable)
	}
	return s.classes[class], nil
}

// Transfer implements names.Store: the name's record is rewritten with
// its new owner, under the same lease, if it is still the one this store
// set (its create revision) and as this machine last saw it (its mod
// revision); ownership is this machine's to check. When its answer is
// lost, it fails, and the record is settled back to from (settle).
func (s *Names) Transfer(ctx context.Context, name string, from, to names.Owner) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return names.ErrClosed
	}
	s.moving[name]++
	s.mu.Unlock()
	defer s.transferDone(name)
	key := s.key(name)
	for try := 1; ; try++ {
		s.mu.Lock()
		e, ok := s.entries[name]
		h, mine := s.mine[name]
		switch {
		case s.closed:
			s.mu.Unlock()
			return names.ErrClosed
		case !ok:
			s.mu.Unlock()
			return fmt.Errorf("transfer %q: %w", name, names.ErrNotFound)
		case !mine || h.owner != from || h.create != e.create || h.removing:
			s.mu.Unlock()
			return fmt.Errorf("transfer %q: %w", name, names.ErrNotOwner)
		}
		lease := h.lease
		s.mu.Unlock()
		sent := time.Now()
		octx, cancel := context.WithTimeout(ctx, s.opTO)
		resp, err := s.client.Txn(octx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", e.create),
				clientv3.Compare(clientv3.ModRevision(key), "=", e.mod)).
			Then(clientv3.OpPut(key, encodeRecord(s.machine, to, e.ref), clientv3.WithLease(clientv3.LeaseID(lease)))).
			Else(clientv3.OpGet(key)).
			Commit()
		cancel()
		if err != nil {
			if !isLeaseNotFound(err) {
				s.transferUnanswered(name, turn{ref: e.ref, create: e.create, guard: e.mod, to: to, sent: sent})
			}
			return unavailable(ctx, fmt.Sprintf("transfer %q", name), err)
		}
		if !resp.Succeeded {
			kvs := resp.Responses[0].GetResponseRange().Kvs
			s.applyRead(name, kvs, resp.Header.Revision)
			if len(kvs) == 0 || kvs[0].CreateRevision != e.create {
				return fmt.Errorf("transfer %q: %w", name, names.ErrNotOwner)
			}
			// Still the name this store set: its record moved on since
			// the cache saw it, settled after an earlier transfer.
			if try < transferTries {
				continue
			}
			return fmt.Errorf("transfer %q: %w: its record kept changing", name, names.ErrUnavailable)
		}
		s.mu.Lock()
		if h := s.mine[name]; h != nil && h.create == e.create {
			h.owner = to
		}
		// The put moved the record past the fence of an earlier
		// unanswered transfer's put, or overwrote that put.
		if t := s.turns[name]; t != nil && t.create == e.create {
			delete(s.turns, name)
		}
		if cur, ok := s.entries[name]; ok && cur.create == e.create {
			cur.owner = to
			cur.mod = max(cur.mod, resp.Header.Revision)
			s.entries[name] = cur
		}
		s.mu.Unlock()
		return nil
	}
}

// transferDone ends a Transfer of name: what it deferred, the settling of
// an unanswered transfer of the name, is done now.
func (s *Names) transferDone(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !lastOut(s.moving, name) {
		return
	}
	if _, ok := s.turns[name]; ok && !s.closed {
		select {
		case s.reapc <- struct{}{}:
		default: // the reaper is awake already
		}
	}
}

// transferUnanswered notes t, a Transfer of name whose answer was lost,
// to be settled once no Transfer of the name is under way. One turn per
// name, the later one's: its fence is no older, and settling the record
// from it settles an earlier put too, which could only be done at an
// older or the same mod revision.
func (s *Names) transferUnanswered(name string, t turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if h, ok := s.mine[name]; !ok || h.create != t.create {
		return // the name went: the put, fenced by its create revision, cannot bring it back
	}
	if _, ok := s.turns[name]; !ok && len(s.turns) >= maxTurns {
		s.giveUpOldestTurnLocked()
	}
	s.turns[name] = &t
}

// giveUpOldestTurnLocked forgets the oldest unanswered transfer, to make
// room (maxTurns).
func (s *Names) giveUpOldestTurnLocked() {
	oldest := oldestSent(s.turns, func(t *turn) time.Time { return t.sent })
	if oldest == "" {
		return
	}
	s.log.Warn("etcd: too many unanswered transfers; giving up settling the oldest, whose put, should etcd have done it, names the owner it was to",
		"name", oldest, "to", uint64(s.turns[oldest].to), "max", maxTurns)
	delete(s.turns, oldest)
}

// settleOnce settles the unanswered transfers of the names no Transfer is
// under way for (transferDone wakes the reaper for the others), and
// reports whether one is to be tried again: etcd did not answer, and the
// rest wait for the next round rather than each for its timeout.
func (s *Names) settleOnce(ctx context.Context) (retry bool) {
	s.mu.Lock()
	list := make([]string, 0, len(s.turns))
	for name := range s.turns {
		if s.moving[name] == 0 {
			list = append(list, name)
		}
	}
	s.mu.Unlock()
	for _, name := range list {
		if s.settle(ctx, name) {
			return true
		}
	}
	return false
}

// settle makes name's record, which an unanswered Transfer's put may
// have rewritten, or may still, name again the owner this machine holds
// it for: a put of that owner, fenced by the create revision and by the
// mod revision the Transfer's put was fenced by, or, if the record moved
// on without naming that owner, by the one it moved to. Either way the
// Transfer's put, which needs the record as it was, can no longer be
// done. It reports whether it must be tried again.
func (s *Names) settle(ctx context.Context, name string) (retry bool) {
	s.mu.Lock()
	t := s.turns[name]
	s.mu.Unlock()
	if t == nil {
		return false
	}
	key, guard := s.key(name), t.guard
	for range transferTries {
		s.mu.Lock()
		h, held := s.mine[name]
		switch {
		case s.closed, s.turns[name] != t, s.moving[name] > 0:
			// Settled, or a later transfer's to settle, or a Transfer
			// under way, whose end looks again.
			s.mu.Unlock()
			return false
		case !held || h.create != t.create:
			delete(s.turns, name) // the name went, and the put cannot bring it back
			s.mu.Unlock()
			return false
		}
		owner, lease := h.owner, h.lease
		s.mu.Unlock()
		octx, cancel := context.WithTimeout(ctx, s.opTO)
		r, err := s.client.Txn(octx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", t.create),
				clientv3.Compare(clientv3.ModRevision(key), "=", guard)).
			Then(clientv3.OpPut(key, encodeRecord(s.machine, owner, t.ref), clientv3.WithLease(clientv3.LeaseID(lease)))).
			Else(clientv3.OpGet(key)).
			Commit()
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("etcd: could not settle the record of an unanswered transfer; retrying", "name", name, "err", err)
			}
			return true
		}
		if r.Succeeded {
			s.settled(name, t, r.Header.Revision)
			return false
		}
		kvs := r.Responses[0].GetResponseRange().Kvs
		s.applyRead(name, kvs, r.Header.Revision)
		if len(kvs) == 0 || kvs[0].CreateRevision != t.create {
			s.settled(name, t, 0)
			return false
		}
		if e, err := decodeRecord(kvs[0].Value); err == nil && e.machine == s.machine && e.owner == owner && e.ref == t.ref {
			s.settled(name, t, 0) // past the fence, and naming the owner
			return false
		}
		guard = kvs[0].ModRevision
	}
	return true
}

// settled drops t, name's turn, whose record the store rewrote at rev (0:
// it needed no rewrite).
func (s *Names) settled(name string, t *turn, rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.turns[name] == t {
		delete(s.turns, name)
	}
	if rev == 0 {
		return
	}
	s.log.Info("etcd: settled the record of a transfer whose answer was lost", "name", name, "to", uint64(t.to))
	// This machine reads its own write at once.
	if cur, ok := s.entries[name]; ok && cur.create == t.create && cur.mod < rev {
		cur.mod = rev
		s.entries[name] = cur
	}
}

// Remove implements names.Store: only the owner that set the name through
// this store may remove it, and the delete is fenced by the name's create
// revision.
func (s *Names) Remove(ctx context.Context, name string, owner names.Owner) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return names.ErrClosed
	}
	if !s.availableLocked() {
		s.mu.Unlock()
		return fmt.Errorf("remove %q: %w", name, names.ErrUnavailable)
	}
	e, ok := s.entries[name]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("remove %q: %w", name, names.ErrNotFound)
	}
	// Owners are numbered by this machine's monitor: only names this
	// store set are theirs (a name of the same machine id from before a
	// restart belongs to a domain that is gone, and expires with its
	// lease).
	h, ok := s.mine[name]
	if !ok || h.owner != owner || h.create != e.create {
		s.mu.Unlock()
		return fmt.Errorf("remove %q: %w", name, names.ErrNotOwner)
	}
	if h.removing && !h.doubtful { // by a Remove or Release under way
		s.mu.Unlock()
		return fmt.Errorf("remove %q: %w", name, names.ErrNotFound)
	}
	again := h.doubtful
	s.markLocked([]string{name}, true)
	s.mu.Unlock()

	octx, cancel := context.WithTimeout(ctx, s.opTO)
	defer cancel()
	key := s.key(name)
	resp, err := s.client.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", e.create)).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		s.doubt([]string{name})
		return unavailable(ctx, fmt.Sprintf("remove %q", name), err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if again {
			// The delete that went unanswered was done: the name is
			// removed, not lost.
			s.forget([]string{name}, []int64{e.create})
			s.applyRead(name, kvs, resp.Header.Revision)
			return nil
		}
		// The name went, or went and was taken, since the cache saw it.
		s.unmark([]string{name})
		s.applyRead(name, kvs, resp.Header.Revision)
		if len(kvs) > 0 {
			return fmt.Errorf("remove %q: %w", name, names.ErrNotOwner)
		}
		return fmt.Errorf("remove %q: %w", name, names.ErrNotFound)
	}
	s.applyDeletes([]string{name}, resp.Header.Revision)
	return nil
}

// markLocked sets or clears the removing mark of the names this machine
// holds, so that their deletes are not reported as lost.
func (s *Names) markLocked(list []string, on bool) {
	for _, name := range list {
		if h, ok := s.mine[name]; ok {
			h.removing, h.doubtful = on, false
		}
	}
}

// doubt notes that the deletes of list went unanswered: they may have
// been done, so the names stay marked (their deletes, when the watch
// brings them, are not losses), and a Remove or Release tries again.
func (s *Names) doubt(list []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range list {
		if h, ok := s.mine[name]; ok && h.removing {
			h.doubtful = true
		}
	}
}

// forget drops from mine the names of list, of the create revisions
// creates, which this machine removed without learning when: the cache
// learns it from the watch.
func (s *Names) forget(list []string, creates []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, name := range list {
		if h, ok := s.mine[name]; ok && h.create == creates[i] {
			delete(s.mine, name)
			delete(s.turns, name)
		}
	}
}

func (s *Names) unmark(list []string) {
	s.mu.Lock()
	s.markLocked(list, false)
	s.mu.Unlock()
}

// List implements names.Store, from the cache.
func (s *Names) List(ctx context.Context, prefix, after string, limit int) ([]string, bool, error) {
	if limit <= 0 {
		return nil, false, fmt.Errorf("list: limit %d must be positive", limit)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false, names.ErrClosed
	}
	if !s.availableLocked() {
		return nil, false, fmt.Errorf("list %q: %w", prefix, names.ErrUnavailable)
	}
	start := max(prefix, after)
	i, found := slices.BinarySearch(s.sorted, start)
	if found && start == after {
		i++ // after itself was on the previous page
	}
	var out []string
	for ; i < len(s.sorted) && strings.HasPrefix(s.sorted[i], prefix); i++ {
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, s.sorted[i])
	}
	return out, false, nil
}

// Watch implements names.Store: the sets and removes of names anywhere in
// the cluster, as this machine's watch delivers them.
func (s *Names) Watch(ctx context.Context, prefix string) (*names.Watcher, error) {
	var w *names.Watcher
	w, send, end := names.NewWatcher(watchBuffer, func() {
		s.mu.Lock()
		s.dropLocked(w, nil)
		s.mu.Unlock()
	})
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, names.ErrClosed
	}
	sub := &watcher{prefix: prefix, send: send, end: end, ended: make(chan struct{})}
	s.watchers[w] = sub
	s.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
			w.Stop()
		case <-sub.ended:
		}
	}()
	return w, nil
}

// Release implements names.Store: every name owner set through this
// store goes, in transactions of up to releaseBatch deletes, each fenced by the
// names' create revisions. So do the puts of the owner's sets that went
// unanswered: those etcd has done, now, and those it does later, within
// Config.LateCommit of their sending, when this machine sees them.
func (s *Names) Release(ctx context.Context, owner names.Owner) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return names.ErrClosed
	}
	var mine []string
	again := map[string]bool{} // names whose earlier delete went unanswered
	for name, h := range s.mine {
		if h.owner == owner && (!h.removing || h.doubtful) {
			mine = append(mine, name)
			if h.doubtful {
				again[name] = true
			}
		}
	}
	slices.Sort(mine)
	creates := make([]int64, len(mine))
	for i, name := range mine {
		creates[i] = s.mine[name].create
	}
	s.markLocked(mine, true)
	// The owner's sets that went unanswered: their puts, if done, are
	// deleted too, and are no longer to become the owner's.
	var doubts []string
	for name, d := range s.unsure {
		if d.owner == owner {
			doubts = append(doubts, name)
		}
	}
	slices.Sort(doubts)
	pending := make([]doubt, len(doubts))
	for i, name := range doubts {
		pending[i] = s.unsure[name]
		delete(s.unsure, name)
		// A put done after the deletes below is deleted when it shows.
		s.buryLocked(name, pending[i])
	}
	s.mu.Unlock()

	octx, cancel := context.WithTimeout(ctx, s.opTO)
	defer cancel()
	fail := func(err error) error {
		return unavailable(ctx, fmt.Sprintf("release owner %d", owner), err)
	}
	for start := 0; start < len(mine); start += releaseBatch {
		end := min(start+releaseBatch, len(mine))
		var conds []clientv3.Cmp
		var dels []clientv3.Op
		for i := start; i < end; i++ {
			key := s.key(mine[i])
			conds = append(conds, clientv3.Compare(clientv3.CreateRevision(key), "=", creates[i]))
			dels = append(dels, clientv3.OpDelete(key))
		}
		resp, err := s.client.Txn(octx).If(conds...).Then(dels...).Commit()
		if err != nil {
			s.doubt(mine[start:end])
			s.unmark(mine[end:])
			s.redoubt(doubts, pending)
			return fail(err)
		}
		if resp.Succeeded {
			s.applyDeletes(mine[start:end], resp.Header.Revision)
			continue
		}
		// Some name of the batch is no longer ours: delete the others
		// one by one, each with its own fence.
		for i := start; i < end; i++ {
			key := s.key(mine[i])
			r, err := s.client.Txn(octx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", creates[i])).
				Then(clientv3.OpDelete(key)).Commit()
			if err != nil {
				s.doubt(mine[i : i+1])
				s.unmark(mine[i+1:])
				s.redoubt(doubts, pending)
				return fail(err)
			}
			switch {
			case r.Succeeded:
				s.applyDeletes(mine[i:i+1], r.Header.Revision)
			case again[mine[i]]:
				// The delete that went unanswered was done.
				s.forget(mine[i:i+1], creates[i:i+1])
			default:
				// Lost meanwhile: the watch tells its owner.
				s.unmark(mine[i : i+1])
			}
		}
	}
	// A put of an unanswered set is known by its record and its lease:
	// the owner's number is this monitor run's, and the lease this
	// session's.
	for i, name := range doubts {
		d, key := pending[i], s.key(name)
		r, err := s.client.Txn(octx).
			If(clientv3.Compare(clientv3.Value(key), "=", encodeRecord(s.machine, owner, d.ref)),
				clientv3.Compare(clientv3.LeaseValue(key), "=", clientv3.LeaseID(d.lease))).
			Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			s.redoubt(doubts[i:], pending[i:])
			return fail(err)
		}
		if r.Succeeded {
			s.applyDeletes(doubts[i:i+1], r.Header.Revision)
		}
	}
	return nil
}

// redoubt notes again the unanswered sets of list that a Release could
// not settle, unless a later set of the same names has.
func (s *Names) redoubt(list []string, ds []doubt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, name := range list {
		if _, ok := s.unsure[name]; !ok {
			if _, held := s.mine[name]; !held {
				s.unsure[name] = ds[i]
				s.unburyLocked(name, ds[i])
			}
		}
	}
}

// Close ends every watch and wait; later calls fail with names.ErrClosed.
// The names stay in etcd under the machine's lease, and so does the put
// of a set without an answer that etcd does after Close, or a late put
// not yet deleted: Machine.Close revokes the lease.
func (s *Names) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	<-s.done
	<-s.reaped
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ws := range s.waiters {
		for _, w := range ws {
			close(w)
		}
	}
	s.waiters = nil
	for w := range s.watchers {
		s.dropLocked(w, names.ErrClosed)
	}
	return nil
}
