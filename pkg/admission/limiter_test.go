package admission

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/leveehq/levee/pkg/callmeta"
)

// fakeClock stands still until Advance moves it. It is safe for concurrent
// use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// The six classes, in shedding order.
var (
	batchRetry       = Class{Priority: callmeta.Batch, Retry: true}
	batch            = Class{Priority: callmeta.Batch}
	interactiveRetry = Class{Priority: callmeta.Interactive, Retry: true}
	interactive      = Class{Priority: callmeta.Interactive}
	criticalRetry    = Class{Priority: callmeta.Critical, Retry: true}
	critical         = Class{Priority: callmeta.Critical}

	classes = []Class{batchRetry, batch, interactiveRetry, interactive, criticalRetry, critical}
)

func className(c Class) string {
	if c.Retry {
		return c.Priority.String() + "-retry"
	}
	return c.Priority.String()
}

var (
	ok0        = Sample{Outcome: OutcomeOK}
	overloaded = Sample{Outcome: OutcomeOverloaded}
)

func okWait(d time.Duration) Sample { return Sample{QueueWait: d, Outcome: OutcomeOK} }

// testConfig is DefaultConfig on clk.
func testConfig(clk *fakeClock) Config {
	cfg := DefaultConfig()
	cfg.Clock = clk
	return cfg
}

func newLimiter(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// fill admits requests of class c until one is refused and returns how many
// were admitted.
func fill(l *Limiter, c Class) int {
	n := 0
	for l.Acquire(c) == ReasonAdmitted {
		n++
	}
	return n
}

// release releases n requests with sample s.
func release(l *Limiter, n int, s Sample) {
	for range n {
		l.Release(s)
	}
}

// saturatedWindow fills the limit with critical requests, releases them all
// with sample s (twice over if one fill is fewer than MinSamples), and moves
// the clock one window on. It returns the adaptive limit after the window.
func saturatedWindow(l *Limiter, clk *fakeClock, s Sample) int {
	for samples := 0; samples < int(l.minSamples); {
		n := fill(l, critical)
		release(l, n, s)
		samples += n
	}
	clk.Advance(l.window)
	// The window ends at its first release after Window has passed: one
	// more request, released without a sample, would not end it, so end it
	// with the same sample.
	if l.Acquire(critical) == ReasonAdmitted {
		l.Release(s)
	}
	return l.Adaptive()
}

func TestGrowsUnderDemandUpToCeiling(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.Ceiling = 40
	l := newLimiter(t, cfg)

	var got []int
	for range 30 {
		got = append(got, saturatedWindow(l, clk, ok0))
	}
	// The first window ends at the first release after 250 ms: before any
	// queue has formed the limit doubles (slow start).
	if got[0] != 16 || got[1] != 32 {
		t.Errorf("adaptive after windows of demand and empty queues = %v, want 16, 32 (slow start doubles)", got[:2])
	}
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] || got[i] > cfg.Ceiling {
			t.Fatalf("adaptive went %v: not non-decreasing up to the ceiling %d", got, cfg.Ceiling)
		}
	}
	if last := got[len(got)-1]; last != cfg.Ceiling || l.Limit() != cfg.Ceiling {
		t.Fatalf("after 30 windows of demand: adaptive %d, limit %d (history %v); want both at the ceiling %d",
			last, l.Limit(), got, cfg.Ceiling)
	}
}

