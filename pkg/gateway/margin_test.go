package gateway

import (
	"context"
	"math"
	"testing"
	"time"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/metastable"
	"github.com/leveehq/levee/pkg/verifier"
)

// TestBistabilityMarginGauges drives a guarded and an unguarded gateway over
// real sockets and checks that each one's margin gauge is the metastable
// arithmetic of its own live inputs: the first attempts it counted, the
// capacity its verifiers' answers imply (workers ÷ median service time), the
// attempts it assumes (3), and whether it sheds. The arithmetic itself is
// pkg/metastable's to test; this is the wiring.
func TestBistabilityMarginGauges(t *testing.T) {
	for _, unguarded := range []bool{false, true} {
		name := "guarded"
		if unguarded {
			name = "unguarded"
		}
		t.Run(name, func(t *testing.T) {
			v := startVerifier(t, func(c *verifier.Config) { c.Workers, c.Unguarded = 1, unguarded })
			cfg := gatewayConfig(v.addr)
			cfg.Unguarded = unguarded
			tg := startGateway(t, cfg)
			tg.waitServing(t, 1)
			v.slow(t, 20)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sent := 0
			tick := time.NewTicker(25 * time.Millisecond)
			for range 80 { // about 40 a second for 2 s
				<-tick.C
				if _, err := tg.client.Hash(ctx, &verifyv1.HashRequest{Password: []byte("pw")}); err == nil {
					sent++
				}
			}
			tick.Stop()
			if sent < 40 {
				t.Fatalf("only %d of 80 calls answered", sent)
			}
			// Two housekeeping rounds see the calls.
			time.Sleep(2100 * time.Millisecond)
			offered := tg.metric(t, "levee_gateway_margin_offered_per_second", nil)
			capacity := tg.metric(t, "levee_gateway_margin_capacity_per_second", nil)
			load := tg.metric(t, "levee_gateway_margin_congested_load_per_second", nil)
			margin := tg.metric(t, "levee_gateway_bistability_margin", nil)
			if offered <= 0 || capacity <= 0 {
				t.Fatalf("offered %v/s, capacity %v/s: want both measured", offered, capacity)
			}
			f := metastable.Fleet{Capacity: capacity, Sheds: !unguarded}
			pops := []metastable.Population{{Offered: offered, Attempts: 3, RetryRatio: math.Inf(1)}}
			if want := metastable.CongestedLoad(f, pops); math.Abs(load-want) > 1e-6*want {
				t.Errorf("congested load gauge %v, want %v for offered %v, capacity %v", load, want, offered, capacity)
			}
			if want := metastable.Margin(f, pops); math.Abs(margin-want) > 1e-9 {
				t.Errorf("margin gauge %v, want %v", margin, want)
			}
			t.Logf("offered %.1f/s, capacity %.1f/s, load after a trigger %.1f/s, margin %+.2f", offered, capacity, load, margin)
		})
	}
}

// TestMarginArithmeticByFleetKind: with the inputs fixed (one verifier, 1
// worker, 50 ms hashes: C = 20/s; 15 first attempts a second, 3 attempts
// assumed), a guarded gateway sheds (no congested state below C: the load
// after a trigger is A) and an unguarded one queues (3A = 45 > C: stuck).
func TestMarginArithmeticByFleetKind(t *testing.T) {
	for _, tc := range []struct {
		unguarded bool
		load      float64
	}{{false, 15}, {true, 45}} {
		cfg := gatewayConfig("127.0.0.1:1") // never dialled: nothing is sent
		cfg.Unguarded = tc.unguarded
		g, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		b := g.backends.list()[0]
		b.serving.Store(true)
		b.workers.Store(1)
		for range serviceSamples {
			b.service.observe(50 * time.Millisecond)
		}
		b.service.observe(10 * time.Second) // one hash that spanned a pause: the median ignores it
		g.updateMargin(15)
		got := func(name string) float64 { return gather(t, g.Registry(), name, nil) }
		if c := got("levee_gateway_margin_capacity_per_second"); math.Abs(c-20) > 1e-9 {
			t.Errorf("unguarded %v: capacity %v, want 20", tc.unguarded, c)
		}
		if l := got("levee_gateway_margin_congested_load_per_second"); math.Abs(l-tc.load) > 1e-6 {
			t.Errorf("unguarded %v: load after a trigger %v, want %v", tc.unguarded, l, tc.load)
		}
		if m, want := got("levee_gateway_bistability_margin"), 1-tc.load/20; math.Abs(m-want) > 1e-9 {
			t.Errorf("unguarded %v: margin %v, want %v", tc.unguarded, m, want)
		}
		g.Close()
	}
}
