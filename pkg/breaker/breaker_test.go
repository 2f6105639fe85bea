package breaker_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/breaker/breakertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// constRand returns u forever: jitter and half-open admission become exact.
func constRand(u float64) func() float64 { return func() float64 { return u } }

// seededRand is a deterministic uniform source, different for each seed.
func seededRand(seed uint64) func() float64 {
	return rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1)).Float64
}

// testConfig is DefaultConfig on clk with U fixed at 0.5.
func testConfig(clk *breakertest.Clock) breaker.Config {
	cfg := breaker.DefaultConfig()
	cfg.Clock = clk
	cfg.Rand = constRand(0.5)
	return cfg
}

func newBreaker(t testing.TB, cfg breaker.Config) *breaker.Breaker {
	t.Helper()
	b, err := breaker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func record(b *breaker.Breaker, n int, success bool) {
	for range n {
		b.Record(success)
	}
}

// openThenHalfOpen trips b and moves clk past any open time.
func openThenHalfOpen(t *testing.T, b *breaker.Breaker, clk *breakertest.Clock) {
	t.Helper()
	b.Trip()
	clk.Advance(b.Snapshot().OpenUntil.Sub(clk.Now()))
	if got := b.State(); got != breaker.HalfOpen {
		t.Fatalf("state after the open time = %v, want half_open", got)
	}
}

// toStep drives a half-open b with successful requests every 50 ms until
// it is at ramp step want.
func toStep(t *testing.T, b *breaker.Breaker, clk *breakertest.Clock, want int) {
	t.Helper()
	for range 10_000 {
		if s := b.Snapshot(); s.State == breaker.HalfOpen && s.Step == want {
			return
		}
		if b.Allow() {
			b.Record(true)
		}
		clk.Advance(50 * time.Millisecond)
	}
	t.Fatalf("never reached step %d: %+v", want, b.Snapshot())
}

func TestStateString(t *testing.T) {
	for s, want := range map[breaker.State]string{
		breaker.Closed: "closed", breaker.Open: "open", breaker.HalfOpen: "half_open", 7: "State(7)",
	} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", s, got, want)
		}
	}
}

func TestTripsAtMinRequestsAndFailureRate(t *testing.T) {
	// MinRequests 20, FailureRate 0.5. Successes are recorded first, so the
	// last outcome is a failure and the rate only rises.
	for _, tc := range []struct {
		name     string
		ok, fail int
		wantOpen bool
	}{
		{"below MinRequests, all failing", 0, 19, false},
		{"at MinRequests, all failing", 0, 20, true},
		{"45% at MinRequests", 11, 9, false},
		{"exactly 50%", 10, 10, true},
		{"49% over 59", 30, 29, false},
		{"50% over 60", 30, 30, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := breakertest.NewClock(t0)
			b := newBreaker(t, testConfig(clk))
			record(b, tc.ok, true)
			record(b, tc.fail-1, false)
			if got := b.State(); got != breaker.Closed {
				t.Fatalf("before the last outcome: state %v, want closed", got)
			}
			b.Record(false)
			s := b.Snapshot()
			if tc.wantOpen {
				if s.State != breaker.Open || s.Trips != 1 || b.Allow() {
					t.Fatalf("after %d ok, %d failed: %+v, Allow true; want open, one trip, refusing", tc.ok, tc.fail, s)
				}
				return
			}
			want := breaker.Snapshot{State: breaker.Closed, Fraction: 1, Step: -1, Successes: uint64(tc.ok), Failures: uint64(tc.fail)}
			if diff := cmp.Diff(want, s); diff != "" || !b.Allow() {
				t.Fatalf("after %d ok, %d failed (-want +got):\n%s", tc.ok, tc.fail, diff)
			}
		})
	}
	t.Run("rate exactly 0.1", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		cfg := testConfig(clk)
		cfg.FailureRate = 0.1
		b := newBreaker(t, cfg)
		record(b, 27, true)
		record(b, 3, false) // 3 in 30 is exactly the rate
		if got := b.State(); got != breaker.Open {
			t.Fatalf("3 failures in 30 at FailureRate 0.1: state %v, want open", got)
		}
	})
}

