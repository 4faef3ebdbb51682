package etcd

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// follow keeps a local copy of key (of every key under it, with prefix)
// in step with etcd, until ctx ends: a watch from the revision after
// from, whose events go to apply, and, whenever the watch breaks (no
// leader, compaction, etcd gone), ended with why, then a full load,
// tried every retry until it works, after whose revision the next watch
// starts. from 0 loads first. The names store, the registry of machines
// and the shared values all keep their copies this way.
func follow(ctx context.Context, c *clientv3.Client, key string, prefix bool, from int64, retry time.Duration,
	load func(context.Context) (int64, error), apply func([]*clientv3.Event), ended func(error)) {
	rev := from
	for ctx.Err() == nil {
		if rev == 0 {
			r, err := load(ctx)
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(retry):
				}
				continue
			}
			rev = r
		}
		opts := []clientv3.OpOption{clientv3.WithRev(rev + 1)}
		if prefix {
			opts = append(opts, clientv3.WithPrefix())
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		var werr error
		for resp := range c.Watch(wctx, key, opts...) {
			if werr = resp.Err(); werr != nil {
				break
			}
			apply(resp.Events)
		}
		cancel()
		if ended != nil {
			ended(werr)
		}
		rev = 0
	}
}
