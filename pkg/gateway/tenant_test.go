package gateway

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/grpctest"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/gateway/settings"
)

// A tenant at 0.3 C beside one flooding at 3 C, over real gRPC: the quiet
// tenant keeps its calls and the flood takes the rest of the fleet. Two
// mechanisms share the work: the gateway's shares bound what each tenant
// has in flight, and the verifiers' queues serve the tenants with calls
// queued in turn (package workpool); with the gateway's sharing off (the
// runtime setting) only the second is left, and the run is logged beside
// for comparison. What each does alone is measured where it lives:
// pkg/fairshare's model of the fleet, pkg/workpool's and pkg/verifier's
// tests, and the lab's noisy-tenant runs at 3 and 10 C. Counted, per
// tenant.
func TestNoisyTenantOverGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("load test; runs in the full suite")
	}
	testlock.Quiet(t) // judged by what a loaded fleet answers in time
	f := startTenantFleet(t)

	run := func(fair bool) (quiet, busy float64) {
		if err := f.gw.g.ApplySettings(settings.Settings{Fairness: &fair}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		whyQuiet := map[string]int{}
		var quietCalls, floodCalls tenantCalls
		busy = f.busyWhile(t, func() {
			var wg sync.WaitGroup
			wg.Go(func() {
				quietCalls = f.send("quiet", 0.3*f.capacity, tenantRun, func(err error) {
					mu.Lock()
					whyQuiet[status.Convert(err).Message()]++
					mu.Unlock()
				})
			})
			wg.Go(func() { floodCalls = f.send("flood", 3*f.capacity, tenantRun, nil) })
			wg.Wait()
		})
		quiet = float64(quietCalls.served) / float64(quietCalls.asked)
		t.Logf("fair %v: quiet served %d of %d (%.3f), flood %d of %d; refused for the tenant's share %v; %.2f of %v workers busy", fair,
			quietCalls.served, quietCalls.asked, quiet, floodCalls.served, floodCalls.asked,
			f.gw.metric(t, "levee_gateway_refused_total", map[string]string{"reason": "tenant_share"}), busy, f.workers)
		t.Logf("the quiet tenant's refusals: %v", whyQuiet)
		return quiet, busy
	}
	_, _ = run(false)
	fair, busy := run(true)
	if fair < 0.9 {
		t.Errorf("the quiet tenant kept %.3f of its calls, want ≥ 0.9", fair)
	}
	// The shares never refuse the quiet tenant for its share.
	if quiet := f.gw.metric(t, "levee_gateway_tenant_calls_total", map[string]string{"tenant": "quiet", "outcome": "refused"}); quiet > 0.02*0.3*f.capacity*tenantRun.Seconds() {
		t.Errorf("the quiet tenant was refused for its share %v times", quiet)
	}
	// Work-conserving: the flood takes what the quiet tenant leaves, and
	// the workers stay busy (3.9–4.0 of 4 in runs seen); with the flood
	// held to one call in flight (sharing that idles the fleet) 1.9.
	if busy < 0.65*f.workers {
		t.Errorf("%.2f of the fleet's %v workers were busy beside a flood with sharing: sharing must not idle it", busy, f.workers)
	}
}

// tenantRun is how long the tenant tests load the fleet.
const tenantRun = 8 * time.Second

// tenantFleet is the tenant tests' fleet: a gateway over two verifiers
// slowed twentyfold, so that the fleet, not this machine, is the
// bottleneck. Whether sharing idles it is judged by how many of its
// workers a hash held, which does not depend on how long a hash took.
type tenantFleet struct {
	gw        *testGateway
	verifiers []*testVerifier
	stored    string // a hash to verify
	// capacity is what the fleet answers per second under a flood: its
	// workers over the mean time one hash held a worker while a flood at
	// 3× the unloaded estimate (capacityOf) kept them busy. The slowdown
	// stretches a hash by a multiple of its own run time, which the load
	// generator in this same process lengthens (held twice as long as
	// unloaded, on a machine seen): an unloaded capacity would ask the
	// quiet tenant for more than its share of the fleet.
	capacity float64
	workers  float64
}

func startTenantFleet(t *testing.T) *tenantFleet {
	t.Helper()
	v1, v2 := startVerifier(t, nil), startVerifier(t, nil)
	f := &tenantFleet{gw: startGateway(t, gatewayConfig(v1.addr, v2.addr)), verifiers: []*testVerifier{v1, v2},
		stored: storedHash("pw", 512, 1)}
	f.gw.waitServing(t, 2)
	v1.slow(t, 20)
	v2.slow(t, 20)
	f.workers = v1.metric(t, "levee_verifier_workers_active", nil) + v2.metric(t, "levee_verifier_workers_active", nil)
	unloaded := capacityOf(t, f.gw, f.stored, int(f.workers))
	held, hashes, _ := f.while(t, func() { f.send("", 3*unloaded, 3*time.Second, nil) })
	if hashes < 10 {
		t.Fatalf("a flood at %.0f/s hashed %v times: no capacity to measure", 3*unloaded, hashes)
	}
	f.capacity = f.workers / (held / hashes)
	t.Logf("capacity %.0f/s under a flood, %.0f/s unloaded (%v workers)", f.capacity, unloaded, f.workers)
	return f
}

