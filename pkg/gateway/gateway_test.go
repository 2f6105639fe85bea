package gateway

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/gateway/internal/upstream"
	"github.com/leveehq/levee/pkg/verifier"
)

// What a stored hash may cost is each verifier's to judge: a verifier run
// with wider limits than the default (as levee calibrate may print) verifies
// through the gateway a hash the default limits would refuse.
func TestGatewayForwardsWhatAVerifierAccepts(t *testing.T) {
	v := startVerifier(t, func(c *verifier.Config) { c.Limits.MaxIterations = 32 })
	gw := startGateway(t, gatewayConfig(v.addr))
	gw.waitServing(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stored := storedHash("wide", 64, 17) // t = 17: over the default limit of 16
	resp, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("wide")})
	if err != nil || !resp.GetMatch() {
		t.Errorf("Verify of a t=17 hash on a verifier allowing 32 = %v, %v; want a match", resp, err)
	}
}

// Client → gateway → two verifiers over 127.0.0.1: answers, balancing,
// bad input refused at the edge with no hop, health and reflection.
func TestEndToEndStatic(t *testing.T) {
	v1, v2 := startVerifier(t, nil), startVerifier(t, nil)
	gw := startGateway(t, gatewayConfig(v1.addr, v2.addr))
	gw.waitServing(t, 2)
	ctx := context.Background()

	stored := storedHash("correct horse", 64, 1)
	const n = 40
	for i := range n {
		pw := "correct horse"
		if i%2 == 1 {
			pw = "battery staple"
		}
		resp, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte(pw)})
		if err != nil {
			t.Fatalf("Verify %d: %v", i, err)
		}
		if want := i%2 == 0; resp.GetMatch() != want {
			t.Fatalf("Verify %d (%q): match = %v, want %v", i, pw, resp.GetMatch(), want)
		}
	}
	h1 := v1.metric(t, "levee_verifier_hashes_total", nil)
	h2 := v2.metric(t, "levee_verifier_hashes_total", nil)
	if got := h1 + h2; got != n {
		t.Errorf("verifiers hashed %v requests, want %d", got, n)
	}
	if h1 == 0 || h2 == 0 {
		t.Errorf("one verifier took everything: %v and %v hashes", h1, h2)
	}

	hashed, err := gw.client.Hash(ctx, &verifyv1.HashRequest{Password: []byte("new secret")})
	if err != nil {
		t.Fatalf("Hash: %v", err)
	}
	if !strings.HasPrefix(hashed.GetEncodedHash(), "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Errorf("Hash = %q, want the verifiers' policy", hashed.GetEncodedHash())
	}
	resp, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: hashed.GetEncodedHash(), Password: []byte("new secret")})
	if err != nil || !resp.GetMatch() {
		t.Errorf("Verify of the fresh hash = %v, %v; want a match", resp, err)
	}

	t.Run("bad input refused", func(t *testing.T) {
		before := v1.metric(t, "levee_verifier_hashes_total", nil) + v2.metric(t, "levee_verifier_hashes_total", nil)
		for _, tt := range []struct {
			name, hash, msg string
			password        []byte
			atEdge          bool // by the gateway, without a hop; else by a verifier, under its limits
		}{
			{"garbage hash", "not a hash", "parse hash", []byte("x"), true},
			{"memory beyond the verifiers' limit", "$argon2id$v=19$m=4194304,t=1,p=1$c2FsdHNhbHRzYWx0c2FsdA$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaGhhc2g", "memory", []byte("x"), false},
			{"password beyond the verifiers' limit", stored, "password", make([]byte, 8<<10), false},
		} {
			edge := gw.metric(t, "levee_gateway_invalid_total", nil)
			_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: tt.hash, Password: tt.password})
			if code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("%s: %v, want INVALID_ARGUMENT naming %q", tt.name, err, tt.msg)
			}
			if got := gw.metric(t, "levee_gateway_invalid_total", nil) - edge; got != map[bool]float64{true: 1}[tt.atEdge] {
				t.Errorf("%s: refused at the edge %v times, want at the edge: %v", tt.name, got, tt.atEdge)
			}
		}
		after := v1.metric(t, "levee_verifier_hashes_total", nil) + v2.metric(t, "levee_verifier_hashes_total", nil)
		if after != before {
			t.Errorf("bad input was hashed: %v hashes", after-before)
		}
	})

	t.Run("health", func(t *testing.T) {
		waitFor(t, 5*time.Second, "gateway SERVING", func() bool {
			resp, err := healthpb.NewHealthClient(gw.cc).Check(ctx,
				&healthpb.HealthCheckRequest{Service: verifyv1.VerifyService_ServiceDesc.ServiceName})
			return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
		})
	})

	t.Run("reflection", func(t *testing.T) {
		stream, err := rpb.NewServerReflectionClient(gw.cc).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.CloseSend()
		found := false
		for _, s := range resp.GetListServicesResponse().GetService() {
			found = found || s.GetName() == verifyv1.VerifyService_ServiceDesc.ServiceName
		}
		if !found {
			t.Errorf("reflection does not list %s", verifyv1.VerifyService_ServiceDesc.ServiceName)
		}
	})
}

