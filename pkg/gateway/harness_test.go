package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"golang.org/x/crypto/argon2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/breaker/breakertest"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/deadline"
	"github.com/leveehq/levee/pkg/verifier"
	"github.com/leveehq/levee/pkg/verify"
)

func TestMain(m *testing.M) {
	// These tests measure time: not beside the lab's (see testlock).
	testlock.Shared()
	goleak.VerifyTestMain(m)
}

func quietLogger() *slog.Logger {
	if os.Getenv("LEVEE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testDeadline is generous: the race detector on two cores is slow.
var testDeadline = deadline.Config{Default: 10 * time.Second, Max: time.Minute, Margin: 20 * time.Millisecond}

// verifierConfig is a small, fast verifier: cheap Argon2 policy, the
// capacity knob on so tests can stretch service times without burning CPU.
func verifierConfig() verifier.Config {
	cfg := verifier.DefaultConfig()
	cfg.ListenAddr, cfg.MetricsAddr = "", ""
	cfg.Workers = 2
	cfg.QueueCapacity = 64
	cfg.MaxQueueWait = 30 * time.Second
	cfg.DrainTimeout = 10 * time.Second
	cfg.Deadline = testDeadline
	cfg.Policy = verify.Policy{Params: verify.Params{Memory: 64, Iterations: 1, Parallelism: 1}, SaltLen: 16, KeyLen: 32}
	cfg.Limits = verify.DefaultLimits()
	cfg.EnableCapacityKnob = true
	cfg.Logger = quietLogger()
	cfg.Registry = prometheus.NewRegistry()
	return cfg
}

// testVerifier is one verifier serving on 127.0.0.1.
type testVerifier struct {
	addr   string
	srv    *verifier.Server
	cc     *grpc.ClientConn
	admin  verifyv1.VerifierAdminServiceClient
	cancel context.CancelFunc
	done   chan error
}

func startVerifier(t *testing.T, mutate func(*verifier.Config)) *testVerifier {
	t.Helper()
	cfg := verifierConfig()
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := verifier.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	v := &testVerifier{addr: lis.Addr().String(), srv: srv, cancel: cancel, done: make(chan error, 1)}
	go func() { v.done <- srv.Serve(ctx, lis, nil) }()
	v.cc = dial(t, v.addr)
	v.admin = verifyv1.NewVerifierAdminServiceClient(v.cc)
	t.Cleanup(func() { v.stop(t) })
	return v
}

// stop drains the verifier and waits for Serve to return; idempotent.
func (v *testVerifier) stop(t *testing.T) {
	t.Helper()
	v.cancel()
	if err, ok := <-v.done; ok {
		close(v.done)
		if err != nil {
			t.Errorf("verifier %s: %v", v.addr, err)
		}
	}
}

// kill stops the verifier at once, as a crash would: connections drop,
// nothing drains.
func (v *testVerifier) kill() {
	v.srv.Close()
}

// slow stretches every hash on v to about factor × its CPU time.
func (v *testVerifier) slow(t *testing.T, factor float64) {
	t.Helper()
	if _, err := v.admin.SetCapacity(context.Background(), &verifyv1.SetCapacityRequest{
		WorkerFraction: 1, Slowdown: factor}); err != nil {
		t.Fatal(err)
	}
}

func (v *testVerifier) metric(t *testing.T, name string, labels map[string]string) float64 {
	return gather(t, v.srv.Registry(), name, labels)
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// gatewayConfig is a gateway over the given static verifiers.
func gatewayConfig(verifiers ...string) Config {
	cfg := DefaultConfig()
	cfg.ListenAddr, cfg.MetricsAddr = "", ""
	cfg.Verifiers = verifiers
	cfg.Deadline = testDeadline
	cfg.Logger = quietLogger()
	cfg.Registry = prometheus.NewRegistry()
	cfg.Autopilot.Enabled = false
	return cfg
}

// testGateway is one gateway serving on 127.0.0.1 and a client of it.
type testGateway struct {
	addr   string
	g      *Gateway
	clock  *breakertest.Clock // nil: the system clock
	cc     *grpc.ClientConn
	client verifyv1.VerifyServiceClient
	cancel context.CancelFunc
	done   chan error
}

func startGateway(t *testing.T, cfg Config) *testGateway {
	t.Helper()
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tg := &testGateway{addr: lis.Addr().String(), g: g, cancel: cancel, done: make(chan error, 1)}
	go func() { tg.done <- g.Serve(ctx, lis, nil) }()
	tg.cc = dial(t, tg.addr)
	tg.client = verifyv1.NewVerifyServiceClient(tg.cc)
	t.Cleanup(func() {
		cancel()
		if err := <-tg.done; err != nil {
			t.Errorf("gateway: %v", err)
		}
	})
	return tg
}

// startGatewayOnFakeClock is startGateway on a clock that stands still
// until the test advances it (tg.clock): the gateway's per-second work then
// runs when the test calls tg.g.tick() (the housekeeping's real ticks
// change nothing meanwhile), and its limiter and breakers keep the same
// time.
func startGatewayOnFakeClock(t *testing.T, cfg Config) *testGateway {
	t.Helper()
	clock := breakertest.NewClock(time.Now())
	cfg.Clock = clock
	tg := startGateway(t, cfg)
	tg.clock = clock
	return tg
}

// waitServing waits until the gateway sees n verifiers serving.
func (tg *testGateway) waitServing(t *testing.T, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, "verifiers serving", func() bool {
		serving := 0
		for _, b := range tg.g.verifiers.List() {
			if b.Eligible() {
				serving++
			}
		}
		return serving == n
	})
}

func (tg *testGateway) metric(t *testing.T, name string, labels map[string]string) float64 {
	return gather(t, tg.g.Registry(), name, labels)
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gather sums the samples of metric name whose labels include labels.
func gather(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// storedHash returns an argon2id PHC string for password with the given
// memory (KiB) and iterations.
// learnService sends stored through the gateway until every verifier it
// knows has answered at least once, so that each one's queue is sized by its
// service time rather than the one-per-worker it gets before.
func (gw *testGateway) learnService(t *testing.T, stored string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		all := true
		for _, b := range gw.g.verifiers.List() {
			all = all && b.ServiceTime() > 0
		}
		if all {
			return
		}
		if _, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")}); err != nil {
			t.Fatalf("learning the verifiers' service times: %v", err)
		}
	}
}

func storedHash(password string, memKiB, iters uint32) string {
	salt := []byte("levee-test-salt!")
	key := argon2.IDKey([]byte(password), salt, iters, memKiB, 1, 32)
	return strings.Join([]string{"", "argon2id", "v=19",
		"m=" + itoa(memKiB) + ",t=" + itoa(iters) + ",p=1",
		base64.RawStdEncoding.EncodeToString(salt), base64.RawStdEncoding.EncodeToString(key)}, "$")
}

func itoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for v > 0 {
		b = append([]byte{byte('0' + v%10)}, b...)
		v /= 10
	}
	return string(b)
}

func code(err error) codes.Code { return status.Code(err) }

// tally counts outcomes by a string key, safely from many goroutines.
type tally struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *tally) add(key string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[key]++
	c.mu.Unlock()
}

func (c *tally) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

func (c *tally) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

var errNotYet = errors.New("not yet")

type verifyHash = verify.Hash

func admissionClass(p callmeta.Priority, retry bool) admission.Class {
	return admission.Class{Priority: p, Retry: retry}
}