// With InitialLimit 0 the limit is the ceiling, wherever the ceiling moves,
// and needs no demand to get there, until a queue forms; from then on it
// adapts like any other and no longer follows a rising ceiling.
func TestStartsAtTheCeiling(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit, cfg.Ceiling = 0, 300
	l := newLimiter(t, cfg)
	if got := l.Limit(); got != 300 {
		t.Fatalf("limit of a new limiter with InitialLimit 0 = %d, want the ceiling 300", got)
	}
	l.SetCeiling(50) // the verifiers have reported their slots
	l.SetCeiling(60)
	if got := l.Limit(); got != 60 {
		t.Fatalf("limit after the ceiling moved to 60 = %d, want 60", got)
	}
	// A dip (a verifier missing) during which a queue forms, short of the
	// target: when the ceiling rises again the limit is back with it.
	l.SetCeiling(30)
	saturatedWindow(l, clk, okWait(30*time.Millisecond)) // above half the target: a queue has formed
	l.SetCeiling(60)
	if got := l.Limit(); got != 60 {
		t.Fatalf("limit after a dip to 30 with a queue and the ceiling back at 60 = %d, want 60", got)
	}
	// Empty queues, no demand: it stays at the ceiling.
	for range 5 {
		saturatedWindow(l, clk, ok0)
	}
	if got := l.Limit(); got != 60 {
		t.Fatalf("limit after windows of empty queues = %d, want the ceiling 60", got)
	}
	// A queue above the target: it shrinks from the ceiling, as any limit.
	if got := saturatedWindow(l, clk, okWait(100*time.Millisecond)); got != 42 {
		t.Fatalf("adaptive after a window at twice the target = %d, want 42 (60 × 0.7)", got)
	}
	if got := l.Limit(); got != 42 {
		t.Fatalf("limit after the shrink = %d, want 42", got)
	}
	// From now on a rising ceiling is not followed: the limit regrows only
	// under demand.
	l.SetCeiling(200)
	if got := l.Limit(); got != 42 {
		t.Fatalf("limit after the ceiling rose, once a queue had formed = %d, want 42", got)
	}
}

func TestGrowthSlowsNearTarget(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 100
	l := newLimiter(t, cfg)
	// Queue wait at 90% of the target (a queue has formed: slow start is
	// over): the step is √100 × 0.1 = 1.
	if got := saturatedWindow(l, clk, okWait(45*time.Millisecond)); got != 101 {
		t.Errorf("adaptive after a window at 90%% of the target = %d, want 101", got)
	}
	// At half the target: √101 × 0.5 ≈ 5.02.
	if got := saturatedWindow(l, clk, okWait(25*time.Millisecond)); got != 106 {
		t.Errorf("adaptive after a window at 50%% of the target = %d, want 106", got)
	}
	// Empty queues again: √106 ≈ 10.3, not a doubling.
	if got := saturatedWindow(l, clk, ok0); got != 116 {
		t.Errorf("adaptive after an empty window once a queue had formed = %d, want 116 (106 + √106)", got)
	}
}

func TestNoGrowthWithoutDemand(t *testing.T) {
	clk := newFakeClock()
	l := newLimiter(t, testConfig(clk))
	for range 50 {
		// 6 of 8 in flight at most: below 90% of the limit, nothing refused.
		for range 2 {
			for range 6 {
				if r := l.Acquire(interactive); r != ReasonAdmitted {
					t.Fatalf("Acquire = %v with 6 of 8 in flight", r)
				}
			}
			release(l, 6, ok0)
		}
		clk.Advance(l.window)
	}
	if got := l.Adaptive(); got != 8 {
		t.Fatalf("adaptive after 50 windows at 75%% use and empty queues = %d, want 8 (unchanged)", got)
	}
}

func TestRefusalsOfOneClassAreDemand(t *testing.T) {
	// Batch alone never fills more than BatchShare of the limit; its
	// refusals must still grow the limit while the queues are empty.
	clk := newFakeClock()
	l := newLimiter(t, testConfig(clk))
	for range 20 {
		for samples := 0; samples < 10; {
			n := fill(l, batch)
			release(l, n, ok0)
			samples += n
		}
		clk.Advance(l.window)
		if l.Acquire(batch) == ReasonAdmitted {
			l.Release(ok0)
		}
	}
	if got := l.Adaptive(); got <= 20 {
		t.Fatalf("adaptive after 20 windows of batch refused by its share over empty queues = %d, want it grown well past 8", got)
	}
}

func TestNoGrowthWhileClamped(t *testing.T) {
	clk := newFakeClock()
	l := newLimiter(t, testConfig(clk))
	l.SetClamp(4)
	for range 20 {
		saturatedWindow(l, clk, ok0)
	}
	if got := l.Adaptive(); got != 8 {
		t.Fatalf("adaptive after 20 windows saturating a clamp of 4 = %d, want 8: refusals by the clamp are not demand", got)
	}
	// High queue wait still shrinks it under the clamp.
	saturatedWindow(l, clk, okWait(time.Second))
	if got := l.Adaptive(); got != 5 {
		t.Fatalf("adaptive after a window of 1 s queue wait under a clamp = %d, want 5 (8 × 0.7)", got)
	}
}