// A call with less than the forwarding margin left is refused at the
// gateway, before any hop (counted as refused for its deadline), with the
// generic message that names no configuration.
func TestDeadlineRefusedBeforeForwarding(t *testing.T) {
	v := startVerifier(t, nil)
	gw := startGateway(t, gatewayConfig(v.addr))
	gw.waitServing(t, 1)
	stored := storedHash("pw", 1024, 2)
	before := v.metric(t, "levee_verifier_hashes_total", nil)
	left := testDeadline.Margin / 2
	ctx, cancel := context.WithTimeout(context.Background(), left)
	defer cancel()
	_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
	if code(err) != codes.DeadlineExceeded || err.Error() != errTooLittleTime.Error() {
		t.Fatalf("Verify with %v left = %v; want %v", left, err, errTooLittleTime)
	}
	if got := v.metric(t, "levee_verifier_hashes_total", nil) - before; got != 0 {
		t.Errorf("verifier hashed %v requests after a deadline refusal", got)
	}
	if got := gw.metric(t, "levee_gateway_refused_total", map[string]string{"reason": "deadline"}); got != 1 {
		t.Errorf("refused_total{reason=deadline} = %v, want 1", got)
	}
}

// A stall does not leave the gateway refusing short deadlines: after hashes
// that took 100× their normal time (every verifier slowed by the capacity
// knob, then restored), calls whose deadline is 10 normal hashes are
// forwarded and answered. A gateway that learnt one fleet-wide cost from the
// verifiers' service-time trailers refused every one of them before a hop.
func TestStallDoesNotPoisonTheGatewaysDeadlineCheck(t *testing.T) {
	v1, v2 := startVerifier(t, nil), startVerifier(t, nil)
	gw := startGateway(t, gatewayConfig(v1.addr, v2.addr))
	gw.waitServing(t, 2)
	stored := storedHash("pw", 4096, 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
		return time.Since(start), err
	}
	var normal []time.Duration
	for range 5 {
		took, err := call(ctx)
		if err != nil {
			t.Fatal(err)
		}
		normal = append(normal, took)
	}
	slices.Sort(normal)
	budget := max(10*normal[2], 50*time.Millisecond)

	// The stall, through the gateway: each answer's service-time trailer
	// says 100× the normal hash.
	v1.slow(t, 100)
	v2.slow(t, 100)
	for range 4 {
		if _, err := call(ctx); err != nil {
			t.Fatal(err)
		}
	}
	v1.slow(t, 1)
	v2.slow(t, 1)

	const calls = 40
	failed := 0
	var first error
	for range calls {
		cctx, ccancel := context.WithTimeout(ctx, budget)
		_, err := call(cctx)
		ccancel()
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	t.Logf("normal hash %v through the gateway; %d of %d calls with %v deadlines failed after the stall", normal[2], failed, calls, budget)
	if failed > 1 {
		t.Errorf("%d of %d calls with %v deadlines failed after the stall (first: %v); want all answered", failed, calls, budget, first)
	}
}

// Over the limit, a call is refused at once with RESOURCE_EXHAUSTED and a
// jittered pushback trailer within the configured range.
func TestRefusalCarriesJitteredPushback(t *testing.T) {
	v := startVerifier(t, nil)
	cfg := gatewayConfig(v.addr)
	cfg.Admission.InitialLimit, cfg.Admission.MinLimit, cfg.Admission.Ceiling = 1, 1, 1
	gw := startGateway(t, cfg)
	gw.waitServing(t, 1)
	gw.g.limiter.SetClamp(1)

	// Hold the only slot with a slow call.
	v.slow(t, 100)
	stored := storedHash("pw", 1024, 1)
	hold := make(chan error, 1)
	go func() {
		// Critical: with a limit of 1, lower priorities get no share.
		_, err := gw.client.Verify(callmeta.AppendOutgoing(context.Background(), callmeta.Facts{Priority: callmeta.Critical}),
			&verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
		hold <- err
	}()
	waitFor(t, 5*time.Second, "one call in flight", func() bool {
		select {
		case err := <-hold:
			t.Fatalf("the call meant to hold the only slot ended: %v", err)
		default:
		}
		return gw.g.limiter.InFlight() == 1
	})

	seen := map[string]bool{}
	for range 50 {
		var trailer metadata.MD
		start := time.Now()
		_, err := gw.client.Verify(callmeta.AppendOutgoing(context.Background(), callmeta.Facts{Priority: callmeta.Critical}),
			&verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")}, grpc.Trailer(&trailer))
		if code(err) != codes.ResourceExhausted {
			t.Fatalf("over the limit: %v, want RESOURCE_EXHAUSTED", err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("refusal took %v", took)
		}
		pb := trailer.Get(callmeta.PushbackKey)
		if len(pb) != 1 {
			t.Fatalf("pushback trailer = %q, want one value", pb)
		}
		ms, err := time.ParseDuration(pb[0] + "ms")
		if err != nil || ms < cfg.PushbackMin || ms > cfg.PushbackMax {
			t.Fatalf("pushback %q outside [%v, %v]", pb[0], cfg.PushbackMin, cfg.PushbackMax)
		}
		seen[pb[0]] = true
	}
	if len(seen) < 10 {
		t.Errorf("50 refusals carried only %d distinct pushbacks; want jitter", len(seen))
	}
	if err := <-hold; err != nil {
		t.Errorf("the admitted call: %v", err)
	}
}

// Registration and de-registration through a real etcd, and a verifier
// killed mid-load: only the calls in flight on it are lost, and the gateway
// stops routing to it within a second.
func TestFleetThroughEtcd(t *testing.T) {
	endpoints := etcdtest.StartEtcd(t)
	registered := func(c *verifier.Config) {
		c.EtcdEndpoints = endpoints
		c.RegistryTTL = 2 * time.Second
	}
	v1, v2, v3 := startVerifier(t, registered), startVerifier(t, registered), startVerifier(t, registered)
	cfg := gatewayConfig()
	cfg.EtcdEndpoints = endpoints
	cfg.Admission.InitialLimit, cfg.Admission.MinLimit, cfg.Admission.Ceiling = 64, 64, 64
	cfg.VerifierQueueDelay = time.Minute // admission is not under test: every call goes through
	gw := startGateway(t, cfg)
	gw.waitServing(t, 3)

	// A drained verifier deregisters: the gateway forgets it.
	v3.stop(t)
	waitFor(t, 5*time.Second, "v3 gone from the gateway", func() bool { return len(gw.g.verifiers.List()) == 2 })

	for _, v := range []*testVerifier{v1, v2} {
		v.slow(t, 20)
	}
	stored := storedHash("pw", 1024, 1)
	gw.learnService(t, stored)
	type result struct {
		start time.Time
		err   error
	}
	results := make(chan result, 100000)
	ctx, stopLoad := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := gw.client.Verify(cctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
				cancel()
				results <- result{start, err}
			}
		}()
	}
	time.Sleep(time.Second)
	var b1 *upstream.Node
	for _, b := range gw.g.verifiers.List() {
		if b.Addr() == v1.addr {
			b1 = b
		}
	}
	inflight := b1.Pending()
	killed := time.Now()
	v1.kill()
	waitFor(t, 2*time.Second, "the gateway to stop routing to v1", func() bool { return !b1.Eligible() })
	detected := time.Since(killed)
	time.Sleep(time.Second)
	stopLoad()
	wg.Wait()
	close(results)

	var ok, failed, failedLate int
	for r := range results {
		switch {
		case r.err == nil:
			ok++
		default:
			failed++
			if r.start.After(killed.Add(detected)) {
				failedLate++
				t.Logf("failed after detection: %v", r.err)
			}
		}
	}
	t.Logf("killed v1 with %d calls in flight on it; detected after %v; %d ok, %d failed", inflight, detected, ok, failed)
	if detected > time.Second {
		t.Errorf("the gateway kept routing to the dead verifier for %v, want < 1s", detected)
	}
	if failedLate > 0 {
		t.Errorf("%d calls that started after the gateway stopped routing to v1 failed", failedLate)
	}
	hopFailures := gw.metric(t, "levee_gateway_verifier_results_total", map[string]string{"verifier": v1.addr, "result": "failure"})
	if float64(failed) != hopFailures {
		t.Errorf("%d calls failed but %v hops to v1 failed: every loss must be a call that was on v1", failed, hopFailures)
	}
	if failed == 0 || ok == 0 {
		t.Errorf("%d ok, %d failed: want both (a loaded fleet losing a node)", ok, failed)
	}
	// The killed process's registration lives on in this test (its lease
	// is kept alive in-process); a real crash lets it expire within the TTL
	// (pkg/registry tests that). Meanwhile the gateway keeps v1 out.
	if b1.Eligible() {
		t.Errorf("v1 eligible again while dead")
	}
}

// no_user and rehash pass through the gateway: the first costs a policy hash
// at a verifier and never matches, the second brings a fresh hash back.
func TestNoUserAndRehashThroughGateway(t *testing.T) {
	v := startVerifier(t, nil)
	gw := startGateway(t, gatewayConfig(v.addr))
	gw.waitServing(t, 1)
	ctx := context.Background()
	before := v.metric(t, "levee_verifier_hashes_total", nil)
	resp, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{NoUser: true, Password: []byte("pw")})
	if err != nil || resp.GetMatch() {
		t.Fatalf("no_user through the gateway: %v, %v; want no match", resp, err)
	}
	if got := v.metric(t, "levee_verifier_hashes_total", nil) - before; got != 1 {
		t.Errorf("no_user hashed %v times at the verifier, want 1", got)
	}
	if _, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{NoUser: true, EncodedHash: storedHash("pw", 64, 1), Password: []byte("pw")}); code(err) != codes.InvalidArgument {
		t.Errorf("no_user with a hash: %v, want INVALID_ARGUMENT at the edge", err)
	}
	weak := storedHash("pw", 32, 1) // below the verifiers' policy (m=64)
	resp, err = gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: weak, Password: []byte("pw"), Rehash: true})
	if err != nil || !resp.GetMatch() || resp.GetRehashStatus() != verifyv1.RehashStatus_REHASH_STATUS_DONE ||
		!strings.HasPrefix(resp.GetNewHash(), "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Errorf("rehash through the gateway: %v, %v; want a match and a fresh hash under the policy", resp, err)
	}
}
