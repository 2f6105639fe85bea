package verify

import (
	"testing"
	"time"
)

// fakeClock is a manual clock for the cost model.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func argonCost(m, t uint32, p uint8) *Hash {
	return &Hash{Algorithm: Argon2id, Params: Params{Memory: m, Iterations: t, Parallelism: p}}
}

func near(a, b time.Duration) bool {
	d := a - b
	return d >= -time.Microsecond && d <= time.Microsecond
}

// Calibration sets the base from a hash run alone; the estimate scales with
// m × t and divides by the lanes a worker's cores run at once.
func TestCostModelCalibratedScaling(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	m := NewCostModel(1, clk.now)
	policy := argonCost(1024, 8, 1)
	m.Calibrate(policy, 8*time.Millisecond, 2)
	if got := m.Estimate(policy); !near(got, 8*time.Millisecond) {
		t.Errorf("policy estimate %v after calibrating at 8ms", got)
	}
	if got := m.Estimate(argonCost(2048, 8, 1)); !near(got, 16*time.Millisecond) {
		t.Errorf("twice the memory: %v, want 16ms", got)
	}
	// p = 4 on one core per worker: the lanes take turns, same time.
	if got := m.Estimate(argonCost(1024, 8, 4)); !near(got, 8*time.Millisecond) {
		t.Errorf("p=4 with one core per worker: %v, want 8ms", got)
	}
	wide := NewCostModel(4, clk.now)
	wide.Calibrate(policy, 8*time.Millisecond, 4)
	if got := wide.Estimate(argonCost(1024, 8, 4)); !near(got, 2*time.Millisecond) {
		t.Errorf("p=4 with four cores per worker: %v, want 2ms", got)
	}
	// A p=2 policy calibrated alone on 2 cores ran its lanes at once: on a
	// worker with one core it takes twice as long.
	m2 := NewCostModel(1, clk.now)
	m2.Calibrate(argonCost(1024, 8, 2), 4*time.Millisecond, 2)
	if got := m2.Estimate(argonCost(1024, 8, 2)); !near(got, 8*time.Millisecond) {
		t.Errorf("p=2 calibrated on 2 cores, estimated for 1: %v, want 8ms", got)
	}
	// Calibrating Argon2 rescales the other families by the same factor.
	bc := &Hash{Algorithm: Bcrypt, Cost: 10}
	factor := (8e-3 / (1024 * 8)) / priors[familyArgon2]
	want := time.Duration(priors[familyBcrypt] * factor * 1024 * float64(time.Second))
	if got := m.Estimate(bc); !near(got, want) {
		t.Errorf("bcrypt after calibrating Argon2: %v, want %v", got, want)
	}
}

// The stretch is a median, so a few outliers (hashes that spanned a stall)
// move nothing; it is bounded, so a run of slow hashes lifts the estimate
// by at most MaxStretch; and it needs MinStretchSamples.
func TestCostStretchRobustAndBounded(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	m := NewCostModel(1, clk.now)
	h := argonCost(1024, 8, 1)
	m.Calibrate(h, 10*time.Millisecond, 1)

	m.Observe(h, 10*time.Second)
	m.Observe(h, 10*time.Second)
	if got := m.Estimate(h); !near(got, 10*time.Millisecond) {
		t.Errorf("two samples (fewer than %d) moved the estimate to %v", MinStretchSamples, got)
	}
	for range 5 {
		m.Observe(h, 12*time.Millisecond)
	}
	// Seven samples: two of 10 s, five of 12 ms: the median is 12 ms.
	if got := m.Estimate(h); !near(got, 12*time.Millisecond) {
		t.Errorf("median of 5 × 12ms and 2 outliers: %v, want 12ms", got)
	}
	for range StretchSamples {
		m.Observe(h, time.Minute)
	}
	if got, want := m.Estimate(h), time.Duration(MaxStretch*float64(10*time.Millisecond)); !near(got, want) {
		t.Errorf("every sample a minute: %v, want the bound %v", got, want)
	}
	for range StretchSamples {
		m.Observe(h, time.Microsecond)
	}
	if got, want := m.Estimate(h), time.Duration(MinStretch*float64(10*time.Millisecond)); !near(got, want) {
		t.Errorf("every sample a microsecond: %v, want the bound %v", got, want)
	}
}

