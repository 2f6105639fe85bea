package verifier

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/deadline"
	"github.com/leveehq/levee/pkg/verify"
)

// Every test starts a real server with workers, gRPC and HTTP goroutines;
// none may outlive it.
func TestMain(m *testing.M) {
	// These tests measure time: not beside the lab's (see testlock).
	testlock.Shared()
	goleak.VerifyTestMain(m)
}

// testConfig is a verifier cheap enough to hash many times under the race
// detector: Argon2id with m=64 KiB, t=1, p=1 on one worker. Limits allow
// iterations far beyond the policy, so that a test can present a stored hash
// whose expected cost is seconds (it is never hashed: the tests that use one
// assert as much) without ever allocating more than 64 KiB for it.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.ListenAddr, cfg.MetricsAddr = "", ""
	cfg.Workers = 1
	cfg.QueueCapacity = 16
	cfg.MaxQueueWait = 30 * time.Second
	cfg.LIFOAfter = time.Minute // tests of the LIFO switch lower it
	cfg.DrainTimeout = 20 * time.Second
	// Margin is the hop overhead. The server counts a cancel that arrives
	// within Margin of the deadline as the deadline passing: its copy of the
	// caller's deadline runs late by the request's transit, seen at 8 ms under
	// the race detector on two cores.
	cfg.Deadline = deadline.Config{Default: 20 * time.Second, Max: time.Minute, Margin: 50 * time.Millisecond}
	cfg.Policy = verify.Policy{
		Params:  verify.Params{Memory: 64, Iterations: 1, Parallelism: 1},
		SaltLen: 16,
		KeyLen:  32,
	}
	cfg.Limits = verify.DefaultLimits()
	cfg.Limits.MaxIterations = 1 << 24
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	// Only the verifier's own series: polling them stays cheap.
	cfg.Registry = prometheus.NewRegistry()
	return cfg
}

// policyWork is testConfig's policy cost in verify.Hash.Work units.
const policyWork = 64 * 1

// harness is one running Server and a client connected to it over TCP.
//
// Every request a test sends carries a tenant (levee-tenant metadata) naming
// it; the server's beforeHash hook records the tenant of every hash it is
// about to run, in order, and holds the worker while a gate is registered
// for that tenant. A request that never shows up in hashed() was never
// hashed.
type harness struct {
	t       *testing.T
	srv     *Server
	cc      *grpc.ClientConn
	verify  verifyv1.VerifyServiceClient
	admin   verifyv1.VerifierAdminServiceClient
	health  healthpb.HealthClient
	addr    string // the gRPC listener's address
	metrics string // base URL of the metrics listener

	stopOnce sync.Once
	cancel   context.CancelFunc
	served   chan struct{}
	serveErr error

	mu     sync.Mutex
	hashes []string                 // tenants, in the order their hashes began
	began  []time.Time              // when each of them began
	gates  map[string]chan struct{} // tenant → closed when its hash may go on
}

// start serves cfg on 127.0.0.1:0 and waits until health reports SERVING
// (the warm-up is over). Everything stops when the test ends.
func start(t *testing.T, cfg Config) *harness {
	t.Helper()
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h := &harness{t: t, srv: srv, served: make(chan struct{}), gates: map[string]chan struct{}{}}
	srv.beforeHash = h.beforeHash

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	mlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		lis.Close()
		srv.Close()
		t.Fatal(err)
	}
	h.addr = lis.Addr().String()
	h.metrics = "http://" + mlis.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.served)
		h.serveErr = srv.Serve(ctx, lis, mlis)
	}()

	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.stop()
		t.Fatal(err)
	}
	h.cc = cc
	h.verify = verifyv1.NewVerifyServiceClient(cc)
	h.admin = verifyv1.NewVerifierAdminServiceClient(cc)
	h.health = healthpb.NewHealthClient(cc)
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
		_ = cc.Close()
	})
	h.waitHealth("", healthpb.HealthCheckResponse_SERVING)
	return h
}

// stop releases every gate (a held worker would block the drain), ends
// Serve's context and waits for Serve to return. It is idempotent.
func (h *harness) stop() error {
	h.stopOnce.Do(func() {
		h.releaseAll()
		h.cancel()
		<-h.served
	})
	return h.serveErr
}

func (h *harness) beforeHash(ctx context.Context, _ string) {
	tenant := callmeta.FromContext(ctx).Tenant
	h.mu.Lock()
	h.hashes = append(h.hashes, tenant)
	h.began = append(h.began, time.Now())
	gate := h.gates[tenant]
	h.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

// hold registers a gate for tenant: its hash will wait on the worker until
// the returned release is called (or the test ends).
func (h *harness) hold(tenant string) (release func()) {
	gate := make(chan struct{})
	h.mu.Lock()
	h.gates[tenant] = gate
	h.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

func (h *harness) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for tenant, gate := range h.gates {
		select {
		case <-gate:
		default:
			close(gate)
		}
		delete(h.gates, tenant)
	}
}

// hashed returns the tenants whose hashes began, in order.
func (h *harness) hashed() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.hashes)
}

