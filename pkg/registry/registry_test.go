package registry_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
	"go.etcd.io/etcd/client/v3/naming/resolver"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/internal/grpctest"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/registry"
)

// Every test runs etcd clients, keep-alive loops and an embedded etcd; none
// of their goroutines may outlive the tests.
func TestMain(m *testing.M) {
	// These tests measure time: not beside the lab's (see testlock).
	testlock.Shared()
	goleak.VerifyTestMain(m)
}

// testTTL is the shortest lease etcd keeps: the tests that wait for an
// expiry wait about this long.
const testTTL = registry.MinTTL

// wait bounds every wait for etcd: an expiry after testTTL is seen within
// a second or two of it, a re-registration within a backoff of that.
const wait = 15 * time.Second

func TestValidate(t *testing.T) {
	cli := clientv3.NewCtxClient(context.Background()) // never connects
	valid := registry.Config{Client: cli, Target: registry.DefaultTarget, Addr: "10.0.0.7:7701"}
	tests := []struct {
		name string
		edit func(*registry.Config)
		want []error // nil: valid
	}{
		{"valid", func(*registry.Config) {}, nil},
		{"hostname", func(c *registry.Config) { c.Addr = "verifier-3.levee.svc:7701" }, nil},
		{"ipv6", func(c *registry.Config) { c.Addr = "[2001:db8::7]:7701" }, nil},
		{"ttl 2s", func(c *registry.Config) { c.TTL = 2 * time.Second }, nil},
		{"ttl 1m", func(c *registry.Config) { c.TTL = time.Minute }, nil},
		{"nested target", func(c *registry.Config) { c.Target = "prod/levee/verifiers" }, nil},
		{"no client", func(c *registry.Config) { c.Client = nil }, []error{registry.ErrNoClient}},
		{"no target", func(c *registry.Config) { c.Target = "" }, []error{registry.ErrInvalidTarget}},
		{"leading slash", func(c *registry.Config) { c.Target = "/levee/verifiers" }, []error{registry.ErrInvalidTarget}},
		{"trailing slash", func(c *registry.Config) { c.Target = "levee/verifiers/" }, []error{registry.ErrInvalidTarget}},
		{"no addr", func(c *registry.Config) { c.Addr = "" }, []error{registry.ErrInvalidAddr}},
		{"no port", func(c *registry.Config) { c.Addr = "10.0.0.7" }, []error{registry.ErrInvalidAddr}},
		{"no host", func(c *registry.Config) { c.Addr = ":7701" }, []error{registry.ErrInvalidAddr}},
		{"0.0.0.0", func(c *registry.Config) { c.Addr = "0.0.0.0:7701" }, []error{registry.ErrInvalidAddr}},
		{"::", func(c *registry.Config) { c.Addr = "[::]:7701" }, []error{registry.ErrInvalidAddr}},
		{"port 0", func(c *registry.Config) { c.Addr = "10.0.0.7:0" }, []error{registry.ErrInvalidAddr}},
		{"named port", func(c *registry.Config) { c.Addr = "10.0.0.7:grpc" }, []error{registry.ErrInvalidAddr}},
		{"port too big", func(c *registry.Config) { c.Addr = "10.0.0.7:65536" }, []error{registry.ErrInvalidAddr}},
		{"ttl 1s", func(c *registry.Config) { c.TTL = time.Second }, []error{registry.ErrInvalidTTL}},
		{"ttl negative", func(c *registry.Config) { c.TTL = -5 * time.Second }, []error{registry.ErrInvalidTTL}},
		{"ttl fraction", func(c *registry.Config) { c.TTL = 2500 * time.Millisecond }, []error{registry.ErrInvalidTTL}},
		{"every field", func(c *registry.Config) { *c = registry.Config{TTL: time.Millisecond} },
			[]error{registry.ErrNoClient, registry.ErrInvalidTarget, registry.ErrInvalidAddr, registry.ErrInvalidTTL}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid
			tt.edit(&cfg)
			err := cfg.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want %v", tt.want)
			}
			for _, w := range tt.want {
				if !errors.Is(err, w) {
					t.Errorf("Validate: %v does not match %v", err, w)
				}
			}
			if _, rerr := registry.Register(context.Background(), cfg); rerr == nil {
				t.Errorf("Register accepted a config Validate refuses")
			}
		})
	}
}

