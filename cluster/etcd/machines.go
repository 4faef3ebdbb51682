package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/chanos/chanos/names"
)

// ErrMachineTaken: another live machine is registered under this
// machine's id.
var ErrMachineTaken = errors.New("machine id held by another machine")

// MachineInfo is a machine's record, the JSON value of the key
// /chanos/<cluster>/machines/<id>, put under the machine's lease: it is
// there exactly as long as the machine is alive and in touch with etcd.
//
//	{"id": 3, "name": "rack2-a", "addr": "10.0.0.3:7070",
//	 "identity": "sha256:...", "version": "v0.4.0",
//	 "load": {"domains": 12, "cpu": 0.35}}
type MachineInfo struct {
	// ID is the machine's id (Config.Machine).
	ID uint64 `json:"id"`
	// Name is a name for people, e.g. the host name.
	Name string `json:"name"`
	// Addr is the host:port its net interconnect listens on.
	Addr string `json:"addr"`
	// Identity is the fingerprint of the machine's public key, opaque
	// here; the other machines check it when they connect.
	Identity string `json:"identity"`
	// Version is the chanos version the monitor runs.
	Version string `json:"version"`
	// Load is what the machine carries, as of its last SetLoad.
	Load Load `json:"load"`
}

// Load is a machine's load.
type Load struct {
	// Domains is the number of domains joined to its monitor.
	Domains int `json:"domains"`
	// CPU is the machine's CPU use over the last interval, from 0 (idle)
	// to 1 (every core busy).
	CPU float64 `json:"cpu"`
}

// Registry is the cluster's list of machines, as one machine sees it: its
// own record, kept under its lease, and everyone's, kept by a watch.
type Registry struct {
	client  *clientv3.Client
	sess    *Session
	machine uint64
	prefix  string
	opTO    time.Duration
	log     *slog.Logger

	mu       sync.Mutex
	own      *MachineInfo // what Register was given, re-put after a lease loss
	machines map[uint64]MachineInfo
	rev      int64
	synced   bool
	changed  chan struct{} // closed (and replaced) at every change
	closed   bool

	cancel context.CancelFunc
	done   chan struct{}
}

func newRegistry(ctx context.Context, client *clientv3.Client, sess *Session, cfg *Config) (*Registry, error) {
	r := &Registry{
		client:   client,
		sess:     sess,
		machine:  cfg.Machine,
		prefix:   "/chanos/" + cfg.Cluster + "/machines/",
		opTO:     cfg.OpTimeout,
		log:      cfg.Logger,
		machines: map[uint64]MachineInfo{},
		changed:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	if err := r.resync(ctx); err != nil {
		return nil, unavailable(ctx, "load the machines", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	sess.OnFresh(func(int64) { go r.reregister(runCtx) })
	go r.run(runCtx)
	return r, nil
}

func (r *Registry) key(id uint64) string { return r.prefix + strconv.FormatUint(id, 10) }

// Register puts this machine's record under its lease, or updates it. It
// fails with ErrMachineTaken if another live machine holds the id. After a
// lease loss the registry puts the record again under the fresh lease by
// itself (the id is this machine's; names are never put again).
func (r *Registry) Register(ctx context.Context, info MachineInfo) error {
	info.ID = r.machine
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return names.ErrClosed
	}
	own := info
	r.own = &own
	r.mu.Unlock()
	return r.put(ctx, info)
}

// SetLoad updates the load in this machine's record.
func (r *Registry) SetLoad(ctx context.Context, load Load) error {
	r.mu.Lock()
	if r.own == nil {
		r.mu.Unlock()
		return errors.New("set load: the machine is not registered")
	}
	r.own.Load = load
	info := *r.own
	r.mu.Unlock()
	return r.put(ctx, info)
}

// put writes info if the key is free or already under this machine's
// lease: one machine never overwrites another's record.
func (r *Registry) put(ctx context.Context, info MachineInfo) error {
	lease := r.sess.Lease()
	if lease == 0 {
		return fmt.Errorf("register machine %d: %w: the machine's lease was lost and is being renewed", info.ID, names.ErrUnavailable)
	}
	b, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("register machine %d: %w", info.ID, err)
	}
	octx, cancel := context.WithTimeout(ctx, r.opTO)
	defer cancel()
	key := r.key(info.ID)
	put := clientv3.OpPut(key, string(b), clientv3.WithLease(clientv3.LeaseID(lease)))
	resp, err := r.client.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(put).
		Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(key), "=", lease)}, []clientv3.Op{put}, nil)).
		Commit()
	if err != nil {
		return unavailable(ctx, fmt.Sprintf("register machine %d", info.ID), err)
	}
	if !resp.Succeeded && !resp.Responses[0].GetResponseTxn().Succeeded {
		return fmt.Errorf("register machine %d: %w", info.ID, ErrMachineTaken)
	}
	return r.waitRev(octx, resp.Header.Revision)
}