func TestShrinksMultiplicatively(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backoff float64
		sample  Sample
		want    int // from 100
	}{
		// The gradient target/observed, when above Backoff.
		{"wait 1.25×target", 0.7, okWait(62500 * time.Microsecond), 80},
		// Backoff bounds one window's cut.
		{"wait 4×target", 0.7, okWait(200 * time.Millisecond), 70},
		{"wait 4×target, backoff 0.5", 0.5, okWait(200 * time.Millisecond), 50},
		// Overloaded counts as 2×target at least.
		{"overloaded", 0.7, overloaded, 70},
		{"overloaded, backoff 0.4", 0.4, overloaded, 50},
		// At the target: no decrease (and growth, since there is demand).
		{"wait = target", 0.7, okWait(50 * time.Millisecond), 101},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := testConfig(clk)
			cfg.InitialLimit = 100
			cfg.Backoff = tc.backoff
			l := newLimiter(t, cfg)
			if got := saturatedWindow(l, clk, tc.sample); got != tc.want {
				t.Errorf("adaptive after one window = %d, want %d", got, tc.want)
			}
			if s := l.Snapshot(); tc.sample.Outcome == OutcomeOK && s.QueueWait != tc.sample.QueueWait {
				t.Errorf("Snapshot().QueueWait = %v, want the window's mean %v", s.QueueWait, tc.sample.QueueWait)
			}
		})
	}
}

func TestShrinksNotBelowMinLimit(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 500
	l := newLimiter(t, cfg)
	prev := l.Adaptive()
	for i := range 40 {
		s := okWait(time.Second)
		if i%2 == 1 {
			s = overloaded
		}
		got := saturatedWindow(l, clk, s)
		if got < cfg.MinLimit {
			t.Fatalf("window %d: adaptive %d below MinLimit %d", i, got, cfg.MinLimit)
		}
		if prev > cfg.MinLimit && float64(got) > float64(prev)*0.7+1 {
			t.Fatalf("window %d: adaptive went %d → %d, want at most ×0.7", i, prev, got)
		}
		prev = got
	}
	if prev != cfg.MinLimit {
		t.Fatalf("adaptive after 40 overloaded windows = %d, want MinLimit %d", prev, cfg.MinLimit)
	}
}

func TestOverloadedMixedWithLowWait(t *testing.T) {
	// One Overloaded among many empty-queue samples still cuts the limit:
	// the window observes max(mean, 2×target).
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 100
	l := newLimiter(t, cfg)
	n := fill(l, critical)
	release(l, n-1, ok0)
	clk.Advance(l.window)
	l.Release(overloaded)
	if got := l.Adaptive(); got != 70 {
		t.Fatalf("adaptive after a window of %d empty-queue samples and one Overloaded = %d, want 70", n-1, got)
	}
	if got := l.Snapshot().QueueWait; got != 100*time.Millisecond {
		t.Fatalf("observed queue wait = %v, want 2×target = 100ms", got)
	}
}

func TestWindowCarriesOverBelowMinSamples(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 100
	l := newLimiter(t, cfg)
	fill(l, critical)
	clk.Advance(10 * l.window)
	release(l, 9, okWait(time.Second))
	if got := l.Adaptive(); got != 100 {
		t.Fatalf("adaptive after 9 samples = %d, want 100: a window of fewer than MinSamples carries over", got)
	}
	l.Release(okWait(time.Second))
	if got := l.Adaptive(); got != 70 {
		t.Fatalf("adaptive after the 10th sample = %d, want 70", got)
	}
}

func TestOverloadedNeedsNoMinSamples(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 100
	l := newLimiter(t, cfg)
	fill(l, critical)
	clk.Advance(l.window)
	l.Release(overloaded)
	if got := l.Adaptive(); got != 70 {
		t.Fatalf("adaptive after a window with one sample, Overloaded = %d, want 70", got)
	}
}

func TestDemandCarriedByInFlight(t *testing.T) {
	// A window that starts with the limit in use has demand even if nothing
	// is admitted or refused in it.
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 100
	l := newLimiter(t, cfg)
	fill(l, critical)
	clk.Advance(l.window)
	release(l, 10, okWait(time.Second)) // 100 → 70, with 90 still in flight
	if got := l.Adaptive(); got != 70 {
		t.Fatalf("adaptive after a window of 1 s queue wait = %d, want 70", got)
	}
	clk.Advance(l.window)
	release(l, 10, ok0) // 80 in flight, over the limit of 70 all window
	if got := l.Adaptive(); got != 78 {
		t.Fatalf("adaptive after a window over the limit with empty queues = %d, want 78 (70 + √70)", got)
	}
}

