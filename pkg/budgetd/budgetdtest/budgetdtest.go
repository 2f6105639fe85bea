// Package budgetdtest runs budgetd replicas and etcd inside a test: real
// gRPC on 127.0.0.1, a real embedded etcd in t.TempDir(), everything
// stopped in t.Cleanup.
//
// Replicas started here use test timings (see StartReplica) so that
// elections and failovers take a few seconds at most.
package budgetdtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/pkg/budgetd"
)

// Etcd is a single-node embedded etcd that clients reach through a TCP
// proxy, so that Stop cuts every connection at once, as a crashed etcd
// would (etcd's own graceful stop waits for open watch streams).
type Etcd struct {
	t     testing.TB
	cfg   budgetd.EmbeddedEtcdConfig
	proxy *proxy

	mu sync.Mutex
	e  *budgetd.EmbeddedEtcd
}

// StartEtcd starts an embedded etcd in t.TempDir() on free 127.0.0.1
// ports, stopped in t.Cleanup, and returns its client endpoints.
func StartEtcd(t testing.TB) (endpoints []string) {
	return NewEtcd(t).Endpoints()
}

// NewEtcd is StartEtcd returning a handle that can stop and restart etcd.
func NewEtcd(t testing.TB) *Etcd {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "etcd")
	var lastErr error
	for range 3 { // a free port can be taken between choosing and binding it
		ports := freePorts(t, 2)
		cfg := budgetd.EmbeddedEtcdConfig{
			DataDir:   dir,
			ClientURL: "http://" + ports[0],
			PeerURL:   "http://" + ports[1],
			Name:      "test",
		}
		e, err := budgetd.StartEmbeddedEtcd(cfg, Logger(t), slog.LevelError)
		if err != nil {
			lastErr = err
			os.RemoveAll(dir)
			continue
		}
		h := &Etcd{t: t, cfg: cfg, e: e}
		h.proxy = newProxy(t, strings.TrimPrefix(cfg.ClientURL, "http://"))
		t.Cleanup(h.close)
		return h
	}
	t.Fatalf("start etcd: %v", lastErr)
	return nil
}

// Endpoints are the client URLs (through the proxy); they stay the same
// across Stop and Restart.
func (e *Etcd) Endpoints() []string { return []string{"http://" + e.proxy.addr()} }

// Stop cuts every client connection and stops etcd; clients see it gone.
func (e *Etcd) Stop() {
	e.t.Helper()
	e.proxy.setDown(true)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.e != nil {
		e.e.Close()
		e.e = nil
	}
}

// Restart starts etcd again on the same data and ports after Stop.
func (e *Etcd) Restart() {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.e == nil {
		var err error
		deadline := time.Now().Add(10 * time.Second)
		for {
			e.e, err = budgetd.StartEmbeddedEtcd(e.cfg, Logger(e.t), slog.LevelError)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond) // the old listeners may linger a moment
		}
		if err != nil {
			e.t.Fatalf("restart etcd: %v", err)
		}
	}
	e.proxy.setDown(false)
}

func (e *Etcd) close() {
	e.proxy.close()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.e != nil {
		e.e.Close()
		e.e = nil
	}
}

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
		ports := freePorts(t, 2)
		cfg.EmbeddedEtcd = budgetd.EmbeddedEtcdConfig{
			DataDir:   filepath.Join(t.TempDir(), "etcd"),
			ClientURL: "http://" + ports[0],
			PeerURL:   "http://" + ports[1],
			Name:      "test",
		}
	}
	cfg.RefreshInterval = 200 * time.Millisecond
	cfg.LeaseValidity = time.Second
	cfg.ForgetAfter = 3 * time.Second
	cfg.ElectionTTL = 2 * time.Second
	cfg.Logger = Logger(t)
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

// Logger returns a logger into t's log, at the level named by the
// environment variable BUDGETD_TEST_LOG (debug, info, warn, error; default
// warn).
func Logger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if v := os.Getenv("BUDGETD_TEST_LOG"); v != "" {
		_ = level.UnmarshalText([]byte(v))
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = testWriter{}

// freePorts returns n distinct free 127.0.0.1 ports, as host:port.
func freePorts(t testing.TB, n int) []string {
	t.Helper()
	out := make([]string, 0, n)
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// proxy forwards TCP connections from a fixed local address to target;
// while down it refuses (closes) every connection.
type proxy struct {
	target string
	lis    net.Listener
	wg     sync.WaitGroup

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{target: target, lis: lis, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	return p
}

func (p *proxy) addr() string { return p.lis.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	c.Close()
}

func (p *proxy) serve(c net.Conn) {
	defer p.untrack(c)
	b, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return
	}
	if !p.track(b) {
		b.Close()
		return
	}
	defer p.untrack(b)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(b, c)
		b.Close()
	})
	_, _ = io.Copy(c, b)
	c.Close()
	wg.Wait()
}

func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *proxy) close() {
	p.setDown(true)
	p.lis.Close()
	p.wg.Wait()
}

// String describes the handle for test logs.
func (e *Etcd) String() string { return fmt.Sprintf("etcd %s (%s)", e.Endpoints()[0], e.cfg.DataDir) }