// A registration is visible to List, to a watch and to a gRPC client
// dialing through etcd's naming resolver; Close removes it at once (the
// lease is far from expiring) and revokes the lease.
func TestRegisterResolveClose(t *testing.T) {
	eps := etcdtest.StartEtcd(t)
	cli := newClient(t, eps)
	w := watch(t, cli, registry.DefaultTarget)
	addr := serveHealth(t)
	logs := &recorder{t: t}

	reg := register(t, registry.Config{
		Client: cli, Target: registry.DefaultTarget, Addr: addr, TTL: time.Minute, Logger: slog.New(logs),
	})
	key := registry.DefaultTarget + "/" + addr
	if reg.Key() != key {
		t.Errorf("Key() = %q, want %q", reg.Key(), key)
	}
	if !reg.Registered() {
		t.Errorf("Registered() = false after Register")
	}
	w.want(endpoints.Add, key, addr)
	if diff := cmp.Diff(endpoints.Key2EndpointMap{key: {Addr: addr}}, list(t, cli, registry.DefaultTarget)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	lease := leaseOf(t, cli, key)
	if ttl := timeToLive(t, cli, lease); ttl <= 0 || ttl > 60 {
		t.Errorf("lease TTL = %ds, want within (0, 60]", ttl)
	}

	// What a gateway does: dial the target through the resolver.
	b, err := resolver.NewBuilder(cli)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient("etcd:///"+registry.DefaultTarget, grpc.WithResolvers(b),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health through the resolver: %v, %v; want SERVING", resp.GetStatus(), err)
	}

	if err := reg.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	// Close has returned: the key is gone now, not after the minute-long TTL.
	if got := list(t, cli, registry.DefaultTarget); len(got) != 0 {
		t.Errorf("List after Close = %v, want empty", got)
	}
	if ttl := timeToLive(t, cli, lease); ttl != -1 {
		t.Errorf("lease TTL after Close = %d, want -1 (revoked)", ttl)
	}
	w.want(endpoints.Delete, key, "")
	if reg.Registered() {
		t.Errorf("Registered() = true after Close")
	}
	if err := reg.Close(ctx); err != nil {
		t.Errorf("second Close: %v, want nil", err)
	}
	if n := logs.count(slog.LevelWarn, ""); n != 0 {
		t.Errorf("%d WARN logs, want none:\n%s", n, logs)
	}
}

// A process that dies without Close (its etcd client gone, so no more
// keep-alives) stays registered until its lease expires, then disappears.
func TestDeadProcessExpires(t *testing.T) {
	eps := etcdtest.StartEtcd(t)
	observer := newClient(t, eps)
	w := watch(t, observer, registry.DefaultTarget)

	dying, err := clientv3.New(clientv3.Config{Endpoints: eps, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	logs := &recorder{t: t}
	reg := register(t, registry.Config{
		Client: dying, Target: registry.DefaultTarget, Addr: "10.0.0.7:7701", TTL: testTTL, Logger: slog.New(logs),
	})
	w.want(endpoints.Add, reg.Key(), "10.0.0.7:7701")

	dying.Close()
	died := time.Now()
	if _, ok := list(t, observer, registry.DefaultTarget)[reg.Key()]; !ok {
		t.Fatalf("the key vanished at once; want it kept until the lease expires")
	}
	w.want(endpoints.Delete, reg.Key(), "")
	t.Logf("gone %v after the process died (TTL %v)", time.Since(died).Round(time.Millisecond), testTTL)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := reg.Close(ctx); err == nil {
		t.Errorf("Close with a closed client: nil, want an error")
	}
	if reg.Registered() {
		t.Errorf("Registered() = true after the client closed")
	}
	if n := logs.count(slog.LevelWarn, "etcd client closed"); n != 1 {
		t.Errorf("%d WARN logs about the closed client, want 1:\n%s", n, logs)
	}
}

// A lease revoked from elsewhere takes the key with it; the registration
// notices, grants a new lease and adds the key again, logging WARN once and
// INFO once.
func TestReregisterAfterRevoke(t *testing.T) {
	eps := etcdtest.StartEtcd(t)
	cli := newClient(t, eps)
	operator := newClient(t, eps)
	w := watch(t, operator, registry.DefaultTarget)
	logs := &recorder{t: t}
	reg := register(t, registry.Config{
		Client: cli, Target: registry.DefaultTarget, Addr: "10.0.0.7:7701", TTL: testTTL, Logger: slog.New(logs),
	})
	w.want(endpoints.Add, reg.Key(), "10.0.0.7:7701")
	first := leaseOf(t, operator, reg.Key())

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := operator.Revoke(ctx, first); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	w.want(endpoints.Delete, reg.Key(), "")
	w.want(endpoints.Add, reg.Key(), "10.0.0.7:7701")
	waitFor(t, "Registered()", reg.Registered)
	if second := leaseOf(t, operator, reg.Key()); second == first {
		t.Errorf("key re-added under the revoked lease %x", first)
	}
	if n := logs.count(slog.LevelWarn, "registration lost"); n != 1 {
		t.Errorf("%d WARN logs of the loss, want 1:\n%s", n, logs)
	}
	if n := logs.count(slog.LevelInfo, "registered in etcd again"); n != 1 {
		t.Errorf("%d INFO logs of the re-registration, want 1:\n%s", n, logs)
	}
}

// etcd gone for longer than the TTL: the lease is lost (and the key with it
// once etcd is back and expires it); the registration comes back by itself
// and stays.
func TestEtcdOutage(t *testing.T) {
	etcd := etcdtest.NewEtcd(t)
	cli := newClient(t, etcd.Endpoints())
	logs := &recorder{t: t}
	reg := register(t, registry.Config{
		Client: cli, Target: registry.DefaultTarget, Addr: "10.0.0.7:7701", TTL: testTTL, Logger: slog.New(logs),
	})
	first := leaseOf(t, cli, reg.Key())

	etcd.Stop()
	waitFor(t, "the lease loss to be noticed", func() bool { return !reg.Registered() })
	etcd.Restart()
	waitFor(t, "Registered() after etcd returned", reg.Registered)

	second := leaseOf(t, cli, reg.Key())
	if second == first {
		t.Errorf("key still under the lease from before the outage (%x)", first)
	}
	if ttl := timeToLive(t, cli, second); ttl <= 0 {
		t.Errorf("new lease TTL = %d, want alive", ttl)
	}
	if n := logs.count(slog.LevelWarn, "registration lost"); n != 1 {
		t.Errorf("%d WARN logs of the loss, want 1:\n%s", n, logs)
	}
	if n := logs.count(slog.LevelInfo, "registered in etcd again"); n != 1 {
		t.Errorf("%d INFO logs of the re-registration, want 1:\n%s", n, logs)
	}
}

// With etcd unreachable, Register retries until its ctx ends, logs the
// failure once, and leaves nothing running (goleak checks).
func TestRegisterGivesUpWithContext(t *testing.T) {
	etcd := etcdtest.NewEtcd(t)
	cli := newClient(t, etcd.Endpoints())
	etcd.Stop()
	logs := &recorder{t: t}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	reg, err := registry.Register(ctx, registry.Config{
		Client: cli, Target: registry.DefaultTarget, Addr: "10.0.0.7:7701", TTL: testTTL, Logger: slog.New(logs),
	})
	if err == nil {
		reg.Close(context.Background())
		t.Fatalf("Register with etcd down: nil error")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Register: %v, want context.DeadlineExceeded", err)
	}
	if n := logs.count(slog.LevelWarn, "registration failed"); n != 1 {
		t.Errorf("%d WARN logs of the failure, want 1:\n%s", n, logs)
	}
}

// Close deletes the key only while it is under its own lease: a newer
// registration of the same address (a restarted process) keeps it.
func TestCloseSparesNewerRegistration(t *testing.T) {
	eps := etcdtest.StartEtcd(t)
	oldCli, newCli := newClient(t, eps), newClient(t, eps)
	cfg := registry.Config{Target: registry.DefaultTarget, Addr: "10.0.0.7:7701", TTL: testTTL, Logger: slog.New(&recorder{t: t})}
	cfg.Client = oldCli
	old := register(t, cfg)
	cfg.Client = newCli
	newer := register(t, cfg)
	lease := leaseOf(t, newCli, newer.Key())

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := old.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := leaseOf(t, newCli, newer.Key()); got != lease {
		t.Errorf("key under lease %x after the older registration closed, want %x", got, lease)
	}
}

func newClient(t *testing.T, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// register registers cfg and closes the registration when the test ends.
func register(t *testing.T, cfg registry.Config) *registry.Registration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	reg, err := registry.Register(ctx, cfg)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = reg.Close(ctx) // the tests check Close where it matters
	})
	return reg
}

// serveHealth serves gRPC health (SERVING) on 127.0.0.1:0 until the test
// ends and returns the address.
func serveHealth(t *testing.T) string {
	t.Helper()
	return grpctest.Serve(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, health.NewServer()) })
}