func TestOldOutcomesAgeOut(t *testing.T) {
	// Window 10 s in 1 s buckets; the breaker is made at t0.
	t.Run("failures within the window add up", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		b := newBreaker(t, testConfig(clk))
		record(b, 19, false)
		clk.Advance(9500 * time.Millisecond)
		b.Record(false)
		if got := b.State(); got != breaker.Open {
			t.Fatalf("20 failures within 9.5 s: state %v, want open", got)
		}
	})
	t.Run("failures older than the window are forgotten", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		b := newBreaker(t, testConfig(clk))
		record(b, 19, false)
		clk.Advance(10 * time.Second)
		record(b, 19, false)
		if s := b.Snapshot(); s.State != breaker.Closed || s.Failures != 19 {
			t.Fatalf("19 old + 19 new failures: %+v, want closed counting 19", s)
		}
		b.Record(false)
		if got := b.State(); got != breaker.Open {
			t.Fatalf("20 failures in the window: state %v, want open", got)
		}
	})
	t.Run("failures are forgotten whether or not their bucket is reused", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		b := newBreaker(t, testConfig(clk))
		record(b, 19, false) // bucket 0
		clk.Advance(15 * time.Second)
		record(b, 19, false) // bucket 15: bucket 0's slot still holds the old ones
		if s := b.Snapshot(); s.State != breaker.Closed || s.Failures != 19 {
			t.Fatalf("19 old + 19 new failures: %+v, want closed counting 19", s)
		}
	})
	t.Run("successes older than the window are forgotten", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		b := newBreaker(t, testConfig(clk))
		record(b, 25, true)
		clk.Advance(10 * time.Second)
		record(b, 20, false) // 20/45 < 50% had the successes stayed
		if got := b.State(); got != breaker.Open {
			t.Fatalf("20 failures after old successes aged out: state %v, want open", got)
		}
	})
}

func TestOpenRefusesUntilJitteredTimer(t *testing.T) {
	const openFor, jitter = 5 * time.Second, 0.5
	for _, u := range []float64{0, 0.25, 0.5, 0.999999, 1, math.NaN(), -3} {
		t.Run(fmt.Sprint(u), func(t *testing.T) {
			clk := breakertest.NewClock(t0)
			cfg := testConfig(clk)
			cfg.Rand = constRand(u)
			b := newBreaker(t, cfg)
			trippedAt := clk.Advance(time.Second)
			b.Trip()

			clampU := u
			if !(u > 0) {
				clampU = 0
			}
			want := openFor + time.Duration(float64(openFor)*jitter*min(clampU, 0.9999999))
			got := b.Snapshot().OpenUntil.Sub(trippedAt)
			if got < openFor || got >= time.Duration(float64(openFor)*(1+jitter)) || (got-want).Abs() > time.Microsecond {
				t.Fatalf("open for %v with U=%v, want %v, within [%v, %v)", got, u, want, openFor, time.Duration(float64(openFor)*(1+jitter)))
			}

			clk.Advance(got - time.Nanosecond)
			b.Record(true) // an in-flight request finishing: ignored while open
			for range 1000 {
				if b.Allow() {
					t.Fatal("Allow admitted a request 1ns before the open time ended")
				}
			}
			if s := b.Snapshot(); s.State != breaker.Open || s.Fraction != 0 || s.Successes != 0 {
				t.Fatalf("1ns before the end: %+v, want open, fraction 0, nothing counted", s)
			}

			clk.Advance(time.Nanosecond)
			if !b.Allow() {
				t.Fatal("first Allow after the open time: refused, want the probe admitted")
			}
			if s := b.Snapshot(); s.State != breaker.HalfOpen || s.Step != 0 || s.Fraction != 0.01 {
				t.Fatalf("at the end of the open time: %+v, want half_open at step 0 (1%%)", s)
			}
		})
	}
	t.Run("Jitter 0 is exact", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		cfg := testConfig(clk)
		cfg.Jitter = 0
		cfg.Rand = seededRand(1)
		b := newBreaker(t, cfg)
		b.Trip()
		if got := b.Snapshot().OpenUntil.Sub(t0); got != openFor {
			t.Fatalf("open for %v with no jitter, want %v", got, openFor)
		}
	})
}