// No absorbing state: with no new samples, whatever the stretch was, the
// estimate is the calibrated one again once the samples are older than
// StretchWindow. Nothing has to be admitted for it to come back.
func TestCostReturnsToCalibratedWithoutSamples(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	m := NewCostModel(1, clk.now)
	h := argonCost(1024, 8, 1)
	m.Calibrate(h, 10*time.Millisecond, 1)
	for range StretchSamples {
		m.Observe(h, time.Second)
	}
	if got := m.Stretch(h); got != MaxStretch {
		t.Fatalf("stretch %v after slow samples, want %v", got, MaxStretch)
	}
	clk.advance(StretchWindow / 2)
	if got := m.Stretch(h); got != MaxStretch {
		t.Errorf("stretch %v half a window later, want still %v", got, MaxStretch)
	}
	clk.advance(StretchWindow/2 + time.Millisecond)
	if got := m.Estimate(h); !near(got, 10*time.Millisecond) {
		t.Errorf("estimate %v a window after the last sample, want the calibrated 10ms", got)
	}
	// Families learn apart: bcrypt's samples leave Argon2 alone.
	bc := &Hash{Algorithm: Bcrypt, Cost: 4}
	for range StretchSamples {
		m.Observe(bc, time.Second)
	}
	if got := m.Stretch(h); got != 1 {
		t.Errorf("Argon2 stretch %v after slow bcrypt samples, want 1", got)
	}
}

// What one caller sends cannot move the estimate of another shape's hashes:
// a run counts by its predicted work, a lighter run never displaces a
// heavier fresh one, and Argon2 hashes of another p learn apart. Each rule
// is checked with the others standing.
func TestCostStretchNotSteeredByCheapOrWideHashes(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	m := NewCostModel(1, clk.now)
	policy := argonCost(16<<10, 3, 1)
	m.Calibrate(policy, 100*time.Millisecond, 1)
	tiny := argonCost(8, 1, 1)
	wide := argonCost(16<<10, 3, 16)
	tinyPredicted := m.Baseline(tiny)

	// Only tiny hashes, each 50× slower than predicted (their fixed
	// overhead): they learn their own stretch, and the policy's is 1, since
	// their work adds up to nothing like three policy hashes.
	for range 1000 {
		m.Observe(tiny, 50*tinyPredicted)
		clk.advance(time.Millisecond)
	}
	if got := m.Stretch(tiny); got != MaxStretch {
		t.Errorf("tiny hashes' own stretch %v, want %v", got, MaxStretch)
	}
	if got := m.Stretch(policy); got != 1 {
		t.Errorf("policy stretch %v after only tiny hashes, want 1", got)
	}

	// Honest runs at 1.2× beside a flood of tiny ones: the honest ones
	// rule, and a tiny run never displaces one.
	for range StretchSamples {
		m.Observe(policy, 120*time.Millisecond)
		for range 40 {
			m.Observe(tiny, 50*tinyPredicted)
		}
		clk.advance(10 * time.Millisecond)
	}
	if got := m.Stretch(policy); got < 1.19 || got > 1.21 {
		t.Errorf("policy stretch %v beside a flood of tiny hashes, want 1.2", got)
	}

	// Wide hashes of the policy's work, run at 0.56× predicted, learn apart.
	for range 4 * StretchSamples {
		m.Observe(wide, 56*time.Millisecond)
	}
	if got := m.Stretch(policy); got < 1.19 || got > 1.21 {
		t.Errorf("policy stretch %v after wide hashes, want 1.2", got)
	}
	if got := m.Stretch(wide); got < 0.55 || got > 0.57 {
		t.Errorf("wide hashes' own stretch %v, want 0.56", got)
	}

	// The way back: the honest samples expire and the tiny ones, fresh or
	// not, never amount to a policy hash's evidence.
	clk.advance(StretchWindow + time.Millisecond)
	for range 100 {
		m.Observe(tiny, 50*tinyPredicted)
	}
	if got := m.Stretch(policy); got != 1 {
		t.Errorf("policy stretch %v a window after the last honest run, want 1", got)
	}
	if got := m.Stretch(tiny); got != MaxStretch {
		t.Errorf("tiny hashes' stretch %v once they displaced the stale runs, want %v", got, MaxStretch)
	}
	// And fresh honest runs displace stale ones whatever they weigh.
	for range MinStretchSamples {
		m.Observe(policy, 200*time.Millisecond)
	}
	if got := m.Stretch(policy); got < 1.99 || got > 2.01 {
		t.Errorf("policy stretch %v after three honest runs at 2×, want 2", got)
	}
}

// The median is weighted by predicted work: one heavy run outweighs many
// light ones of the same shape, which still count for their own size.
func TestCostStretchWeightedByWork(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	m := NewCostModel(1, clk.now)
	heavy, light := argonCost(8<<10, 4, 1), argonCost(1<<10, 1, 1)
	m.Calibrate(heavy, 32*time.Millisecond, 1) // 1 ms per MiB-pass
	for range 3 {
		m.Observe(heavy, 64*time.Millisecond) // 2×, weight 32 ms each
	}
	for range 10 {
		m.Observe(light, 1*time.Millisecond) // 1×, weight 1 ms each
	}
	if got := m.Stretch(heavy); got != 2 {
		t.Errorf("stretch %v: three heavy runs at 2× against ten light ones at 1×, want 2", got)
	}
	if got := m.Stretch(light); got != 2 {
		t.Errorf("the light hash's stretch %v, want the same weighted median, 2", got)
	}
}