func list(t *testing.T, cli *clientv3.Client, target string) endpoints.Key2EndpointMap {
	t.Helper()
	em, err := endpoints.NewManager(cli, target)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	eps, err := em.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return eps
}

// leaseOf is the lease key is attached to; the test fails if key is absent.
func leaseOf(t *testing.T, cli *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("Get %s: %d keys, want 1", key, len(resp.Kvs))
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// timeToLive is the lease's remaining TTL in seconds, -1 if it is gone.
func timeToLive(t *testing.T, cli *clientv3.Client, lease clientv3.LeaseID) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	resp, err := cli.TimeToLive(ctx, lease)
	if err != nil {
		t.Fatalf("TimeToLive %x: %v", lease, err)
	}
	return resp.TTL
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", wait, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// watcher follows a target through endpoints.Manager.NewWatchChannel, as
// the naming resolver does.
type watcher struct {
	t       *testing.T
	ch      endpoints.WatchChannel
	pending []*endpoints.Update
}

func watch(t *testing.T, cli *clientv3.Client, target string) *watcher {
	t.Helper()
	em, err := endpoints.NewManager(cli, target)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := em.NewWatchChannel(ctx)
	if err != nil {
		cancel()
		t.Fatalf("NewWatchChannel: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		for range ch { // the watch goroutine blocks on a send nobody reads
		}
	})
	return &watcher{t: t, ch: ch}
}