func TestOpenTimesCoverTheJitterRange(t *testing.T) {
	clk := breakertest.NewClock(t0)
	cfg := testConfig(clk)
	cfg.Rand = seededRand(7)
	b := newBreaker(t, cfg)
	lo, hi := cfg.OpenFor, time.Duration(float64(cfg.OpenFor)*(1+cfg.Jitter))
	minD, maxD := time.Duration(math.MaxInt64), time.Duration(0)
	for i := range 2000 {
		at := clk.Advance(time.Millisecond)
		b.Trip()
		d := b.Snapshot().OpenUntil.Sub(at)
		if d < lo || d >= hi {
			t.Fatalf("trip %d: open for %v, want within [%v, %v)", i, d, lo, hi)
		}
		minD, maxD = min(minD, d), max(maxD, d)
		clk.Advance(d)
		if got := b.State(); got != breaker.HalfOpen {
			t.Fatalf("trip %d: state %v after %v, want half_open", i, got, d)
		}
	}
	if span := hi - lo; minD > lo+span/20 || maxD < hi-span/20 {
		t.Fatalf("2000 open times span [%v, %v], want close to [%v, %v)", minD, maxD, lo, hi)
	}
}

func TestRampAdmitsGradually(t *testing.T) {
	clk := breakertest.NewClock(t0)
	cfg := testConfig(clk)
	cfg.Rand = seededRand(42)
	b := newBreaker(t, cfg)
	b.Trip()
	clk.Advance(time.Duration(float64(cfg.OpenFor) * (1 + cfg.Jitter)))

	// 100,000 requests a second, each admitted one succeeding at once.
	const tick = 10 * time.Microsecond
	type step struct {
		fraction        float64
		calls, admitted int
		from, to        time.Time
	}
	var steps []*step
	for range 2_000_000 {
		f := b.Fraction()
		if f == 1 && b.State() == breaker.Closed {
			break
		}
		if len(steps) == 0 || steps[len(steps)-1].fraction != f {
			steps = append(steps, &step{fraction: f, from: clk.Now()})
		}
		s := steps[len(steps)-1]
		s.calls++
		if b.Allow() {
			s.admitted++
			b.Record(true)
		}
		s.to = clk.Advance(tick)
	}
	if got := b.State(); got != breaker.Closed {
		t.Fatalf("after the ramp: state %v, want closed", got)
	}
	var got []float64
	for _, s := range steps {
		got = append(got, s.fraction)
	}
	if diff := cmp.Diff(cfg.Ramp, got); diff != "" {
		t.Fatalf("ramp steps (-want +got):\n%s", diff)
	}
	prev := 0.0
	for _, s := range steps {
		measured := float64(s.admitted) / float64(s.calls)
		sigma := math.Sqrt(s.fraction * (1 - s.fraction) / float64(s.calls))
		t.Logf("step %4.0f%%: admitted %6d of %6d = %6.3f%% over %v", 100*s.fraction, s.admitted, s.calls, 100*measured, s.to.Sub(s.from))
		if math.Abs(measured-s.fraction) > 5*sigma+1.0/float64(s.calls) {
			t.Errorf("step %g: measured fraction %.5f, want within 5σ (%.5f)", s.fraction, measured, 5*sigma)
		}
		if measured <= prev {
			t.Errorf("step %g: measured fraction %.5f does not exceed the previous step's %.5f", s.fraction, measured, prev)
		}
		prev = measured
		if d := s.to.Sub(s.from); d < cfg.StepFor || d > time.Duration(float64(cfg.StepFor)*(1+cfg.Jitter))+tick {
			t.Errorf("step %g lasted %v, want within [%v, %v)", s.fraction, d, cfg.StepFor, time.Duration(float64(cfg.StepFor)*(1+cfg.Jitter)))
		}
	}
}

func TestRampFailureBurstReopens(t *testing.T) {
	clk := breakertest.NewClock(t0)
	cfg := testConfig(clk)
	cfg.StepFor = time.Minute // the burst, not the clock, must end this step
	cfg.Rand = seededRand(3)
	b := newBreaker(t, cfg)
	openThenHalfOpen(t, b, clk)
	toStep(t, b, clk, 2)

	// A busy 20% step: one failure among many successes does not re-open.
	// (toStep may have recorded the step's first success already.)
	record(b, 40-int(b.Snapshot().Successes), true)
	b.Record(false)
	if s := b.Snapshot(); s.State != breaker.HalfOpen || s.Step != 2 {
		t.Fatalf("one failure in 41: %+v, want still half-open at step 2", s)
	}
	// A burst does, on the failure that brings the step to 50%.
	record(b, 38, false)
	if s := b.Snapshot(); s.State != breaker.HalfOpen || s.Failures != 39 {
		t.Fatalf("39 failures in 79: %+v, want still half-open", s)
	}
	burstAt := clk.Now()
	b.Record(false)
	s := b.Snapshot()
	if s.State != breaker.Open || s.Fraction != 0 || s.Trips != 2 || b.Allow() {
		t.Fatalf("40 failures in 80: %+v, want open (second trip) and refusing", s)
	}
	if d := s.OpenUntil.Sub(burstAt); d < cfg.OpenFor || d >= time.Duration(float64(cfg.OpenFor)*(1+cfg.Jitter)) {
		t.Fatalf("re-opened for %v, want a fresh jittered open time", d)
	}
	clk.Advance(s.OpenUntil.Sub(burstAt))
	if s := b.Snapshot(); s.State != breaker.HalfOpen || s.Step != 0 {
		t.Fatalf("after re-opening: %+v, want half-open from step 0 again", s)
	}
}