// lastBegan returns when the most recent hash began.
func (h *harness) lastBegan() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.began[len(h.began)-1]
}

// occupy sends a Hash as tenant and returns once its worker is held in the
// gate; wait returns the call's error after release.
func (h *harness) occupy(tenant string) (release func(), wait func() error) {
	h.t.Helper()
	release = h.hold(tenant)
	wait = h.goHash(context.Background(), tenant)
	h.waitFor(tenant+" holding a worker", func() bool { return slices.Contains(h.hashed(), tenant) })
	return release, wait
}

// as returns ctx carrying tenant as request metadata.
func as(ctx context.Context, tenant string) context.Context {
	return callmeta.AppendOutgoing(ctx, callmeta.Facts{Tenant: tenant})
}

// goHash sends a Hash for tenant in the background; wait returns its error.
func (h *harness) goHash(ctx context.Context, tenant string) (wait func() error) {
	return h.goHashAs(ctx, callmeta.Facts{Tenant: tenant})
}

// goHashAs is goHash with all of the call's facts.
func (h *harness) goHashAs(ctx context.Context, f callmeta.Facts) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		_, err := h.verify.Hash(callmeta.AppendOutgoing(ctx, f), &verifyv1.HashRequest{Password: []byte("pw " + f.Tenant)})
		done <- err
	}()
	return onceResult(done)
}

// goVerify sends a Verify of stored for tenant in the background.
func (h *harness) goVerify(ctx context.Context, tenant, stored string) (wait func() error) {
	done := make(chan error, 1)
	go func() {
		_, err := h.verify.Verify(as(ctx, tenant), &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
		done <- err
	}()
	return onceResult(done)
}

func onceResult(done <-chan error) func() error {
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() { err = <-done })
		return err
	}
}

// waitFor polls cond until it holds; the test fails if it does not within
// ten seconds (far beyond anything the tests wait for).
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	waitFor(h.t, what, cond)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *harness) waitHealth(service string, want healthpb.HealthCheckResponse_ServingStatus) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("health of %q to be %v", service, want), func() bool {
		resp, err := h.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
		return err == nil && resp.GetStatus() == want
	})
}

// waitQueued waits until n requests are queued.
func (h *harness) waitQueued(n int) {
	h.t.Helper()
	h.waitFor(fmt.Sprintf("queue length %d", n), func() bool { return h.metric("levee_verifier_queue_length", nil) == float64(n) })
}

// metric sums the series of the named family in the server's registry whose
// labels include want.
func (h *harness) metric(name string, want map[string]string) float64 {
	h.t.Helper()
	mfs, err := h.srv.Registry().Gather()
	if err != nil {
		h.t.Fatalf("Gather: %v", err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, want) {
				sum += value(m)
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

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// dropped returns the drop counts by reason, all priorities summed; reasons
// at zero are left out.
func (h *harness) dropped() map[string]float64 {
	h.t.Helper()
	got := map[string]float64{}
	for _, r := range []string{reasonArrival, reasonDeadline, reasonExpired, reasonQueueExpired, reasonCancel, reasonDraining, reasonPushedOut} {
		if n := h.metric("levee_verifier_dropped_total", map[string]string{"reason": r}); n != 0 {
			got[r] = n
		}
	}
	return got
}

// hashCount is levee_verifier_hashes_total over all algorithms.
func (h *harness) hashCount() float64 {
	h.t.Helper()
	return h.metric("levee_verifier_hashes_total", nil)
}

// expected returns the server's current estimate of one policy hash.
func (h *harness) expected() time.Duration {
	h.t.Helper()
	return time.Duration(h.metric("levee_verifier_expected_service_seconds", nil) * float64(time.Second))
}

// costlyHash returns a well-formed stored Argon2id hash whose expected cost,
// by the server's current estimate, is at least d: the policy's m=64 with as
// many iterations as it takes (a Verify's estimate scales with m×t). Its
// memory stays 64 KiB.
func (h *harness) costlyHash(d time.Duration) string {
	h.t.Helper()
	per := h.metric("levee_verifier_expected_service_seconds", nil) / policyWork
	if per <= 0 {
		h.t.Fatalf("no cost estimate yet")
	}
	iters := math.Ceil(d.Seconds() / per / 64)
	if iters > float64(h.srv.cfg.Limits.MaxIterations) {
		h.t.Fatalf("a hash costing %v needs t=%v, over the test limit", d, iters)
	}
	return storedArgon2(fmt.Sprintf("m=64,t=%d,p=1", int64(iters)))
}

// storedArgon2 is a well-formed Argon2id hash with the given parameters and a
// fixed 16-byte salt and 32-byte key (which match no password).
func storedArgon2(params string) string {
	salt := base64.RawStdEncoding.EncodeToString([]byte("0123456789abcdef"))
	key := base64.RawStdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	return strings.Join([]string{"", "argon2id", "v=19", params, salt, key}, "$")
}

// wantCode fails the test unless err is a status with code want.
func wantCode(t *testing.T, err error, want codes.Code) *status.Status {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != want {
		t.Fatalf("got error %v, want code %v", err, want)
	}
	return st
}

// wantOK fails the test on a non-nil error.
func wantOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
