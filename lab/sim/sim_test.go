package sim

import (
	"testing"
	"time"

	"github.com/leveehq/levee/lab/observe"
)

// TestSimFullScaleArithmetic checks the simulator against the arithmetic of
// a metastable failure at full scale (C = 1,000/s, A = 800/s, 2 s timeouts,
// 3 attempts, 500 processes, a 19 s stall), by counting attempts and
// successes:
//
//   - a plain fleet without a budget settles at L = 3A = 2,400 attempts/s
//     with no goodput, for good;
//   - per-process budgets (ratio 0.1 + 1 retry/s each) leave a congested
//     load of A(1 + r) + 500 > C: stuck too;
//   - the fleet budget bounds L at A(1 + r) + 1 < C: the backlog drains at
//     C − L, and the fleet recovers;
//   - Levee's defences recover at once whatever the budget.
func TestSimFullScaleArithmetic(t *testing.T) {
	t.Parallel()
	type want struct {
		stuck      bool
		lo, hi     float64       // attempts per second 10–40 s after the stall
		recoveryLE time.Duration // when not stuck
	}
	for _, tc := range []struct {
		guarded bool
		budget  BudgetMode
		after   time.Duration // long enough to tell stuck from slow
		want    want
	}{
		{false, NoBudget, 50 * time.Second, want{stuck: true, lo: 2300, hi: 2500}},
		{false, ProcessBudget, 50 * time.Second, want{stuck: true, lo: 1300, hi: 1450}},
		{false, FleetBudget, 150 * time.Second, want{lo: 820, hi: 920, recoveryLE: 2 * time.Minute}},
		{true, NoBudget, 45 * time.Second, want{lo: 700, hi: 900, recoveryLE: 2 * time.Second}},
		{true, FleetBudget, 45 * time.Second, want{lo: 700, hi: 900, recoveryLE: 2 * time.Second}},
	} {
		c := FullScale(tc.guarded, tc.budget)
		c.After = tc.after
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			r, err := Run(c)
			if err != nil {
				t.Fatal(err)
			}
			v := r.Verdict
			if v.BaselineRatio < 0.98 {
				t.Fatalf("baseline served %.3f of arrivals at 0.8 C, want ≥ 0.98", v.BaselineRatio)
			}
			att := observe.Mean(r.Series.Attempts(), r.Trig.To+10, r.Trig.To+40)
			if att < tc.want.lo || att > tc.want.hi {
				t.Errorf("attempts after the stall = %.0f/s, want in [%v, %v]", att, tc.want.lo, tc.want.hi)
			}
			if v.Stuck != tc.want.stuck {
				t.Fatalf("stuck = %v (after %.2f of baseline), want %v", v.Stuck, v.AfterFraction, tc.want.stuck)
			}
			if !v.Stuck && v.Recovery > tc.want.recoveryLE {
				t.Errorf("recovered in %v, want ≤ %v", v.Recovery, tc.want.recoveryLE)
			}
			if v.Stuck && v.AfterFraction > 0.01 {
				t.Errorf("stuck at %.3f of baseline, want 0", v.AfterFraction)
			}
			// Levee hashes for a caller who left only what was running when
			// the stall began (100 workers); a plain fleet hashes its whole
			// backlog.
			if tc.guarded && v.Wasted > 150 {
				t.Errorf("guarded fleet wasted %v hashes, want at most the 100 running at the stall (and a few)", v.Wasted)
			}
			if !tc.guarded && v.Wasted < 10000 {
				t.Errorf("plain fleet wasted %v hashes, want its backlog (thousands)", v.Wasted)
			}
		})
	}
}

// TestSimulateDeterministic: one seed, one history.
func TestSimulateDeterministic(t *testing.T) {
	t.Parallel()
	c := FullScale(true, FleetBudget)
	c.After = 20 * time.Second
	a, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	ga, gb := a.Series.Goodput(), b.Series.Goodput()
	for i := range ga {
		if ga[i] != gb[i] {
			t.Fatalf("second %d: goodput %v then %v from the same seed", i, ga[i], gb[i])
		}
	}
}

// TestSimSmallFleet simulates the lab's own small fleet (2 verifiers of one
// worker, C ≈ 140/s), as every single experiment's report does beside the
// real run: it must build (its limiter's ceiling is below the default
// initial limit) and the plain fleet must stick after a 10 s stall at 0.7 C.
func TestSimSmallFleet(t *testing.T) {
	t.Parallel()
	for _, guarded := range []bool{false, true} {
		c := Config{Verifiers: 2, Workers: 1, Service: 14 * time.Millisecond, Jitter: 0.1, Guarded: guarded, Budget: NoBudget,
			Ratio: 0.1, Burst: 10, MinPerSecond: 1, Processes: 1, Attempts: 3, Timeout: 2 * time.Second, Load: 0.7,
			Warmup: 5 * time.Second, Baseline: 15 * time.Second, After: 30 * time.Second, AfterWindow: 10 * time.Second,
			TriggerDuration: 10 * time.Second, Seed: 1}
		r, err := Run(c)
		if err != nil {
			t.Fatal(err)
		}
		if r.Verdict.Stuck == guarded {
			t.Errorf("%s: stuck %v, want %v", c.Name(), r.Verdict.Stuck, !guarded)
		}
	}
}