func TestHalfOpenReopenRule(t *testing.T) {
	const F, S = false, true
	rep := func(n int, v bool) []bool { return slices.Repeat([]bool{v}, n) }
	for _, tc := range []struct {
		name        string
		minRequests int
		rate        float64
		outcomes    []bool
		reopenAt    int // index of the outcome that re-opens; -1 for none
	}{
		{"failed probe", 1, 0.5, []bool{F}, 0},
		{"one failure in ten", 1, 0.5, append(rep(9, S), F), -1},
		{"success then failure reaches 50%", 1, 0.5, []bool{S, F}, 1},
		{"4 failures cannot yet decide 10", 10, 0.5, rep(4, F), -1},
		{"5 failures decide 10", 10, 0.5, rep(5, F), 4},
		{"after 10 successes, 9 failures are 47%", 10, 0.5, append(rep(10, S), rep(9, F)...), -1},
		{"after 10 successes, 10 failures are 50%", 10, 0.5, append(rep(10, S), rep(10, F)...), 19},
		{"rate 1: three of four", 4, 1, rep(3, F), -1},
		{"rate 1: four of four", 4, 1, rep(4, F), 3},
		{"rate 1: any success spares the step", 4, 1, append([]bool{S}, rep(20, F)...), -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := breakertest.NewClock(t0)
			cfg := testConfig(clk)
			cfg.StepMinRequests = tc.minRequests
			cfg.FailureRate = tc.rate
			cfg.StepFor = time.Hour // the step cannot end by time
			b := newBreaker(t, cfg)
			openThenHalfOpen(t, b, clk)
			got := -1
			for i, ok := range tc.outcomes {
				b.Record(ok)
				if b.State() == breaker.Open {
					got = i
					break
				}
			}
			if got != tc.reopenAt {
				t.Fatalf("re-opened at outcome %d, want %d", got, tc.reopenAt)
			}
		})
	}
}

func TestStepNeedsTimeAndOutcomes(t *testing.T) {
	clk := breakertest.NewClock(t0)
	cfg := testConfig(clk) // U = 0.5: each step lasts 1.25 s
	cfg.StepMinRequests = 3
	b := newBreaker(t, cfg)
	openThenHalfOpen(t, b, clk)

	record(b, 3, true)
	clk.Advance(1250*time.Millisecond - time.Nanosecond)
	if s := b.Snapshot(); s.Step != 0 {
		t.Fatalf("enough outcomes, 1ns early: step %d, want 0", s.Step)
	}
	clk.Advance(time.Nanosecond)
	if s := b.Snapshot(); s.Step != 1 || s.StepUntil.Sub(clk.Now()) != 1250*time.Millisecond {
		t.Fatalf("enough outcomes, on time: %+v, want step 1 for 1.25 s", s)
	}
	record(b, 2, true)
	clk.Advance(time.Hour)
	if s := b.Snapshot(); s.Step != 1 {
		t.Fatalf("2 of 3 outcomes, an hour later: step %d, want 1", s.Step)
	}
	b.Record(true)
	if s := b.Snapshot(); s.Step != 2 {
		t.Fatalf("3 outcomes, late: step %d, want 2", s.Step)
	}
}

