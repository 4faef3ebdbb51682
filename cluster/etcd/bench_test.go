package etcd

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/chanos/chanos/internal/testkit/etcdtest"
	"github.com/chanos/chanos/names/storetest"
)

// The benchmarks compare the store with the raw etcd client doing the
// same work, against one real etcd member: the figures of chanos bench
// names (docs/cluster.md), as ratios in one run.

func benchMachines(b *testing.B) (*etcdtest.Cluster, *Machine, *Machine) {
	ec := etcdtest.Start(b, etcdtest.Options{})
	cluster := freshCluster()
	open := func(id uint64) *Machine {
		m, err := Open(context.Background(), Config{Endpoints: ec.Endpoints(), Cluster: cluster, Machine: id, Logger: quiet()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		return m
	}
	return ec, open(1), open(2)
}

// benchRun numbers the runs of a benchmark within the process (-count),
// which set names of their own: a name set by an earlier run is taken.
var benchRun atomic.Int64

func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	_, m, _ := benchMachines(b)
	if err := m.Names().Set(ctx, "bench", storetest.Ref(1), 1); err != nil {
		b.Fatal(err)
	}
	b.Run("transport=chanos", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Names().Get(ctx, "bench"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("transport=etcd", func(b *testing.B) {
		key := m.Names().key("bench")
		for b.Loop() {
			if _, err := m.client.Get(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkSet(b *testing.B) {
	ctx := context.Background()
	_, m, _ := benchMachines(b)
	b.Run("transport=chanos", func(b *testing.B) {
		run, i := benchRun.Add(1), 0
		for b.Loop() {
			i++
			if err := m.Names().Set(ctx, fmt.Sprintf("set.%d.%d", run, i), storetest.Ref(1), 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The raw Txn, as the store writes it (with the lease), once under
	// the names' prefix, which both machines' caches watch, and once
	// under a prefix nobody watches: the difference is what the watches'
	// events cost a write on this machine.
	for _, under := range []struct{ transport, prefix string }{
		{"etcd", m.Names().key("")},
		{"etcd-unwatched", "/chanos-bench-unwatched/"},
	} {
		b.Run("transport="+under.transport, func(b *testing.B) {
			lease := clientv3.LeaseID(m.Session().Lease())
			val := encodeRecord(1, 1, storetest.Ref(1))
			run, i := benchRun.Add(1), 0
			for b.Loop() {
				i++
				key := fmt.Sprintf("%sraw.%d.%d", under.prefix, run, i)
				_, err := m.client.Txn(ctx).
					If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
					Then(clientv3.OpPut(key, val, clientv3.WithLease(lease))).
					Else(clientv3.OpGet(key)).Commit()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWaitFor: the time from a set on one machine to the wake-up of
// a WaitFor on another, against a raw watch event for a raw put.
func BenchmarkWaitFor(b *testing.B) {
	ctx := context.Background()
	_, a, other := benchMachines(b)
	b.Run("transport=chanos", func(b *testing.B) {
		run, i := benchRun.Add(1), 0
		for b.Loop() {
			i++
			name := fmt.Sprintf("wait.%d.%d", run, i)
			done := make(chan error, 1)
			go func() {
				_, err := other.Names().WaitFor(ctx, name)
				done <- err
			}()
			if err := a.Names().Set(ctx, name, storetest.Ref(1), 1); err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("transport=etcd", func(b *testing.B) {
		prefix := "/bench-raw/"
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wch := other.client.Watch(wctx, prefix, clientv3.WithPrefix())
		time.Sleep(100 * time.Millisecond) // the watch is registered
		i := 0
		for b.Loop() {
			i++
			if _, err := a.client.Put(ctx, fmt.Sprintf("%s%d", prefix, i), "x"); err != nil {
				b.Fatal(err)
			}
			if resp := <-wch; resp.Err() != nil {
				b.Fatal(resp.Err())
			}
		}
	})
}
