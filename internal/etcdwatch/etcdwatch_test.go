package etcdwatch_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/internal/etcdwatch"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// view is a Handler that keeps the followed keys in a map.
type view struct {
	mu        sync.Mutex
	kv        map[string]string
	snapshots int
}

func (v *view) Snapshot(kvs []*mvccpb.KeyValue) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.snapshots++
	v.kv = map[string]string{}
	for _, kv := range kvs {
		v.kv[string(kv.Key)] = string(kv.Value)
	}
}

func (v *view) Events(evs []*clientv3.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, ev := range evs {
		switch ev.Type {
		case mvccpb.PUT:
			v.kv[string(ev.Kv.Key)] = string(ev.Kv.Value)
		case mvccpb.DELETE:
			delete(v.kv, string(ev.Kv.Key))
		}
	}
}

func (v *view) get() (map[string]string, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]string{}
	for k, val := range v.kv {
		out[k] = val
	}
	return out, v.snapshots
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Follow reads what is there, then applies every change under the prefix in
// order, and nothing outside it. (The re-read after a failed watch is
// exercised where etcd goes away: the gateway and budgetd tests.)
func TestFollowPrefix(t *testing.T) {
	endpoints := etcdtest.StartEtcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	if _, err := cli.Put(ctx, "/p/a", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/other", "x"); err != nil {
		t.Fatal(err)
	}

	v := &view{}
	fctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		etcdwatch.Follow(fctx, cli, "/p/", true, v, slog.New(slog.NewTextHandler(io.Discard, nil)), "test keys", 100*time.Millisecond)
	}()
	defer func() {
		stop()
		<-done
	}()
	waitFor(t, "the first snapshot", func() bool { kv, n := v.get(); return n == 1 && kv["/p/a"] == "1" })

	for _, op := range []clientv3.Op{clientv3.OpPut("/p/b", "2"), clientv3.OpPut("/p/a", "3"), clientv3.OpDelete("/p/b")} {
		if _, err := cli.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the changes", func() bool {
		kv, _ := v.get()
		_, hasB := kv["/p/b"]
		return kv["/p/a"] == "3" && !hasB && len(kv) == 1
	})

	if _, err := cli.Put(ctx, "/p/c", "4"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a later write", func() bool { kv, _ := v.get(); return kv["/p/c"] == "4" })
	if kv, _ := v.get(); kv["/other"] != "" {
		t.Errorf("a key outside the prefix was followed: %v", kv)
	}
}