func TestClosesAfterLastStepWithEmptyWindow(t *testing.T) {
	clk := breakertest.NewClock(t0)
	cfg := testConfig(clk)
	cfg.Window = time.Minute // the first 20 failures stay inside it throughout
	var mu sync.Mutex
	var changes []string
	var b *breaker.Breaker
	cfg.OnStateChange = func(from, to breaker.State) {
		// Called outside the lock: calling back into the breaker is fine.
		_ = b.Snapshot()
		mu.Lock()
		changes = append(changes, from.String()+"->"+to.String())
		mu.Unlock()
	}
	b = newBreaker(t, cfg)
	record(b, 20, false)
	clk.Advance(8 * time.Second)
	toStep(t, b, clk, 3)
	for b.State() != breaker.Closed {
		if !b.Allow() {
			t.Fatal("the 100% step refused a request")
		}
		b.Record(true)
		clk.Advance(100 * time.Millisecond)
	}
	if s := b.Snapshot(); s.Successes != 0 || s.Failures != 0 {
		t.Fatalf("just closed: %+v, want an empty window", s)
	}
	b.Record(false) // with the 20 old failures still counted this would trip
	if got := b.State(); got != breaker.Closed {
		t.Fatalf("one failure after closing: state %v, want closed", got)
	}
	want := []string{"closed->open", "open->half_open", "half_open->closed"}
	if diff := cmp.Diff(want, changes); diff != "" {
		t.Fatalf("OnStateChange calls (-want +got):\n%s", diff)
	}
}

func TestReopenTimesSpread(t *testing.T) {
	// 50 gateways lose the same node at the same instant.
	const n = 50
	clk := breakertest.NewClock(t0)
	cfg := testConfig(clk)
	var bs []*breaker.Breaker
	for i := range n {
		cfg.Rand = seededRand(uint64(1000 + i))
		bs = append(bs, newBreaker(t, cfg))
	}
	for _, b := range bs {
		b.Trip()
	}
	// Step the clock 1 ms at a time and note when each one first admits.
	reopen := make([]time.Duration, n)
	limit := time.Duration(float64(cfg.OpenFor)*(1+cfg.Jitter)) + time.Millisecond
	for d := time.Duration(0); d <= limit; d += time.Millisecond {
		for i, b := range bs {
			if reopen[i] == 0 && b.Allow() {
				reopen[i] = d
			}
		}
		clk.Advance(time.Millisecond)
	}
	perMs := map[time.Duration]int{}
	crowd := 0
	for i, d := range reopen {
		if d < cfg.OpenFor || d > limit {
			t.Fatalf("breaker %d reopened after %v, want within [%v, %v]", i, d, cfg.OpenFor, limit)
		}
		perMs[d]++
		crowd = max(crowd, perMs[d])
	}
	spread := slices.Max(reopen) - slices.Min(reopen)
	t.Logf("reopen times from %v to %v (spread %v); at most %d in one millisecond", slices.Min(reopen), slices.Max(reopen), spread, crowd)
	if wantSpread := time.Duration(0.3 * float64(cfg.OpenFor) * cfg.Jitter); spread < wantSpread {
		t.Errorf("reopen spread %v, want at least %v", spread, wantSpread)
	}
	if crowd > 3 {
		t.Errorf("%d breakers reopened in the same millisecond, want at most 3", crowd)
	}
}

func TestProbeEveryAtOnePercentStep(t *testing.T) {
	// U is always 0.999, so chance never admits at 1%, 5% or 20%: only
	// probes get through until the 100% step.
	t.Run("probes on a trickle of traffic", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		cfg := testConfig(clk)
		cfg.Rand = constRand(0.999)
		b := newBreaker(t, cfg)
		openThenHalfOpen(t, b, clk)
		start := clk.Now()
		var admitted []time.Duration
		for range 41 { // one request every 50 ms for 2 s
			if b.Allow() {
				admitted = append(admitted, clk.Now().Sub(start))
			}
			clk.Advance(50 * time.Millisecond)
		}
		var want []time.Duration
		for d := time.Duration(0); d <= 2*time.Second; d += cfg.ProbeEvery {
			want = append(want, d)
		}
		if diff := cmp.Diff(want, admitted); diff != "" {
			t.Fatalf("admitted at (-want +got):\n%s", diff)
		}
		if s := b.Snapshot(); s.Step != 0 || s.Fraction != 0.01 {
			t.Fatalf("no outcomes recorded: %+v, want still at step 0", s)
		}
		clk.Advance(time.Minute) // silence
		if !b.Allow() {
			t.Fatal("first request after a quiet minute: refused, want a probe")
		}
		if b.Allow() {
			t.Fatal("second request at the same instant: admitted, want refused")
		}
	})
	t.Run("successful probes close a quiet breaker", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		cfg := testConfig(clk)
		cfg.Rand = constRand(0.999)
		b := newBreaker(t, cfg)
		openThenHalfOpen(t, b, clk)
		start := clk.Now()
		for b.State() != breaker.Closed {
			if clk.Now().Sub(start) > time.Minute {
				t.Fatalf("still %+v after a minute of probes", b.Snapshot())
			}
			if b.Allow() {
				b.Record(true)
			}
			clk.Advance(50 * time.Millisecond)
		}
		// Four steps of at most 1.5 s each, plus the tick that notices.
		if d := clk.Now().Sub(start); d > 6*time.Second+50*time.Millisecond {
			t.Fatalf("closed after %v, want within 6 s", d)
		}
	})
}

