package verifier

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
	"go.uber.org/zap"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/registry"
)

// A verifier with etcd endpoints is registered under its target once warm,
// at its listen address, and deregistered as soon as its Serve context ends:
// while queued work still holds the drain open, long before the lease
// (a minute) could expire.
func TestRegistersWhenWarmDeregistersAtDrain(t *testing.T) {
	eps := etcdtest.StartEtcd(t)
	w := watchTarget(t, eps, registry.DefaultTarget)
	cfg := testConfig()
	cfg.EtcdEndpoints = eps
	cfg.RegistryTTL = time.Minute
	h := start(t, cfg)
	key := registry.DefaultTarget + "/" + h.addr

	w.want(endpoints.Add, key, h.addr)
	resp, err := h.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health when registered: %v, %v; want SERVING", resp.GetStatus(), err)
	}

	release, wait := h.occupy("held") // the drain waits for it
	h.cancel()
	w.want(endpoints.Delete, key, "")
	select {
	case <-h.served:
		t.Fatalf("Serve returned before the held request finished")
	default:
	}
	release()
	wantOK(t, "held Hash", wait())
	if err := h.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// Deregistration comes first in a drain: while it is pending (etcd not
// answering, so it waits out EtcdDialTimeout), health is still SERVING and
// calls are still served; NOT_SERVING follows. etcd hangs rather than
// stops: a stop closes the connections, and a deregistration sent at that
// instant fails at once instead of pending.
func TestDeregistersBeforeNotServing(t *testing.T) {
	etcd := etcdtest.NewEtcd(t)
	w := watchTarget(t, etcd.Endpoints(), registry.DefaultTarget)
	cfg := testConfig()
	cfg.Workers = 2 // one held to keep the drain open, one to serve
	cfg.EtcdEndpoints = etcd.Endpoints()
	cfg.EtcdDialTimeout = 3 * time.Second
	h := start(t, cfg)
	w.want(endpoints.Add, registry.DefaultTarget+"/"+h.addr, h.addr)
	release, wait := h.occupy("held")

	etcd.Hang()
	h.cancel()
	resp, err := h.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health while deregistering: %v, %v; want SERVING", resp.GetStatus(), err)
	}
	_, err = h.verify.Hash(context.Background(), &verifyv1.HashRequest{Password: []byte("pw")})
	wantOK(t, "Hash while deregistering", err)
	h.waitHealth("", healthpb.HealthCheckResponse_NOT_SERVING)
	release()
	wantOK(t, "held Hash", wait())
	if err := h.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// etcd unreachable at startup does not keep the verifier from serving
// direct clients; it registers once etcd is back.
func TestServesWithoutEtcdThenRegisters(t *testing.T) {
	etcd := etcdtest.NewEtcd(t)
	etcd.Stop()
	cfg := testConfig()
	cfg.EtcdEndpoints = etcd.Endpoints()
	cfg.RegistryTTL = registry.MinTTL // the retry backoff stops growing at the TTL
	h := start(t, cfg)                // returns once SERVING
	_, err := h.verify.Hash(context.Background(), &verifyv1.HashRequest{Password: []byte("pw")})
	wantOK(t, "Hash with etcd down", err)

	etcd.Restart()
	w := watchTarget(t, etcd.Endpoints(), registry.DefaultTarget)
	w.want(endpoints.Add, registry.DefaultTarget+"/"+h.addr, h.addr)
}

// A listen address nobody can dial is refused before anything is served,
// unless an advertised address is given.
func TestServeRefusesUndialableAddr(t *testing.T) {
	cfg := testConfig()
	cfg.EtcdEndpoints = []string{"http://127.0.0.1:1"} // never reached
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Serve(ctx, lis, nil)
	if err == nil || !strings.Contains(err.Error(), "AdvertiseAddr") {
		t.Fatalf("Serve on %s: %v, want an error naming AdvertiseAddr", lis.Addr(), err)
	}
	if _, err := net.Dial("tcp", strings.Replace(lis.Addr().String(), "0.0.0.0", "127.0.0.1", 1)); err == nil {
		t.Errorf("listener still open after Serve refused")
	}
}

// endpointWatch follows a naming target as a gateway's resolver does.
type endpointWatch struct {
	t       *testing.T
	ch      endpoints.WatchChannel
	pending []*endpoints.Update
}

// watchTarget watches target through its own etcd client (etcd must be
// up); both end with the test.
func watchTarget(t *testing.T, eps []string, target string) *endpointWatch {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
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
		for range ch { // its goroutine blocks on a send nobody reads
		}
	})
	return &endpointWatch{t: t, ch: ch}
}

// want waits for the next update and fails unless it is op on key (with
// addr, for an Add).
func (w *endpointWatch) want(op endpoints.Operation, key, addr string) {
	w.t.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for len(w.pending) == 0 {
		select {
		case ups, ok := <-w.ch:
			if !ok {
				w.t.Fatalf("watch closed, waiting for %v %s", op, key)
			}
			w.pending = append(w.pending, ups...)
		case <-timer.C:
			w.t.Fatalf("no update within 30s, waiting for %v %s", op, key)
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
