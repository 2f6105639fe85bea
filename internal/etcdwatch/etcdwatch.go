// Package etcdwatch keeps a view of etcd keys current: a full read, then a
// watch from the revision after it, and on a compaction or any watch error a
// full read again, with jittered backoff between failures. Whoever follows
// keys this way never misses a change and never applies one twice out of
// order.
package etcdwatch

import (
	"context"
	"log/slog"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leveehq/levee/internal/backoff"
)

// Handler receives the state of the followed keys. Calls are sequential.
type Handler interface {
	// Snapshot replaces the whole view: kvs are every key present.
	Snapshot(kvs []*mvccpb.KeyValue)
	// Events applies changes made after the last snapshot, in order.
	Events(evs []*clientv3.Event)
}

// Follow keeps h's view of key (every key under it if prefix) equal to etcd
// until ctx ends. Failures are logged at WARN under what, and retried with
// jittered backoff from 50 ms up to maxBackoff; the last view stays in force
// meanwhile. Follow returns when ctx ends.
func Follow(ctx context.Context, cli *clientv3.Client, key string, prefix bool, h Handler,
	log *slog.Logger, what string, maxBackoff time.Duration) {
	var opts []clientv3.OpOption
	if prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	b := backoff.New(50*time.Millisecond, maxBackoff)
	for {
		resp, err := cli.Get(ctx, key, opts...)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("reading "+what+" from etcd failed; keeping the last view", "err", err)
			if !b.Wait(ctx) {
				return
			}
			continue
		}
		h.Snapshot(resp.Kvs)

		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := cli.Watch(wctx, key, append(opts, clientv3.WithRev(resp.Header.Revision+1))...)
		for wr := range wch {
			if err := wr.Err(); err != nil {
				log.Warn("watching "+what+" in etcd failed; reading it again", "err", err)
				break
			}
			if len(wr.Events) > 0 {
				h.Events(wr.Events)
			}
			b.Reset()
		}
		cancel()
		if ctx.Err() != nil || !b.Wait(ctx) {
			return
		}
	}
}
