package metastable

import (
	"math"
	"testing"
)

// TestLoginArithmetic: a login service at C = 1,000/s offered A = 800/s by
// callers making 3 attempts each.
func TestLoginArithmetic(t *testing.T) {
	plain := Fleet{Capacity: 1000}
	for _, tc := range []struct {
		name   string
		f      Fleet
		pops   []Population
		load   float64
		stuck  bool
		margin float64
	}{
		{"plain, no budget: 3A = 2,400 > C", plain, []Population{{Offered: 800, Attempts: 3, RetryRatio: math.Inf(1)}}, 2400, true, -1.4},
		{"plain, fleet budget 0.1: A(1 + r) = 880 < C", plain, []Population{{Offered: 800, Attempts: 3, RetryRatio: 0.1}}, 800, false, 0.2},
		{"plain, no retries", plain, []Population{{Offered: 800, Attempts: 1}}, 800, false, 0.2},
		{"plain, 1.2 C offered is over capacity however it retries", plain, []Population{{Offered: 1200, Attempts: 1}}, 1200, true, -0.2},
		{"plain, A just under C/3 with 3 attempts", plain, []Population{{Offered: 330, Attempts: 3, RetryRatio: math.Inf(1)}}, 330, false, 0.67},
		{"two populations: budgeted and naive", plain, []Population{{Offered: 400, Attempts: 3, RetryRatio: 0.1}, {Offered: 250, Attempts: 3, RetryRatio: math.Inf(1)}}, 1190, true, -0.19},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := CongestedLoad(tc.f, tc.pops)
			if math.Abs(l-tc.load) > 1e-6*tc.load {
				t.Errorf("congested load = %v, want %v", l, tc.load)
			}
			m := Margin(tc.f, tc.pops)
			if (m <= 0) != tc.stuck || math.Abs(m-tc.margin) > 0.005 {
				t.Errorf("margin = %v, want %v (stuck %v)", m, tc.margin, tc.stuck)
			}
		})
	}
}

// TestSheddingFleet: a fleet that refuses its excess at once still answers
// C, so at a congested fixed point its goodput A(1 − p^N) equals C, which
// needs A > C: below capacity it has no congested state at all, however its
// callers retry; above it, the fixed point is p^N = 1 − C/A, L = C/(1 − p).
func TestSheddingFleet(t *testing.T) {
	f := Fleet{Capacity: 1000, Sheds: true}
	for _, n := range []int{3, 10, 100} {
		if l := CongestedLoad(f, []Population{{Offered: 990, Attempts: n, RetryRatio: math.Inf(1)}}); math.Abs(l-990) > 1e-3 {
			t.Errorf("A = 0.99 C, %d attempts: congested load %v, want 990 (the shedding fleet recovers)", n, l)
		}
	}
	l := CongestedLoad(f, []Population{{Offered: 1200, Attempts: 10, RetryRatio: math.Inf(1)}})
	p := math.Pow(1-1000.0/1200, 0.1)
	if want := 1000 / (1 - p); math.Abs(l-want) > 1e-3*want {
		t.Errorf("A = 1.2 C, 10 attempts: congested load %v, want %v", l, want)
	}
	if m := Margin(Fleet{}, nil); !math.IsNaN(m) {
		t.Errorf("unknown capacity: margin %v, want NaN", m)
	}
}
