package gateway

import (
	"context"
	"testing"
	"time"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/gateway/internal/upstream"
)

// A verifier that serves but fails (faults injected through its capacity
// knob) trips its breaker at the gateway; once it is healthy again the
// breaker reopens it gradually: the fraction of picks it admits steps
// 1 % → 5 % → 20 % → 100 %, and the verifier's share of the calls follows.
func TestBreakerTripsAndRampsBack(t *testing.T) {
	v1, v2 := startVerifier(t, nil), startVerifier(t, nil)
	cfg := gatewayConfig(v1.addr, v2.addr)
	cfg.Breaker.MinRequests = 10
	cfg.Breaker.OpenFor = time.Second
	cfg.Breaker.StepFor = 700 * time.Millisecond
	gw := startGateway(t, cfg)
	gw.waitServing(t, 2)
	var b1 *upstream.Node
	for _, b := range gw.g.verifiers.List() {
		if b.Addr() == v1.addr {
			b1 = b
		}
	}
	ctx := context.Background()
	stored := storedHash("pw", 64, 1)
	call := func() error {
		_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
		return err
	}

	if _, err := v1.admin.SetCapacity(ctx, &verifyv1.SetCapacityRequest{ErrorFraction: 1}); err != nil {
		t.Fatal(err)
	}
	var failed int
	for range 60 {
		if call() != nil {
			failed++
		}
		if b1.Breaker().State() == breaker.Open {
			break
		}
	}
	if st := b1.Breaker().State(); st != breaker.Open {
		t.Fatalf("v1 failing every call: breaker %v after %d failures, want open", st, failed)
	}
	if !b1.Eligible() {
		t.Fatalf("a failing verifier was taken out by its health, not its breaker")
	}
	if _, err := v1.admin.SetCapacity(ctx, &verifyv1.SetCapacityRequest{}); err != nil {
		t.Fatal(err)
	}

	// Drive calls one at a time and watch v1's breaker and its share of the
	// hashes, step by step.
	type step struct {
		fraction float64
		calls    int
		onV1     float64
	}
	var steps []step
	cur := step{fraction: -1}
	hashes := func() float64 { return v1.metric(t, "levee_verifier_hashes_total", nil) }
	base := hashes()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		snap := b1.Breaker().Snapshot()
		if snap.Fraction != cur.fraction {
			if cur.fraction >= 0 {
				now := hashes()
				cur.onV1, base = now-base, now
				steps = append(steps, cur)
			}
			cur = step{fraction: snap.Fraction}
		}
		if snap.State == breaker.Closed && cur.calls >= 200 {
			break
		}
		if err := call(); err != nil {
			t.Fatalf("a call failed while v1 was healthy again: %v", err)
		}
		cur.calls++
	}
	now := hashes()
	cur.onV1 = now - base
	steps = append(steps, cur)

	var fractions []float64
	for _, s := range steps {
		fractions = append(fractions, s.fraction)
		t.Logf("admitted fraction %-5v: %4d calls, %4.0f on v1 (%.1f%%)", s.fraction, s.calls, s.onV1, 100*s.onV1/float64(max(1, s.calls)))
	}
	want := []float64{0, 0.01, 0.05, 0.2, 1}
	if len(fractions) != len(want) {
		t.Fatalf("admitted fractions stepped %v, want %v", fractions, want)
	}
	for i := range want {
		if fractions[i] != want[i] {
			t.Fatalf("admitted fractions stepped %v, want %v", fractions, want)
		}
	}
	share := func(s step) float64 { return s.onV1 / float64(max(1, s.calls)) }
	if share(steps[1]) > 0.1 || share(steps[2]) > 0.15 {
		t.Errorf("v1 took %.2f and %.2f of the calls at the 1%% and 5%% steps: the ramp let too much through",
			share(steps[1]), share(steps[2]))
	}
	if last := share(steps[4]); last < 0.3 || last > 0.7 {
		t.Errorf("v1 took %.2f of the calls once closed, want about half", last)
	}
}

// New breaker settings do not close an open breaker: the failing verifier
// stays out of rotation (a fresh open time under the new settings) while the
// healthy one keeps a closed breaker. Every backend used to get a fresh
// closed breaker, putting a failing node back in full rotation.
func TestBreakerSettingsChangeKeepsOpenBreakersOpen(t *testing.T) {
	v1, v2 := startVerifier(t, nil), startVerifier(t, nil)
	gw := startGateway(t, gatewayConfig(v1.addr, v2.addr))
	gw.waitServing(t, 2)
	list := gw.g.verifiers.List()
	list[0].Breaker().Trip()
	gw.g.verifiers.ResetBreakers()
	if got := list[0].Breaker().State(); got == breaker.Closed {
		t.Errorf("tripped breaker after a settings change: %v, want not closed", got)
	}
	if got := list[1].Breaker().State(); got != breaker.Closed {
		t.Errorf("healthy breaker after a settings change: %v, want closed", got)
	}
}

// A half-open breaker's probe is spent only on a call that reaches the
// verifier. Calls refused before the hop (bad input, a deadline shorter than
// the forwarding margin) used to take the probe when the pick asked the
// breaker, before those checks, and never record an outcome: with chance
// never admitting (U fixed high) and the next probe an hour away, the
// breaker then refused every call to a healthy verifier for the hour.
func TestRefusedCallsDoNotSpendHalfOpenProbes(t *testing.T) {
	v := startVerifier(t, nil)
	cfg := gatewayConfig(v.addr)
	cfg.Breaker.OpenFor = 20 * time.Millisecond
	cfg.Breaker.Jitter = 0
	cfg.Breaker.ProbeEvery = time.Hour
	cfg.Breaker.Rand = func() float64 { return 0.999 } // chance admits nothing below the 100 % step
	gw := startGateway(t, cfg)
	gw.waitServing(t, 1)
	b := gw.g.verifiers.List()[0]
	stored := storedHash("pw", 64, 1)

	refusals := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"bad input", func(ctx context.Context) error {
			_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: "$argon2id$garbage", Password: []byte("pw")})
			return err
		}},
		{"deadline under the margin", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, cfg.Deadline.Margin/2)
			defer cancel()
			_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
			return err
		}},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b.Breaker().Trip()
			waitFor(t, 5*time.Second, "the breaker to turn half-open", func() bool {
				return b.Breaker().State() == breaker.HalfOpen
			})
			if err := r.call(ctx); err == nil {
				t.Fatalf("%s: answered, want refused before the hop", r.name)
			}
			_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
			if err != nil {
				t.Fatalf("the call after one refused before the hop: %v (breaker %+v), want the half-open probe answered",
					err, b.Breaker().Snapshot())
			}
		})
	}
}