func TestAtMostOncePerWindow(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 100
	l := newLimiter(t, cfg)
	fill(l, critical)
	release(l, 50, okWait(time.Second)) // within the first window: nothing yet
	if got := l.Adaptive(); got != 100 {
		t.Fatalf("adaptive before the first window ended = %d, want 100", got)
	}
	clk.Advance(l.window)
	release(l, 50, okWait(time.Second)) // ends the window once, on the first of these
	if got := l.Adaptive(); got != 70 {
		t.Fatalf("adaptive after 100 samples and one window = %d, want 70 (one cut)", got)
	}
	clk.Advance(l.window - 1)
	fill(l, critical)
	release(l, l.InFlight(), okWait(time.Second))
	if got := l.Adaptive(); got != 70 {
		t.Fatalf("adaptive 1 ns before the second window ended = %d, want 70", got)
	}
}

func TestIgnoredSamples(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 100
	l := newLimiter(t, cfg)
	for range 5 {
		n := fill(l, critical)
		clk.Advance(l.window)
		release(l, n, Sample{QueueWait: time.Second}) // zero Outcome: ignore
	}
	if got, in := l.Adaptive(), l.InFlight(); got != 100 || in != 0 {
		t.Fatalf("after 500 ignored samples: adaptive %d, in flight %d; want 100 and 0", got, in)
	}
}

func TestClampsCapImmediately(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 50
	l := newLimiter(t, cfg)

	step := func(what string, set func(), wantLimit int) {
		t.Helper()
		set()
		if got := l.Limit(); got != wantLimit {
			t.Fatalf("%s: Limit() = %d, want %d", what, got, wantLimit)
		}
		if got := fill(l, critical); got != wantLimit {
			t.Fatalf("%s: admitted %d critical requests, want %d", what, got, wantLimit)
		}
		release(l, wantLimit, Sample{})
	}
	step("clamp 10", func() { l.SetClamp(10) }, 10)
	step("emergency 5", func() { l.SetEmergency(5) }, 5)
	step("emergency 20 above clamp 10", func() { l.SetEmergency(20) }, 10)
	step("clamp removed", func() { l.SetClamp(0) }, 20)
	step("emergency removed", func() { l.SetEmergency(0) }, 50)
	step("negative clamp is none", func() { l.SetClamp(-3) }, 50)
	step("ceiling 30", func() { l.SetCeiling(30) }, 30)
	if got := l.Adaptive(); got != 50 {
		t.Fatalf("adaptive after SetCeiling(30) = %d, want 50: a ceiling caps the limit, not what was learnt", got)
	}
	step("ceiling 100", func() { l.SetCeiling(100) }, 50) // back at once: no ratchet
	step("ceiling 1 below MinLimit", func() { l.SetCeiling(1) }, 1)
	step("ceiling back to 100", func() { l.SetCeiling(100) }, 50)
	step("ceiling 0 means 1", func() { l.SetCeiling(0) }, 1)

	want := Snapshot{Limit: 1, Adaptive: 50, Ceiling: 1}
	if diff := cmp.Diff(want, l.Snapshot()); diff != "" {
		t.Fatalf("Snapshot() (-want +got):\n%s", diff)
	}
}

func TestLoweredLimitEvictsNothing(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 20
	l := newLimiter(t, cfg)
	fill(l, critical)
	l.SetEmergency(5)
	for range 15 {
		if r := l.Acquire(critical); r != ReasonLimit {
			t.Fatalf("Acquire with 20 in flight over a limit of 5 = %v, want limit", r)
		}
		l.Release(Sample{})
	}
	// 5 in flight now: still at the limit.
	if r := l.Acquire(critical); r != ReasonLimit {
		t.Fatalf("Acquire with 5 in flight, limit 5 = %v, want limit", r)
	}
	l.Release(Sample{})
	if r := l.Acquire(critical); r != ReasonAdmitted {
		t.Fatalf("Acquire with 4 in flight, limit 5 = %v, want admitted", r)
	}
}

