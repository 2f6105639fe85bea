package gateway

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/budget/budgettest"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/ledger"
	"github.com/leveehq/levee/pkg/verifier"
)

func startBudget(t *testing.T, st ledger.Settings) *budgettest.Server {
	t.Helper()
	srv := budgettest.NewServer(budgettest.Config{Settings: st})
	if _, err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// A verifier that dies under the gateway: calls already sent to it fail with
// UNAVAILABLE and are retried once on the other verifier with a token from
// the fleet-wide budget; with no budget, the failure goes back to the caller.
func TestRetryOnAnotherVerifierWithBudget(t *testing.T) {
	for _, mode := range []string{"budget", "spent budget", "no budget"} {
		withBudget := mode == "budget"
		t.Run(mode, func(t *testing.T) {
			v1 := startVerifier(t, nil)
			v2 := startVerifier(t, nil)
			cfg := gatewayConfig(v1.addr, v2.addr)
			// Keep the dead verifier's breaker closed: this test is about
			// retries, and the breaker would hide the failures.
			cfg.Breaker.MinRequests = 1 << 20
			// A fixed limit wide enough for every call: admission is not
			// under test.
			cfg.Admission.InitialLimit, cfg.Admission.MinLimit, cfg.Admission.Ceiling = 40, 40, 40
			cfg.VerifierQueueDelay = time.Minute
			switch mode {
			case "budget":
				bs := startBudget(t, ledger.Settings{Ratio: 1, Burst: 100, MinPerSecond: 100})
				cfg.BudgetTarget = bs.Addr()
			case "spent budget": // a fleet budget that never earns a token
				bs := startBudget(t, ledger.Settings{Ratio: 1e-6}) // the zero Settings are the defaults
				cfg.BudgetTarget = bs.Addr()
			}
			gw := startGateway(t, cfg)
			gw.waitServing(t, 2)
			stored := storedHash("pw", 1024, 1)
			// Earn a share of the budget: tokens follow first attempts (the
			// lease asks for ratio × recent rate × lease period).
			for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); {
				if _, err := gw.client.Verify(context.Background(), &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")}); err != nil {
					t.Fatal(err)
				}
			}
			if withBudget && gw.g.retry.Status().Tokens < 20 {
				t.Fatalf("budget holds %v tokens after the warm-up; want ≥ 20", gw.g.retry.Status().Tokens)
			}
			if mode == "spent budget" {
				// Leased from budgetd (not on a local fallback budget,
				// which earns on its own), and empty.
				if st := gw.g.retry.Status(); st.Mode != budget.Shared || st.Tokens != 0 {
					t.Fatalf("the spent budget: mode %v, %v tokens; want shared with none", st.Mode, st.Tokens)
				}
			}

			// Hold calls on v1 so that some are in flight when it dies.
			v1.slow(t, 100)
			var wg sync.WaitGroup
			errs := make(chan error, 20)
			for range cap(errs) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
					errs <- err
				}()
			}
			waitFor(t, 5*time.Second, "calls in flight on v1", func() bool {
				for _, b := range gw.g.verifiers.List() {
					if b.Addr() == v1.addr && b.Pending() > 0 {
						return true
					}
				}
				return false
			})
			v1.kill()
			wg.Wait()
			close(errs)
			var failed int
			for err := range errs {
				if err != nil {
					failed++
					if code(err) != codes.Unavailable {
						t.Errorf("failure %v, want UNAVAILABLE", err)
					}
				}
			}
			retries := gw.metric(t, "levee_gateway_fleet_retries_total", nil)
			denied := gw.metric(t, "levee_gateway_fleet_retries_denied_total", nil)
			t.Logf("failed %d of %d; retried %v, not retried %v", failed, cap(errs), retries, denied)
			if withBudget {
				if failed != 0 || retries == 0 {
					t.Errorf("with a budget: %d failed, %v retried; want 0 failed, the lost calls retried", failed, retries)
				}
			} else if failed == 0 || retries != 0 || float64(failed) != denied {
				t.Errorf("%s: %d failed, %v retried, %v denied; want failures returned, none retried", mode, failed, retries, denied)
			}
			// The dead verifier is out of rotation: new calls all succeed.
			for range 10 {
				if _, err := gw.client.Verify(context.Background(), &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")}); err != nil {
					t.Fatalf("after the loss: %v", err)
				}
			}
		})
	}
}