// want waits for the next update and fails unless it is op on key (with
// addr, for an Add).
func (w *watcher) want(op endpoints.Operation, key, addr string) {
	w.t.Helper()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(w.pending) == 0 {
		select {
		case ups, ok := <-w.ch:
			if !ok {
				w.t.Fatalf("watch closed, waiting for %v %s", op, key)
			}
			w.pending = append(w.pending, ups...)
		case <-timer.C:
			w.t.Fatalf("no update within %v, waiting for %v %s", wait, op, key)
		}
	}
	up := w.pending[0]
	w.pending = w.pending[1:]
	got := endpoints.Update{Op: up.Op, Key: up.Key, Endpoint: endpoints.Endpoint{Addr: up.Endpoint.Addr}}
	want := endpoints.Update{Op: op, Key: key, Endpoint: endpoints.Endpoint{Addr: addr}}
	if diff := cmp.Diff(want, got); diff != "" {
		w.t.Fatalf("watch update (-want +got):\n%s", diff)
	}
}

// recorder is a slog.Handler that keeps every record and copies it to the
// test's log.
type recorder struct {
	t    *testing.T
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	r.t.Log(rec.Level.String() + " " + rec.Message)
	return nil
}

func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// count is the number of records at level whose message contains msg.
func (r *recorder) count(level slog.Level, msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if rec.Level == level && strings.Contains(rec.Message, msg) {
			n++
		}
	}
	return n
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, rec := range r.recs {
		b.WriteString(rec.Level.String() + " " + rec.Message)
		rec.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		b.WriteString("\n")
	}
	return b.String()
}
