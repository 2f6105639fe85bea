package gateway

import (
	"context"
	"math"
	"testing"
	"time"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/breaker/breakertest"
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
			tg := startGatewayOnFakeClock(t, cfg)
			tg.waitServing(t, 1)
			v.slow(t, 20)
			tg.g.tick() // the windows start now

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sent := 0
			for range 80 {
				if _, err := tg.client.Hash(ctx, &verifyv1.HashRequest{Password: []byte("pw")}); err == nil {
					sent++
				}
			}
			if sent < 40 {
				t.Fatalf("only %d of 80 calls answered", sent)
			}
			// Two seconds of the gateway's clock: about 40 first attempts a
			// second.
			tg.clock.Advance(2 * time.Second)
			tg.g.tick()
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

// TestMarginArithmeticByFleetKind: with the inputs fixed (C = 20/s; 15
// first attempts a second, 3 attempts assumed), a guarded gateway sheds (no
// congested state below C: the load after a trigger is A) and an unguarded
// one queues (3A = 45 > C: stuck). The capacity's own arithmetic (workers
// over median service times) is package upstream's to test.
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
		g.setMargin(20, 15, 3)
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

// The gateway's per-second work runs once per second of its clock, however
// often tick is called: a test on a fake clock calls it itself, and the
// housekeeping's real ticks in between must change nothing.
func TestTickOncePerSecondOfTheClock(t *testing.T) {
	cfg := gatewayConfig("127.0.0.1:1") // never dialled: nothing is sent
	clock := breakertest.NewClock(time.Unix(1_000_000, 0))
	cfg.Clock = clock
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ratio := func() float64 {
		return gather(t, g.Registry(), "levee_gateway_retry_ratio", map[string]string{"source": "clients"})
	}
	g.tick()
	for range 10 {
		g.clientRatio.add(true)
	}
	for range 5 {
		g.clientRatio.add(false)
	}
	clock.Advance(time.Second)
	g.tick()
	if got := ratio(); got != 0.5 {
		t.Fatalf("retry ratio %v after 10 first attempts and 5 retries, want 0.5", got)
	}
	for range 10 {
		g.clientRatio.add(false)
	}
	g.tick() // the same second
	if got := ratio(); got != 0.5 {
		t.Errorf("retry ratio %v after a second tick in the same second, want 0.5 (nothing rolled)", got)
	}
	clock.Advance(time.Second)
	g.tick()
	if got := ratio(); got != 1.5 {
		t.Errorf("retry ratio %v a second later, want 1.5", got)
	}
}