func (r *Registry) reregister(ctx context.Context) {
	r.mu.Lock()
	own := r.own
	r.mu.Unlock()
	if own == nil {
		return
	}
	for ctx.Err() == nil {
		err := r.put(ctx, *own)
		if err == nil {
			r.log.Info("etcd: the machine registered again under its fresh lease", "machine", r.machine)
			return
		}
		if errors.Is(err, ErrMachineTaken) {
			r.log.Error("etcd: while this machine was cut off, another registered under its id", "machine", r.machine)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(retryInterval):
		}
	}
}

// Machines returns the live machines, sorted by id.
func (r *Registry) Machines() []MachineInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]MachineInfo, 0, len(r.machines))
	for _, m := range r.machines {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b MachineInfo) int { return cmpUint(a.ID, b.ID) })
	return out
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Changed returns a channel that is closed at the next change to the
// list: take it, read Machines, then wait on it, and no change is missed.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

func (r *Registry) bumpLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Registry) waitRev(ctx context.Context, rev int64) error {
	for {
		r.mu.Lock()
		if r.closed || r.rev >= rev {
			r.mu.Unlock()
			return nil
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			// The record is in etcd; only this machine's view lags.
			return nil
		}
	}
}

func (r *Registry) run(ctx context.Context) {
	defer close(r.done)
	r.mu.Lock()
	from := r.rev // as loaded by the constructor
	r.mu.Unlock()
	follow(ctx, r.client, r.prefix, true, from, retryInterval,
		func(ctx context.Context) (int64, error) {
			if err := r.resync(ctx); err != nil {
				return 0, err
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.rev, nil
		},
		func(evs []*clientv3.Event) {
			r.mu.Lock()
			for _, ev := range evs {
				id, err := strconv.ParseUint(strings.TrimPrefix(string(ev.Kv.Key), r.prefix), 10, 64)
				if err != nil {
					continue
				}
				if ev.Type == mvccpb.DELETE {
					delete(r.machines, id)
				} else if info, err := decodeMachine(ev.Kv.Value); err == nil {
					r.machines[id] = info
				}
				r.rev = max(r.rev, ev.Kv.ModRevision)
			}
			r.bumpLocked()
			r.mu.Unlock()
		},
		func(error) {
			r.mu.Lock()
			r.synced = false
			r.mu.Unlock()
		})
}

func decodeMachine(v []byte) (MachineInfo, error) {
	var info MachineInfo
	err := json.Unmarshal(v, &info)
	return info, err
}

func (r *Registry) resync(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), r.opTO)
	defer cancel()
	resp, err := r.client.Get(rctx, r.prefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	fresh := map[uint64]MachineInfo{}
	for _, kv := range resp.Kvs {
		id, err := strconv.ParseUint(strings.TrimPrefix(string(kv.Key), r.prefix), 10, 64)
		if err != nil {
			continue
		}
		if info, err := decodeMachine(kv.Value); err == nil {
			fresh[id] = info
		}
	}
	r.mu.Lock()
	r.machines = fresh
	r.rev = max(r.rev, resp.Header.Revision)
	r.synced = true
	r.bumpLocked()
	r.mu.Unlock()
	return nil
}

func (r *Registry) close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	<-r.done
}