func TestThresholds(t *testing.T) {
	// Columns: batch retry, batch, interactive retry, interactive, critical
	// retry, critical.
	for _, tc := range []struct {
		limit int
		want  []int
	}{
		{1, []int{0, 0, 0, 0, 0, 1}},
		{2, []int{0, 1, 1, 1, 1, 2}},
		{3, []int{1, 1, 2, 2, 2, 3}},
		{5, []int{2, 2, 3, 4, 4, 5}},
		{10, []int{4, 5, 7, 8, 9, 10}},
		{100, []int{45, 50, 72, 80, 90, 100}},
		{1000, []int{450, 500, 720, 800, 900, 1000}},
	} {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MinLimit, cfg.InitialLimit = 1, tc.limit
			l := newLimiter(t, cfg)
			var got []int
			for _, c := range classes {
				got = append(got, l.Threshold(c))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("thresholds (-want +got):\n%s", diff)
			}
			// And Acquire honours them: each class, alone, fills to its
			// threshold.
			for i, c := range classes {
				if n := fill(l, c); n != tc.want[i] {
					t.Errorf("%s alone: admitted %d, want %d", className(c), n, tc.want[i])
				}
				release(l, l.InFlight(), Sample{})
			}
		})
	}
}

func TestReasons(t *testing.T) {
	cfg := DefaultConfig()
	cfg.InitialLimit = 10
	l := newLimiter(t, cfg)
	if n := fill(l, interactive); n != 8 {
		t.Fatalf("interactive filled %d, want 8", n)
	}
	if r := l.Acquire(interactive); r != ReasonPriority {
		t.Errorf("interactive at 8 of 10 = %v, want priority", r)
	}
	if r := l.Acquire(batch); r != ReasonPriority {
		t.Errorf("batch at 8 of 10 = %v, want priority", r)
	}
	fill(l, critical)
	for _, c := range classes {
		if r := l.Acquire(c); r != ReasonLimit {
			t.Errorf("%s at 10 of 10 = %v, want limit", className(c), r)
		}
	}
	for _, tc := range []struct {
		r    Reason
		want string
	}{{ReasonAdmitted, "admitted"}, {ReasonLimit, "limit"}, {ReasonPriority, "priority"}, {Reason(9), "unknown"}} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("Reason(%d).String() = %q, want %q", tc.r, got, tc.want)
		}
	}
	for _, tc := range []struct {
		o    Outcome
		want string
	}{{OutcomeIgnore, "ignore"}, {OutcomeOK, "ok"}, {OutcomeOverloaded, "overloaded"}, {Outcome(9), "unknown"}} {
		if got := tc.o.String(); got != tc.want {
			t.Errorf("Outcome(%d).String() = %q, want %q", tc.o, got, tc.want)
		}
	}
}

func TestClassDefaults(t *testing.T) {
	cfg := DefaultConfig()
	cfg.InitialLimit = 100
	l := newLimiter(t, cfg)
	for _, tc := range []struct {
		c, like Class
	}{
		{Class{}, interactive},
		{Class{Retry: true}, interactiveRetry},
		{Class{Priority: callmeta.Priority(42)}, batch},
		{Class{Priority: callmeta.Priority(42), Retry: true}, batchRetry},
	} {
		if got, want := l.Threshold(tc.c), l.Threshold(tc.like); got != want {
			t.Errorf("Threshold(%+v) = %d, want %d like %s", tc.c, got, want, className(tc.like))
		}
	}
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	l := newLimiter(t, DefaultConfig())
	defer func() {
		if recover() == nil {
			t.Fatal("Release with nothing in flight did not panic")
		}
	}()
	l.Release(Sample{})
}

func TestSetShares(t *testing.T) {
	cfg := DefaultConfig()
	cfg.InitialLimit = 100
	l := newLimiter(t, cfg)
	if err := l.SetShares(0.3, 0.2, 1); err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, c := range classes {
		got = append(got, l.Threshold(c))
	}
	if diff := cmp.Diff([]int{20, 20, 70, 70, 100, 100}, got); diff != "" {
		t.Fatalf("thresholds after SetShares(0.3, 0.2, 1) (-want +got):\n%s", diff)
	}
	err := l.SetShares(0.2, 0.8, 0.9)
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("SetShares(0.2, 0.8, 0.9) = %v, want ErrInvalidConfig", err)
	}
	if l.Threshold(batch) != 20 {
		t.Fatalf("batch threshold after a refused SetShares = %d, want 20 (unchanged)", l.Threshold(batch))
	}
}

