// Package budgetdtest runs budgetd replicas inside a test: real gRPC on
// 127.0.0.1, on a real etcd (internal/etcdtest), everything stopped in
// t.Cleanup.
//
// Replicas started here use test timings (see StartReplica) so that
// elections and failovers take a few seconds at most.
package budgetdtest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/budgetd"
)

// Replica is one running budgetd replica.
type Replica struct {
	t      testing.TB
	srv    *budgetd.Server
	addr   string
	maddr  string
	cancel context.CancelFunc
	done   chan error

	stopOnce sync.Once
	mu       sync.Mutex
	cc       *grpc.ClientConn
}

// TestConfig is the configuration StartReplica starts from: DefaultConfig
// with short timings (refresh 200ms, leases 1s, forget after 3s, election
// TTL 2s, etcd's shortest) and a logger into the test's log.
func TestConfig(t testing.TB, endpoints []string) budgetd.Config {
	cfg := budgetd.DefaultConfig()
	cfg.ListenAddr, cfg.MetricsAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.EtcdEndpoints = endpoints
	if len(endpoints) == 0 {
		cfg.EmbeddedEtcd = etcdtest.Config(t)
	}
	cfg.RefreshInterval = 200 * time.Millisecond
	cfg.LeaseValidity = time.Second
	cfg.ForgetAfter = 3 * time.Second
	cfg.ElectionTTL = 2 * time.Second
	cfg.Logger = etcdtest.Logger(t)
	return cfg
}

// StartReplica serves a replica on 127.0.0.1:0 (and its status page and
// metrics on another free port) against endpoints (nil: its own embedded
// etcd), configured by TestConfig and then mutate (may be nil). It is
// stopped in t.Cleanup.
func StartReplica(t testing.TB, endpoints []string, mutate func(*budgetd.Config)) *Replica {
	t.Helper()
	cfg := TestConfig(t, endpoints)
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := budgetd.New(cfg)
	if err != nil {
		t.Fatalf("budgetd.New: %v", err)
	}
	lis, err := net.Listen("tcp", cfg.ListenAddr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var mlis net.Listener
	if cfg.MetricsAddr != "" {
		if mlis, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			lis.Close()
			t.Fatalf("listen: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Replica{t: t, srv: srv, addr: lis.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	if mlis != nil {
		r.maddr = mlis.Addr().String()
	}
	go func() { r.done <- srv.Serve(ctx, lis, mlis) }()
	t.Cleanup(r.Stop)
	return r
}

// Addr is the replica's gRPC address.
func (r *Replica) Addr() string { return r.addr }

// MetricsAddr is the replica's HTTP address (status page and /metrics).
func (r *Replica) MetricsAddr() string { return r.maddr }

// Server is the replica's server.
func (r *Replica) Server() *budgetd.Server { return r.srv }

// IsLeader says whether the replica leads and grants now.
func (r *Replica) IsLeader() bool { return r.srv.IsLeader() }

// Client returns a BudgetService client connected to the replica, closed
// by Stop.
func (r *Replica) Client() budgetv1.BudgetServiceClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cc == nil {
		cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			r.t.Fatalf("dial %s: %v", r.addr, err)
		}
		r.cc = cc
	}
	return budgetv1.NewBudgetServiceClient(r.cc)
}

// Stop cancels the replica and waits until Serve has returned; a Serve
// error fails the test. It is idempotent.
func (r *Replica) Stop() {
	r.stopOnce.Do(func() {
		r.cancel()
		if err := <-r.done; err != nil {
			r.t.Errorf("replica %s: Serve: %v", r.addr, err)
		}
		r.mu.Lock()
		if r.cc != nil {
			r.cc.Close()
			r.cc = nil
		}
		r.mu.Unlock()
	})
}

// WaitLeader waits up to timeout until exactly one of replicas leads, and
// returns it.
func WaitLeader(t testing.TB, timeout time.Duration, replicas ...*Replica) *Replica {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var leaders []*Replica
		for _, r := range replicas {
			if r.IsLeader() {
				leaders = append(leaders, r)
			}
		}
		if len(leaders) == 1 {
			return leaders[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %d leaders among %d replicas, want 1", timeout, len(leaders), len(replicas))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PutConfig stores json as the settings of key (budgetd.DefaultConfigKey
// for the default) under prefix ("" for the default prefix).
func PutConfig(t testing.TB, endpoints []string, prefix, key string, json string) {
	t.Helper()
	withClient(t, endpoints, func(ctx context.Context, cli *clientv3.Client) error {
		_, err := cli.Put(ctx, configKey(prefix, key), json)
		return err
	})
}

// DeleteConfig removes the settings of key under prefix.
func DeleteConfig(t testing.TB, endpoints []string, prefix, key string) {
	t.Helper()
	withClient(t, endpoints, func(ctx context.Context, cli *clientv3.Client) error {
		_, err := cli.Delete(ctx, configKey(prefix, key))
		return err
	})
}

func configKey(prefix, key string) string {
	if prefix == "" {
		prefix = budgetd.DefaultConfig().Prefix
	}
	return prefix + "config/" + key
}

func withClient(t testing.TB, endpoints []string, fn func(context.Context, *clientv3.Client) error) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fn(ctx, cli); err != nil {
		t.Fatalf("etcd: %v", err)
	}
}