func TestTrip(t *testing.T) {
	t.Run("from half-open starts over", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		b := newBreaker(t, testConfig(clk))
		openThenHalfOpen(t, b, clk)
		toStep(t, b, clk, 2)
		at := clk.Now()
		b.Trip()
		s := b.Snapshot()
		if s.State != breaker.Open || s.OpenUntil.Sub(at) != 6250*time.Millisecond || s.Trips != 2 {
			t.Fatalf("Trip at step 2: %+v, want open for 6.25 s, 2 trips", s)
		}
		clk.Advance(6250 * time.Millisecond)
		if s := b.Snapshot(); s.State != breaker.HalfOpen || s.Step != 0 {
			t.Fatalf("after the open time: %+v, want half-open at step 0", s)
		}
	})
	t.Run("while open never shortens", func(t *testing.T) {
		clk := breakertest.NewClock(t0)
		cfg := testConfig(clk)
		us := []float64{0.9, 0, 0.9}
		cfg.Rand = func() float64 { u := us[0]; us = us[1:]; return u }
		b := newBreaker(t, cfg)
		b.Trip() // until 7.25 s
		clk.Advance(time.Second)
		b.Trip() // 1 s + 5 s = 6 s: earlier, ignored
		if got := b.Snapshot().OpenUntil.Sub(t0); got != 7250*time.Millisecond {
			t.Fatalf("shorter second Trip: open until +%v, want +7.25s", got)
		}
		clk.Advance(2 * time.Second)
		b.Trip() // 3 s + 7.25 s
		if s := b.Snapshot(); s.OpenUntil.Sub(t0) != 10250*time.Millisecond || s.Trips != 1 {
			t.Fatalf("longer third Trip: %+v, want open until +10.25s, still one trip", s)
		}
	})
}

func TestAllowDoesNotAllocate(t *testing.T) {
	clk := breakertest.NewClock(t0)
	cfg := testConfig(clk)
	cfg.StepFor = time.Hour
	cfg.OnStateChange = func(from, to breaker.State) {}
	b := newBreaker(t, cfg)
	check := func(state string, f func()) {
		t.Helper()
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", state, n)
		}
	}
	check("Allow closed", func() { b.Allow() })
	check("Record closed", func() { b.Record(true) })
	b.Trip()
	check("Allow open", func() { b.Allow() })
	clk.Advance(time.Hour)
	check("Allow half-open", func() { b.Allow() })
	check("Record half-open", func() { b.Record(true) })
}

// TestConcurrentUse runs every method at once under -race and checks that
// OnStateChange saw one consistent, ordered history.
func TestConcurrentUse(t *testing.T) {
	clk := breakertest.NewClock(t0)
	cfg := breaker.DefaultConfig()
	cfg.Clock = clk
	cfg.Rand = seededRand(9) // not safe for concurrent use: only called under the lock
	cfg.Window = time.Second
	cfg.MinRequests = 5
	cfg.OpenFor = 500 * time.Millisecond
	cfg.StepFor = 100 * time.Millisecond
	cfg.ProbeEvery = 10 * time.Millisecond
	var mu sync.Mutex
	var history []breaker.State
	cfg.OnStateChange = func(from, to breaker.State) {
		mu.Lock()
		defer mu.Unlock()
		if len(history) == 0 {
			history = append(history, from)
		}
		if last := history[len(history)-1]; last != from {
			t.Errorf("change %v->%v after a change to %v", from, to, last)
		}
		history = append(history, to)
	}
	b := newBreaker(t, cfg)

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 20_000 {
				clk.Advance(100 * time.Microsecond) // 16 s in all, shared
				switch {
				case g == 1 && i%2000 == 0:
					b.Trip()
				case i%97 == 0:
					_ = b.Snapshot()
				case b.Allow():
					b.Record(r.Float64() < 0.6)
				}
			}
		})
	}
	wg.Wait()

	final := b.State()
	mu.Lock()
	defer mu.Unlock()
	if len(history) < 4 {
		t.Fatalf("only %d state changes; the test did not exercise the breaker", len(history)-1)
	}
	if history[0] != breaker.Closed || history[len(history)-1] != final {
		t.Fatalf("history runs %v..%v, want closed..%v", history[0], history[len(history)-1], final)
	}
	legal := map[[2]breaker.State]bool{
		{breaker.Closed, breaker.Open}: true, {breaker.Open, breaker.HalfOpen}: true,
		{breaker.HalfOpen, breaker.Open}: true, {breaker.HalfOpen, breaker.Closed}: true,
	}
	for i := 1; i < len(history); i++ {
		if !legal[[2]breaker.State{history[i-1], history[i]}] {
			t.Fatalf("illegal change %v->%v", history[i-1], history[i])
		}
	}
	t.Logf("%d state changes, %d trips", len(history)-1, b.Snapshot().Trips)
}