// held sums, over the verifiers, the time their workers were held by a
// hash and the hashes.
func (f *tenantFleet) held(t *testing.T) (seconds, hashes float64) {
	t.Helper()
	for _, v := range f.verifiers {
		mfs, err := v.srv.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "levee_verifier_service_seconds" {
				continue
			}
			for _, m := range mf.GetMetric() {
				seconds += m.GetHistogram().GetSampleSum()
				hashes += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return seconds, hashes
}

// while runs load and returns the time the fleet's workers were held by a
// hash meanwhile, the hashes (each counted as it ends; load returns once
// its calls have) and how long load took.
func (f *tenantFleet) while(t *testing.T, load func()) (held, hashes float64, took time.Duration) {
	t.Helper()
	held0, hashes0 := f.held(t)
	start := time.Now()
	load()
	took = time.Since(start)
	held1, hashes1 := f.held(t)
	return held1 - held0, hashes1 - hashes0, took
}

// busyWhile runs load and returns how many of the fleet's workers a hash
// held on average while it ran.
func (f *tenantFleet) busyWhile(t *testing.T, load func()) float64 {
	t.Helper()
	held, _, took := f.while(t, load)
	return held / took.Seconds()
}

// tenantCalls counts one tenant's calls.
type tenantCalls struct{ asked, served int64 }

// send verifies as tenant ("": none) at rate for d, open loop,
// each call an interactive first attempt with a 2 s deadline, and returns
// once every call has ended. refused, when given, gets each call's error.
func (f *tenantFleet) send(tenant string, rate float64, d time.Duration, refused func(error)) tenantCalls {
	var asked, served atomic.Int64
	openLoop(rate, d, func(int) callmeta.Priority { return callmeta.Interactive }, func(int, callmeta.Priority) {
		ctx, cancel := context.WithTimeout(callmeta.AppendOutgoing(context.Background(),
			callmeta.Facts{Attempt: 1, Priority: callmeta.Interactive, Tenant: tenant}), 2*time.Second)
		defer cancel()
		asked.Add(1)
		_, err := f.gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: f.stored, Password: []byte("pw")})
		switch {
		case err == nil:
			served.Add(1)
		case refused != nil:
			refused(err)
		}
	})
	return tenantCalls{asked: asked.Load(), served: served.Load()}
}

// Two tenants flooding alike, one weighted 3, over real gRPC to real
// verifiers: the weighted tenant is served about three times as many calls.
// Both halves must agree for that: the gateway's shares give it three
// quarters of the calls in flight, and the verifiers' queues three quarters
// of their workers' time (levee-tenant-weight); with either half equal, the
// ratio falls toward 1 (the pieces are tested alone in pkg/fairshare,
// pkg/workpool and pkg/verifier). Counted.
func TestWeightedTenantGetsItsWeightOfTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("load test; runs in the full suite")
	}
	testlock.Quiet(t) // judged by what a loaded fleet answers in time
	f := startTenantFleet(t)
	if err := f.gw.g.ApplySettings(settings.Settings{TenantWeights: map[string]float64{"gold": 3}}); err != nil {
		t.Fatal(err)
	}
	var gold, plain tenantCalls
	busy := f.busyWhile(t, func() {
		var wg sync.WaitGroup
		wg.Go(func() { gold = f.send("gold", 2*f.capacity, tenantRun, nil) })
		wg.Go(func() { plain = f.send("plain", 2*f.capacity, tenantRun, nil) })
		wg.Wait()
	})
	t.Logf("capacity %.0f/s: gold served %d of %d, plain %d of %d; %.2f of %v workers busy", f.capacity,
		gold.served, gold.asked, plain.served, plain.asked, busy, f.workers)
	if ratio := float64(gold.served) / float64(plain.served); plain.served == 0 || ratio < 2 || ratio > 4.5 {
		t.Errorf("gold (weight 3) served %d calls, plain %d: want about three to one", gold.served, plain.served)
	}
	// 3.0–4.0 of 4 workers busy in runs seen; 2.3 with each tenant held to
	// one call in flight.
	if busy < 0.65*f.workers {
		t.Errorf("%.2f of the fleet's %v workers were busy while two tenants flooded it: weights must not idle it", busy, f.workers)
	}
}