// "Overloaded, do not retry" from a verifier is passed back with its
// pushback and never retried, even with budget to spare.
func TestVerifierOverloadNotRetried(t *testing.T) {
	one := func(c *verifier.Config) { c.Workers, c.QueueCapacity = 1, 1 }
	v1, v2 := startVerifier(t, one), startVerifier(t, one)
	cfg := gatewayConfig(v1.addr, v2.addr)
	bs := startBudget(t, ledger.Settings{Ratio: 1, Burst: 100, MinPerSecond: 100})
	cfg.BudgetTarget = bs.Addr()
	cfg.Admission.InitialLimit, cfg.Admission.Ceiling = 50, 50
	cfg.VerifierQueueDelay = time.Minute // let calls reach the verifiers' own queues
	gw := startGateway(t, cfg)
	gw.waitServing(t, 2)
	waitFor(t, 10*time.Second, "a budget lease", func() bool { return gw.g.retry.Allow() })
	v1.slow(t, 100)
	v2.slow(t, 100)
	stored := storedHash("pw", 1024, 1)
	gw.learnService(t, stored)

	var wg sync.WaitGroup
	var results tally
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
			results.add(code(err).String())
		}()
	}
	wg.Wait()
	t.Logf("results: %v", results.snapshot())
	for _, r := range []string{"limit", "priority", "busy", "deadline", "no_verifier"} {
		t.Logf("refused %s: %v", r, gw.metric(t, "levee_gateway_refused_total", map[string]string{"reason": r}))
	}
	t.Logf("limit %d, slots %d", gw.g.limiter.Limit(), gw.g.verifiers.TotalSlots())
	if results.get("ResourceExhausted") == 0 {
		t.Fatalf("no verifier refusal; the test did not overload the verifiers: %v", results.snapshot())
	}
	if got := gw.metric(t, "levee_gateway_fleet_retries_total", nil); got != 0 {
		t.Errorf("fleet retries = %v after verifier overload refusals; want 0", got)
	}
	if got := gw.metric(t, "levee_gateway_verifier_results_total", map[string]string{"result": "overloaded"}); got != float64(results.get("ResourceExhausted")) {
		t.Errorf("overloaded hops %v, refusals returned %d", got, results.get("ResourceExhausted"))
	}
}

// One layer retries a given failure. A caller's first attempt that fails
// with UNAVAILABLE is retried once by the gateway, and when that fails too
// the caller is told not to retry (pushback -1): the fleet already did. A
// caller's own retry (attempt 2) is not retried again by the gateway. With
// both layers retrying, the fleet's bound was (1 + r)² × first attempts.
func TestOneLayerRetries(t *testing.T) {
	v1, v2 := startVerifier(t, nil), startVerifier(t, nil)
	cfg := gatewayConfig(v1.addr, v2.addr)
	cfg.Breaker.MinRequests = 1 << 20 // breakers are not under test
	bs := startBudget(t, ledger.Settings{Ratio: 1, Burst: 100, MinPerSecond: 100})
	cfg.BudgetTarget = bs.Addr()
	gw := startGateway(t, cfg)
	gw.waitServing(t, 2)
	waitFor(t, 10*time.Second, "a budget lease", func() bool { return gw.g.retry.Allow() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range []*testVerifier{v1, v2} {
		if _, err := v.admin.SetCapacity(ctx, &verifyv1.SetCapacityRequest{ErrorFraction: 1}); err != nil {
			t.Fatal(err)
		}
	}
	req := &verifyv1.VerifyRequest{EncodedHash: storedHash("pw", 64, 1), Password: []byte("pw")}
	call := func(attempt int) (metadata.MD, error) {
		var trailer metadata.MD
		_, err := gw.client.Verify(callmeta.AppendOutgoing(ctx, callmeta.Facts{Attempt: attempt}), req, grpc.Trailer(&trailer))
		return trailer, err
	}

	before := gw.metric(t, "levee_gateway_fleet_retries_total", nil)
	trailer, err := call(1)
	if code(err) != codes.Unavailable {
		t.Fatalf("first attempt with every verifier failing: %v, want UNAVAILABLE", err)
	}
	if got := gw.metric(t, "levee_gateway_fleet_retries_total", nil) - before; got != 1 {
		t.Errorf("the gateway retried a first attempt %v times, want once", got)
	}
	if pb := trailer.Get(callmeta.PushbackKey); len(pb) != 1 || pb[0] != "-1" {
		t.Errorf("pushback %q after the gateway's own retry failed, want -1 (do not retry)", pb)
	}

	before = gw.metric(t, "levee_gateway_fleet_retries_total", nil)
	deniedBefore := gw.metric(t, "levee_gateway_fleet_retries_denied_total", nil)
	trailer, err = call(2)
	if code(err) != codes.Unavailable {
		t.Fatalf("a caller's retry with every verifier failing: %v, want UNAVAILABLE", err)
	}
	if got := gw.metric(t, "levee_gateway_fleet_retries_total", nil) - before; got != 0 {
		t.Errorf("the gateway retried a caller's retry %v times, want never", got)
	}
	if got := gw.metric(t, "levee_gateway_fleet_retries_denied_total", nil) - deniedBefore; got != 0 {
		t.Errorf("the gateway asked the budget to retry a caller's retry (%v denied), want it never considered", got)
	}
	if pb := trailer.Get(callmeta.PushbackKey); len(pb) == 1 && pb[0] == "-1" {
		t.Errorf("pushback -1 on a failure nobody retried; want the ordinary jittered pushback")
	}
}
