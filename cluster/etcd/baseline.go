package etcd

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Baseline runs raw etcd operations on a machine's own etcd client, under
// the prefix /chanos/<cluster>/baseline/: what the names store is
// measured against (chanos bench names). It is for benchmarks only, and
// lets them measure etcd without importing its client.
type Baseline struct {
	client *clientv3.Client
	prefix string
	names  string // the names store's prefix, for WatchName
}

// Baseline returns the raw operations of the machine's etcd client.
func (m *Machine) Baseline() *Baseline {
	return &Baseline{client: m.client, prefix: strings.TrimSuffix(m.names.prefix, "names/") + "baseline/", names: m.names.prefix}
}

// Get reads key, a linearizable read (one round trip to the leader).
func (b *Baseline) Get(ctx context.Context, key string) error {
	_, err := b.client.Get(ctx, b.prefix+key)
	return err
}

// Create puts key if it does not exist, in one transaction, as the names
// store's set does (without the lease).
func (b *Baseline) Create(ctx context.Context, key, value string) error {
	k := b.prefix + key
	resp, err := b.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, value)).Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("baseline: %s exists", key)
	}
	return nil
}

// Put writes key.
func (b *Baseline) Put(ctx context.Context, key, value string) error {
	_, err := b.client.Put(ctx, b.prefix+key, value)
	return err
}

// DeleteAll removes every key of the baseline.
func (b *Baseline) DeleteAll(ctx context.Context) error {
	_, err := b.client.Delete(ctx, b.prefix, clientv3.WithPrefix())
	return err
}

// Watch watches key from now on: it returns once etcd has created the
// watch, and a channel that receives once per change of key, until ctx
// ends.
func (b *Baseline) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	return b.watch(ctx, b.prefix+key)
}

// WatchName is Watch of the names store's own key for name: a raw watch
// of what the store's set writes, so that a wake-up through the store
// and a raw one can follow the same set.
func (b *Baseline) WatchName(ctx context.Context, name string) (<-chan struct{}, error) {
	return b.watch(ctx, b.names+name)
}

func (b *Baseline) watch(ctx context.Context, key string) (<-chan struct{}, error) {
	wch := b.client.Watch(ctx, key, clientv3.WithCreatedNotify())
	first, ok := <-wch
	if !ok || first.Err() != nil || !first.Created {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("baseline: watch %s: %v", key, first.Err())
	}
	out := make(chan struct{}, 16)
	go func() {
		defer close(out)
		for resp := range wch {
			for range resp.Events {
				select {
				case out <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
