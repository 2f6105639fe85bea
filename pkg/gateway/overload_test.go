package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/verifier"
)

// openLoop sends calls at rate per second for d, each in its own goroutine
// (an open loop: arrivals do not wait for answers, as real users do not),
// choosing each call's priority with pick. It returns when every call has
// ended.
func openLoop(rate float64, d time.Duration, pick func(i int) callmeta.Priority,
	call func(i int, p callmeta.Priority)) int {
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		// Catch up on the schedule rather than drift: a slow tick sends
		// the calls it owes at once.
		due := int(time.Since(start) / interval)
		for ; n <= due; n++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				call(i, pick(i))
			}(n)
		}
		time.Sleep(interval / 2)
	}
	wg.Wait()
	return n
}

// capacityOf estimates what workers verifiers can answer per second from the
// latency of calls made one at a time. A closed loop under load would
// understate it: the capacity knob stretches each hash by a multiple of its
// CPU time, which grows with CPU contention (other test packages included).
func capacityOf(t *testing.T, gw *testGateway, stored string, workers int) float64 {
	t.Helper()
	const probes = 20
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range probes {
		if _, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")}); err != nil {
			t.Fatal(err)
		}
	}
	return float64(workers) / (time.Since(start).Seconds() / probes)
}

// With the verifiers saturated and offered load at 3× and 10× their
// capacity, the gateway refuses the excess at once, admitted calls are
// answered within their deadline but for a few overruns (counted and
// bounded), and priorities hold: critical calls keep ≥ 99 % while most of
// the rest is shed. Everything is asserted by counting.
func TestOverloadShedsByPriority(t *testing.T) {
	if testing.Short() {
		t.Skip("load test; runs in the full suite")
	}
	testlock.Quiet(t) // judged by what a loaded fleet answers in time
	// Four verifiers of one worker each (the capacity of two of two), so
	// that each keeps its own extra slot for a critical first attempt.
	var vs []*testVerifier
	var addrs []string
	for range 4 {
		v := startVerifier(t, func(c *verifier.Config) { c.Workers = 1 })
		vs = append(vs, v)
		addrs = append(addrs, v.addr)
	}
	cfg := gatewayConfig(addrs...)
	// "Critical keeps ≥ 99 %" is a claim about a proportion: telling 99 %
	// from 93 % takes a couple of hundred critical calls, not a dozen. So
	// critical traffic is a sizeable share of capacity (criticalShare
	// below), and the limiter reserves half the limit for it rather than
	// the default fifth (batch's share lowered to keep the shedding order
	// valid): what is tested is that the reserve holds, at a size that
	// sends enough critical calls in seconds.
	cfg.Admission.CriticalReserve = 0.5
	cfg.Admission.BatchShare = 0.25
	// No queue at the verifiers: each hash below holds its worker 40× its
	// CPU time, and the load generator shares the CPU in this very
	// process, so a CPU hiccup of a few milliseconds becomes a hash of a
	// second, and calls queued behind it would wait out their deadline.
	// This test is about the edge's shedding; the queue under overload is
	// measured by the lab, without the knob's amplification (docs/lab.md).
	cfg.VerifierQueueDelay = 0
	gw := startGateway(t, cfg)
	gw.waitServing(t, len(vs))
	// Each hash holds its worker for ~40× its CPU time: the verifiers are
	// slow in wall time but leave the CPU to the load and the gateway.
	for _, v := range vs {
		v.slow(t, 40)
	}
	stored := storedHash("pw", 512, 1)
	hashes := func() (n float64) {
		for _, v := range vs {
			n += v.metric(t, "levee_verifier_hashes_total", nil)
		}
		return n
	}

	capacity := capacityOf(t, gw, stored, 4)
	t.Logf("capacity: %.0f verifications/s (4 workers), limit %d", capacity, gw.g.limiter.Limit())
	// At 5/s each load lasts about 75 s to send its critical calls; a
	// machine slower than that cannot run this test in reasonable time.
	if capacity < 5 {
		t.Fatalf("capacity %.1f/s is too low to test against", capacity)
	}

	const (
		clientTimeout = 2 * time.Second
		// Critical traffic is this share of capacity whatever the load,
		// within the half of the limit reserved for it.
		criticalShare = 0.3
		// Each load lasts long enough to send this many critical calls
		// (at least 4 s): about 6 s each on an idle two-core machine, up to
		// 75 s on a machine slow enough to bring capacity down to 5/s. The
		// count, not the time, is what the 99 % claim needs.
		criticalPerLoad = 110
		// The two loads together must send this many: below it, ≤ 1 %
		// shed could not be told from 7 %.
		minCritical = 200
	)
	perLoad := time.Duration(criticalPerLoad / (criticalShare * capacity) * float64(time.Second))
	perLoad = max(perLoad, 4*time.Second)
	lateHashes := 0 // admitted calls that overran their deadline, over both loads
	var criticalSent, criticalShed int
	for _, mult := range []float64{3, 10} {
		t.Run(fmt.Sprintf("%.0fx", mult), func(t *testing.T) {
			rate := mult * capacity
			// Critical traffic is criticalShare of capacity; the rest is
			// 2/3 interactive, 1/3 batch.
			criticalEvery := int(mult / criticalShare)
			pick := func(i int) callmeta.Priority {
				switch {
				case i%criticalEvery == 0:
					return callmeta.Critical
				case i%3 == 0:
					return callmeta.Batch
				}
				return callmeta.Interactive
			}
			hashesBefore := hashes()
			admittedBefore := gw.metric(t, "levee_gateway_admitted_total", nil)
			var sent, ok, shed, otherErr tally
			var slowRefusals, lateAnswers atomic.Int64
			var errMu sync.Mutex
			var firstOther string
			n := openLoop(rate, perLoad, pick, func(i int, p callmeta.Priority) {
				ctx, cancel := context.WithTimeout(callmeta.AppendOutgoing(context.Background(),
					callmeta.Facts{Priority: p, Attempt: 1}), clientTimeout)
				defer cancel()
				start := time.Now()
				_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
				took := time.Since(start)
				sent.add(p.String())
				switch {
				case err == nil:
					ok.add(p.String())
					if took > clientTimeout {
						lateAnswers.Add(1)
					}
				case code(err) == codes.ResourceExhausted && strings.HasPrefix(grpcstatus.Convert(err).Message(), "gateway overloaded"):
					shed.add(p.String())
					if took > 500*time.Millisecond {
						slowRefusals.Add(1)
					}
				default:
					otherErr.add(p.String())
					errMu.Lock()
					if firstOther == "" || p == callmeta.Critical {
						firstOther = fmt.Sprintf("%s after %v: %v", p, took.Round(time.Millisecond), err)
					}
					errMu.Unlock()
				}
			})
			total, totalShed := 0, 0
			for _, p := range []string{"critical", "interactive", "batch"} {
				total += sent.get(p)
				totalShed += shed.get(p)
				t.Logf("%-11s sent %5d  ok %5d  shed %5d  other %d", p, sent.get(p), ok.get(p), shed.get(p), otherErr.get(p))
			}
			t.Logf("offered %.0f/s, %d calls; shed %.1f%%; limit now %d", rate, n, 100*float64(totalShed)/float64(total), gw.g.limiter.Limit())

			// Critical calls are counted here and judged over both loads
			// below; like any admitted call one may overrun its deadline
			// (counted with the overruns below).
			criticalSent += sent.get("critical")
			criticalShed += shed.get("critical")
			if mult >= 10 && float64(totalShed) < 0.7*float64(total) {
				t.Errorf("shed %d of %d, want ≥ 70%% at %.0fx", totalShed, total, mult)
			}
			shedFrac := func(p string) float64 { return float64(shed.get(p)) / float64(max(1, sent.get(p))) }
			if !(shedFrac("batch") >= shedFrac("interactive") && shedFrac("interactive") >= shedFrac("critical")) {
				t.Errorf("shed fractions batch %.3f, interactive %.3f, critical %.3f: want batch ≥ interactive ≥ critical",
					shedFrac("batch"), shedFrac("interactive"), shedFrac("critical"))
			}
			for _, r := range []string{"ok", "overloaded", "failure", "other"} {
				t.Logf("hops %s: %v", r, gw.metric(t, "levee_gateway_verifier_results_total", map[string]string{"result": r}))
			}
			// An admitted call's fate rests on the verifier's prediction of
			// its hash's cost, and on a machine shared with other test
			// packages a hash may overrun it: one admitted call in fifty
			// (at least two) may end past its deadline; no more.
			admitted := gw.metric(t, "levee_gateway_admitted_total", nil) - admittedBefore
			overrun := max(2, int(admitted)/50)
			others := 0
			for _, c := range otherErr.snapshot() {
				others += c
			}
			if others > 0 {
				t.Logf("calls neither answered nor shed: %v (last critical, else first: %s)", otherErr.snapshot(), firstOther)
			}
			if others > overrun {
				t.Errorf("%d calls were neither answered nor shed at the edge (%v; first: %s), want ≤ %d",
					others, otherErr.snapshot(), firstOther, overrun)
			}
			if got := lateAnswers.Load(); got > 0 {
				t.Errorf("%d answers came after the caller's deadline", got)
			}
			if got := slowRefusals.Load(); got > 0 {
				t.Errorf("%d refusals took longer than 500ms; a refusal must not wait", got)
			}
			// Every admitted call reached a verifier and was hashed there at
			// most once, and was answered but for the overruns above; the
			// refused never reached one.
			hashed := hashes() - hashesBefore
			var answered int
			for _, c := range ok.snapshot() {
				answered += c
			}
			if hashed > admitted || float64(answered) < admitted-float64(others) {
				t.Errorf("admitted %v, hashed %v, answered %d (%d overran): want answered + overruns ≥ admitted ≥ hashed",
					admitted, hashed, answered, others)
			}
			lateHashes += others
		})
	}
	// Critical keeps ≥ 99 %: at most one critical call in a hundred shed at
	// the edge, over a sample in which 7 % shed (about 15 calls) could not
	// pass but by a chance of about 1 in 10⁴.
	if criticalSent < minCritical {
		t.Errorf("only %d critical calls sent (capacity %.0f/s, %v per load), want ≥ %d to judge 99 %%",
			criticalSent, capacity, perLoad, minCritical)
	}
	if criticalShed > criticalSent/100 {
		t.Errorf("critical: %d of %d shed, want ≤ %d (≥ 99 %% kept)", criticalShed, criticalSent, criticalSent/100)
	}
	t.Logf("critical: %d of %d shed over both loads", criticalShed, criticalSent)

	var late float64
	for _, v := range vs {
		late += v.metric(t, "levee_verifier_late_total", nil)
	}
	if late > float64(lateHashes) {
		t.Errorf("verifiers hashed %v requests past their deadline, more than the %d calls that overran", late, lateHashes)
	}
	if got := gw.metric(t, "levee_gateway_late_total", nil); got > float64(lateHashes) {
		t.Errorf("gateway late_total = %v, more than the %d calls that overran", got, lateHashes)
	}
}
