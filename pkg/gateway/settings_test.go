package gateway

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/callmeta"
)

func etcdClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// A clamp written to etcd changes admission within one watch round trip, on
// a running gateway; a malformed value is rejected and the last good
// settings stay; deleting the key restores the configured values.
func TestSettingsFromEtcd(t *testing.T) {
	endpoints := etcdtest.StartEtcd(t)
	cli := etcdClient(t, endpoints)
	v := startVerifier(t, nil)
	cfg := gatewayConfig(v.addr)
	cfg.EtcdEndpoints = endpoints
	cfg.Admission.InitialLimit, cfg.Admission.MinLimit = 20, 20
	// Room at the verifier beyond its 2 workers, so that the fleet's
	// capacity does not cap the limit under what this test sets.
	cfg.VerifierQueueDelay = time.Minute
	gw := startGateway(t, cfg)
	gw.waitServing(t, 1)
	ctx := context.Background()
	key := cfg.SettingsKey

	// Our own watch on the key: the gateway must apply a change within a
	// small slack of when a watcher sees it.
	wch := cli.Watch(ctx, key)
	put := func(value string) (seen time.Duration) {
		t.Helper()
		start := time.Now()
		if _, err := cli.Put(ctx, key, value); err != nil {
			t.Fatal(err)
		}
		<-wch
		return time.Since(start)
	}

	start := time.Now()
	seen := put(`{"clamp": 1}`)
	waitFor(t, 2*time.Second, "clamp applied", func() bool { return gw.g.limiter.Limit() == 1 })
	t.Logf("clamp applied after %v (a watcher saw the write after %v)", time.Since(start), seen)

	// Admission changed: with one call in flight, the next is refused.
	v.slow(t, 100)
	stored := storedHash("pw", 2048, 1)
	critical := callmeta.AppendOutgoing(ctx, callmeta.Facts{Priority: callmeta.Critical})
	done := make(chan error, 1)
	go func() {
		_, err := gw.client.Verify(critical, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
		done <- err
	}()
	waitFor(t, 5*time.Second, "one call in flight", func() bool { return gw.g.limiter.InFlight() == 1 })
	_, err := gw.client.Verify(critical, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
	if code(err) != codes.ResourceExhausted {
		t.Errorf("second call under clamp 1: %v, want RESOURCE_EXHAUSTED", err)
	}
	if err := <-done; err != nil {
		t.Errorf("first call: %v", err)
	}

	t.Run("malformed keeps the last good", func(t *testing.T) {
		for i, bad := range []string{`{"clamp": -1}`, `{"clamp": 3, "typo": 1}`, `not json`, `{"batch_share": 2}`,
			// Valid alone, but batch would outrank interactive retries.
			`{"clamp": 3, "batch_share": 0.9}`} {
			put(bad)
			waitFor(t, 2*time.Second, "rejection counted", func() bool {
				return gw.metric(t, "levee_gateway_config_errors_total", nil) == float64(i+1)
			})
			if got := gw.g.limiter.Limit(); got != 1 {
				t.Errorf("after %s: limit %d, want the last good clamp 1", bad, got)
			}
		}
	})

	t.Run("several fields", func(t *testing.T) {
		put(`{"clamp": 12, "critical_reserve": 0.5, "batch_share": 0.4, "autopilot": false, "client_timeout": "3s"}`)
		waitFor(t, 2*time.Second, "settings applied", func() bool { return gw.g.limiter.Limit() == 12 })
		if got := gw.g.limiter.Threshold(admissionClass(callmeta.Interactive, false)); got != 6 {
			t.Errorf("interactive threshold %d with critical_reserve 0.5 of 12, want 6", got)
		}
		if gw.g.auto.enabled.Load() || gw.g.auto.clientTimeout() != 3*time.Second {
			t.Errorf("autopilot enabled=%v timeout=%v, want false, 3s", gw.g.auto.enabled.Load(), gw.g.auto.clientTimeout())
		}
	})

	t.Run("delete restores the configuration", func(t *testing.T) {
		if _, err := cli.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Second, "clamp removed", func() bool { return gw.g.limiter.Snapshot().Clamp == 0 })
		if got := gw.g.limiter.Limit(); got < 20 {
			t.Errorf("limit %d after the clamp was deleted, want the adaptive ≥ 20", got)
		}
	})
}