// After the limit shrinks, calls admitted under the old one can hold more
// than their new share; critical first attempts still get the reserve the
// others may never take, and only that.
func TestCriticalReserveSurvivesAShrink(t *testing.T) {
	cfg := DefaultConfig()
	cfg.InitialLimit, cfg.Ceiling = 10, 10
	cfg.Clock = newFakeClock()
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	interactive := Class{Priority: callmeta.Interactive}
	for range 8 {
		if r := l.Acquire(interactive); r != ReasonAdmitted {
			t.Fatalf("interactive under limit 10: %v", r)
		}
	}
	l.SetClamp(5) // reserve: 5 − floor(5 × 0.8) = 1
	critical := Class{Priority: callmeta.Critical}
	if r := l.Acquire(critical); r != ReasonAdmitted {
		t.Fatalf("critical first attempt with 8 others in flight over a limit of 5: %v, want admitted from the reserve", r)
	}
	if r := l.Acquire(critical); r == ReasonAdmitted {
		t.Fatalf("a second critical first attempt was admitted beyond the reserve of 1")
	}
	if r := l.Acquire(Class{Priority: callmeta.Critical, Retry: true}); r == ReasonAdmitted {
		t.Fatalf("a critical retry was admitted from the reserve")
	}
	if got := l.InFlight(); got != 9 {
		t.Errorf("in flight %d, want 9", got)
	}
	l.Release(Sample{Critical: true})
	if r := l.Acquire(critical); r != ReasonAdmitted {
		t.Fatalf("critical after its predecessor left: %v, want admitted", r)
	}
}

// An adaptive limit left above a lowered ceiling is no dead band: one window
// of queue wait over the target takes the limit below the ceiling at once,
// and growth under demand never lifts the adaptive limit past the ceiling.
func TestAdaptiveAboveCeilingStillBites(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 50
	l := newLimiter(t, cfg)
	l.SetCeiling(10)
	// Saturated at a low queue wait: demand, yet nothing to learn above
	// the ceiling, and nothing to forget either.
	saturatedWindow(l, clk, okWait(0))
	if got := l.Adaptive(); got != 50 {
		t.Fatalf("adaptive %d after a window of demand under ceiling 10, want 50 kept", got)
	}
	saturatedWindow(l, clk, okWait(2*cfg.TargetQueueWait))
	if got, want := l.Limit(), int(10*cfg.Backoff); got != want {
		t.Fatalf("limit %d after a window at twice the target under ceiling 10, want %d", got, want)
	}
	for range 20 {
		saturatedWindow(l, clk, okWait(0))
	}
	if got := l.Adaptive(); got != 10 {
		t.Fatalf("adaptive %d after growing under demand with ceiling 10, want 10", got)
	}
}

// Demand seen while the adaptive limit stands just above the ceiling (90 %
// of it in flight) neither grows it nor pulls it down to the ceiling.
func TestDemandAboveCeilingKeepsAdaptive(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.InitialLimit = 11
	l := newLimiter(t, cfg)
	l.SetCeiling(10)
	saturatedWindow(l, clk, okWait(0))
	if got := l.Adaptive(); got != 11 {
		t.Fatalf("adaptive %d after a window of demand under ceiling 10, want 11 kept", got)
	}
}

// A window is judged by its least queue wait, as CoDel judges a queue by
// its minimum sojourn: calls that waited long in a window where another
// waited not at all were a burst draining, not a standing queue, and do not
// cut the limit. Every sample high is a standing queue, and does.
func TestWindowJudgedByItsLeastWait(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	l := newLimiter(t, cfg)
	before := l.Adaptive()
	one := func(w time.Duration) {
		if l.Acquire(critical) != ReasonAdmitted {
			t.Fatal("refused with nothing in flight")
		}
		l.Release(okWait(w))
	}
	one(0)
	for range cfg.MinSamples {
		one(10 * cfg.TargetQueueWait)
	}
	clk.Advance(cfg.Window)
	one(10 * cfg.TargetQueueWait) // ends the window
	if got := l.Adaptive(); got != before {
		t.Fatalf("adaptive %d after a window whose least wait was 0, want %d (uncut)", got, before)
	}
	for range cfg.MinSamples {
		one(10 * cfg.TargetQueueWait)
	}
	clk.Advance(cfg.Window)
	one(10 * cfg.TargetQueueWait)
	if got := l.Adaptive(); got >= before {
		t.Fatalf("adaptive %d after a window with every wait at 10× the target, want below %d", got, before)
	}
}