// Ten thousand tenant names, as a credential-stuffing front end or a bug
// might make them: the gateway's per-tenant series stay bounded, the
// busiest tenants get their labels at the next choice however many names
// came first, and the shares track at most MaxTenants entries, then none
// once the names stop. Every call is refused after admission (a malformed
// hash), so the test costs no hashing.
func TestTenThousandTenantsStayBounded(t *testing.T) {
	cfg := gatewayConfig("127.0.0.1:1")
	cfg.Tenants.MaxTenants = 1024
	gw := startGatewayOnFakeClock(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	call := func(tenant string) {
		ctx := callmeta.AppendOutgoing(ctx, callmeta.Facts{Attempt: 1, Priority: callmeta.Interactive, Tenant: tenant})
		_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: "not a hash", Password: []byte("pw")})
		if code(err) != codes.InvalidArgument {
			t.Errorf("tenant %s: %v, want INVALID_ARGUMENT", tenant, err)
		}
	}
	names := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for name := range names {
				call(name)
			}
		})
	}
	for i := range 10_000 {
		names <- fmt.Sprintf("made-up-%d", i)
	}
	for range 50 {
		for b := range 5 {
			names <- fmt.Sprintf("busy-%d", b)
		}
	}
	close(names)
	wg.Wait()

	series := func() int {
		mfs, err := gw.g.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "levee_gateway_tenant_calls_total" {
				return len(mf.GetMetric())
			}
		}
		return 0
	}
	// Labels: the 32 busiest, "other" and "none"; two outcomes each.
	const maxSeries = (maxTenantLabels + 2) * 2
	if n := series(); n > maxSeries {
		t.Errorf("%d tenant series after 10,000 names, want at most %d", n, maxSeries)
	}
	if n := gw.g.shares.Tracked(); n > cfg.Tenants.MaxTenants {
		t.Errorf("the shares track %d tenants, want at most %d", n, cfg.Tenants.MaxTenants)
	}

	// The first names seen held the labels; the next choice gives them to
	// the busy tenants and takes the early names' series away.
	byTenant := func(tenant string) float64 {
		return gw.metric(t, "levee_gateway_tenant_calls_total", map[string]string{"tenant": tenant})
	}
	if byTenant("made-up-0") == 0 {
		t.Error("the first name seen had no label before the choice; the test shows nothing")
	}
	gw.clock.Advance(time.Minute + time.Second)
	for b := range 5 {
		call(fmt.Sprintf("busy-%d", b))
		if byTenant(fmt.Sprintf("busy-%d", b)) == 0 {
			t.Errorf("busy-%d has no series of its own after the choice", b)
		}
	}
	if byTenant("made-up-0") != 0 {
		t.Error("the first name seen kept its label through the choice")
	}
	if n := series(); n > maxSeries {
		t.Errorf("%d tenant series after the choice, want at most %d", n, maxSeries)
	}
	// Names that stop asking are forgotten.
	gw.clock.Advance(3 * cfg.Tenants.Window)
	call("busy-0")
	if n := gw.g.shares.Tracked(); n > 2 {
		t.Errorf("the shares still track %d tenants after the names stopped, want the one still asking", n)
	}
}

// factsRecorder is a VerifyService that records the facts each Verify
// arrives with and answers a match.
type factsRecorder struct {
	verifyv1.UnimplementedVerifyServiceServer
	mu   sync.Mutex
	seen []callmeta.Facts
}

func (r *factsRecorder) Verify(ctx context.Context, _ *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	f, err := callmeta.Asked(ctx)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	r.mu.Lock()
	r.seen = append(r.seen, f)
	r.mu.Unlock()
	return &verifyv1.VerifyResponse{Match: true}, nil
}

func (r *factsRecorder) last() callmeta.Facts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[len(r.seen)-1]
}

// The weight the verifiers' fair queueing serves by is the gateway's
// setting for the tenant, over real gRPC: a tenant weighted 3 is forwarded
// with levee-tenant-weight 3, one without a weight is forwarded with none
// (weight 1), and a caller's own levee-tenant-weight never passes.
func TestTenantWeightIsTheGatewaysToSend(t *testing.T) {
	rec := &factsRecorder{}
	addr := grpctest.Serve(t, func(s *grpc.Server) {
		verifyv1.RegisterVerifyServiceServer(s, rec)
		hs := health.NewServer()
		hs.SetServingStatus(verifyv1.VerifyService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
		healthpb.RegisterHealthServer(s, hs)
	})
	gw := startGateway(t, gatewayConfig(addr))
	gw.waitServing(t, 1)
	if err := gw.g.ApplySettings(settings.Settings{TenantWeights: map[string]float64{"gold": 3}}); err != nil {
		t.Fatal(err)
	}
	stored := storedHash("pw", 64, 1)
	check := func(tenant, sent string, want float64) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		ctx = callmeta.AppendOutgoing(ctx, callmeta.Facts{Tenant: tenant})
		if sent != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, callmeta.WeightKey, sent)
		}
		if _, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")}); err != nil {
			t.Fatalf("%s sending weight %q: %v", tenant, sent, err)
		}
		if got := rec.last(); got.Tenant != tenant || got.Weight != want {
			t.Errorf("%s sending weight %q: the verifier got tenant %q weight %v, want weight %v",
				tenant, sent, got.Tenant, got.Weight, want)
		}
	}
	check("gold", "", 3)
	check("gold", "1000", 3)
	check("plain", "", 0)
	check("plain", "1000", 0)
	// The weight removed, gold is forwarded as everyone is, from the next call.
	if err := gw.g.ApplySettings(settings.Settings{}); err != nil {
		t.Fatal(err)
	}
	check("gold", "", 0)
}