func TestOnStateChangePanicDoesNotWedgeDelivery(t *testing.T) {
	clk := breakertest.NewClock(t0)
	cfg := testConfig(clk)
	var seen []breaker.State
	cfg.OnStateChange = func(from, to breaker.State) {
		seen = append(seen, to)
		if to == breaker.Open && len(seen) == 1 {
			panic("observer bug")
		}
	}
	b := newBreaker(t, cfg)
	func() {
		defer func() { _ = recover() }()
		b.Trip()
	}()
	clk.Advance(time.Minute)
	b.State()
	if want := []breaker.State{breaker.Open, breaker.HalfOpen}; !slices.Equal(seen, want) {
		t.Fatalf("observed %v, want %v", seen, want)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := breaker.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*breaker.Config)
		want   []string // substrings of the error: the field and the value
	}{
		{"Window zero", func(c *breaker.Config) { c.Window = 0 }, []string{"Window", "0s"}},
		{"Window too fine", func(c *breaker.Config) { c.Window = 999 * time.Microsecond }, []string{"Window", "999µs"}},
		{"Window over a day", func(c *breaker.Config) { c.Window = 25 * time.Hour }, []string{"Window", "25h0m0s"}},
		{"MinRequests zero", func(c *breaker.Config) { c.MinRequests = 0 }, []string{"MinRequests", "got 0"}},
		{"FailureRate zero", func(c *breaker.Config) { c.FailureRate = 0 }, []string{"FailureRate", "got 0"}},
		{"FailureRate above 1", func(c *breaker.Config) { c.FailureRate = 1.5 }, []string{"FailureRate", "1.5"}},
		{"FailureRate NaN", func(c *breaker.Config) { c.FailureRate = math.NaN() }, []string{"FailureRate", "NaN"}},
		{"OpenFor negative", func(c *breaker.Config) { c.OpenFor = -time.Second }, []string{"OpenFor", "-1s"}},
		{"Jitter negative", func(c *breaker.Config) { c.Jitter = -0.1 }, []string{"Jitter", "-0.1"}},
		{"Jitter above 1", func(c *breaker.Config) { c.Jitter = 2 }, []string{"Jitter", "got 2"}},
		{"Ramp empty", func(c *breaker.Config) { c.Ramp = nil }, []string{"Ramp", "empty"}},
		{"Ramp not increasing", func(c *breaker.Config) { c.Ramp = []float64{0.1, 0.1, 1} }, []string{"Ramp [0.1 0.1 1]", "step 1 (0.1)"}},
		{"Ramp step zero", func(c *breaker.Config) { c.Ramp = []float64{0, 1} }, []string{"Ramp", "step 0 is 0"}},
		{"Ramp not ending at 1", func(c *breaker.Config) { c.Ramp = []float64{0.1, 0.5} }, []string{"Ramp", "last step is 0.5"}},
		{"Ramp above 1", func(c *breaker.Config) { c.Ramp = []float64{0.5, 2} }, []string{"Ramp", "step 1 is 2"}},
		{"StepFor zero", func(c *breaker.Config) { c.StepFor = 0 }, []string{"StepFor", "0s"}},
		{"StepMinRequests zero", func(c *breaker.Config) { c.StepMinRequests = 0 }, []string{"StepMinRequests", "got 0"}},
		{"ProbeEvery zero", func(c *breaker.Config) { c.ProbeEvery = 0 }, []string{"ProbeEvery", "0s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := breaker.DefaultConfig()
			tc.mutate(&cfg)
			err := cfg.Validate()
			if !errors.Is(err, breaker.ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want an error wrapping ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to mention %q", err, w)
				}
			}
			if strings.Count(err.Error(), "\n") != 0 {
				t.Errorf("Validate() = %q, want exactly one problem", err)
			}
			if b, err := breaker.New(cfg); b != nil || !errors.Is(err, breaker.ErrInvalidConfig) {
				t.Errorf("New() = %v, %v; want nil and the error", b, err)
			}
		})
	}
	t.Run("every problem is reported", func(t *testing.T) {
		err := breaker.Config{}.Validate()
		for _, field := range []string{"Window", "MinRequests", "FailureRate", "OpenFor", "Ramp", "StepFor", "StepMinRequests", "ProbeEvery"} {
			if err == nil || !strings.Contains(err.Error(), field) {
				t.Errorf("zero Config: %v; want %s named", err, field)
			}
		}
	})
}

func TestNewCopiesRamp(t *testing.T) {
	clk := breakertest.NewClock(t0)
	cfg := testConfig(clk)
	cfg.Ramp = []float64{0.5, 1}
	b := newBreaker(t, cfg)
	cfg.Ramp[0] = 0.9
	openThenHalfOpen(t, b, clk)
	if got := b.Fraction(); got != 0.5 {
		t.Fatalf("Fraction after the caller changed its Ramp = %v, want 0.5", got)
	}
}

// Benchmarks use the system clock and default Rand, as a gateway would.
//
//	go test -run '^$' -bench . -benchmem ./pkg/breaker/

func BenchmarkAllowClosed(b *testing.B) {
	br := newBreaker(b, breaker.DefaultConfig())
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			br.Allow()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				br.Allow()
			}
		})
	})
}

func BenchmarkAllowHalfOpen(b *testing.B) {
	cfg := breaker.DefaultConfig()
	cfg.OpenFor = time.Nanosecond
	cfg.Ramp = []float64{0.2, 1}
	cfg.StepFor = time.Hour    // no outcomes are recorded, so it stays at 20%
	cfg.ProbeEvery = time.Hour // and admits by chance only
	br := newBreaker(b, cfg)
	br.Trip()
	for br.State() != breaker.HalfOpen {
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			br.Allow()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				br.Allow()
			}
		})
	})
}

func BenchmarkAllowOpen(b *testing.B) {
	cfg := breaker.DefaultConfig()
	cfg.OpenFor = 24 * time.Hour
	br := newBreaker(b, cfg)
	br.Trip()
	b.ReportAllocs()
	for b.Loop() {
		br.Allow()
	}
}

func BenchmarkRecordClosed(b *testing.B) {
	br := newBreaker(b, breaker.DefaultConfig())
	b.ReportAllocs()
	for b.Loop() {
		br.Record(true)
	}
}

// A request admitted and then not sent gives its probe back: the next
// request is a probe, however soon. Without Cancel the probe was spent, and
// with chance never admitting the breaker refused everything until the
// next ProbeEvery, for as long as its admitted requests never reached the
// backend. Cancel does nothing while closed or open.
func TestCancelGivesTheProbeBack(t *testing.T) {
	clk := breakertest.NewClock(t0)
	cfg := testConfig(clk)
	cfg.Rand = constRand(0.999) // chance never admits at 1 %
	cfg.ProbeEvery = time.Hour
	b := newBreaker(t, cfg)

	b.Cancel() // closed: nothing to give back
	if !b.Allow() {
		t.Fatal("closed breaker refused after Cancel")
	}
	openThenHalfOpen(t, b, clk)
	if !b.Allow() {
		t.Fatal("first request after the open time: refused, want the probe")
	}
	if b.Allow() {
		t.Fatal("second request at once: admitted, want refused (the probe is out)")
	}
	b.Cancel()
	clk.Advance(time.Millisecond)
	if !b.Allow() {
		t.Fatal("after the probe was cancelled: refused, want the next request to probe")
	}
	if b.Allow() {
		t.Fatal("a second request after one cancel: admitted, want refused")
	}
	b.Record(true)
	if s := b.Snapshot(); s.State != breaker.HalfOpen || s.Successes != 1 {
		t.Fatalf("after the probe's success: %+v, want half-open with one success", s)
	}

	b.Trip()
	b.Cancel() // open: nothing admitted, nothing to give back
	if b.Allow() {
		t.Fatal("open breaker admitted after Cancel")
	}
}
