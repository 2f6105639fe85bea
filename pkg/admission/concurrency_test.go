package admission

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leveehq/levee/internal/testlock"
)

func TestMain(m *testing.M) {
	// The concurrency and simulation tests keep every core busy and measure
	// no time (the limiter's clock is a fake): they run alone, not beside a
	// package whose tests do (see testlock).
	testlock.Exclusive()
	goleak.VerifyTestMain(m)
}

// hammer runs goroutines × iterations Acquire/Release pairs of classes drawn
// from mix on l, releasing critical first attempts as such, and returns the
// most requests it ever had in flight at once (all; all but critical first
// attempts), counted on its own. Only critical first attempts may be admitted
// over the limit (from the reserve), and the others only below their
// threshold: with a fixed limit (between nil) it checks at each admission
// that the others in flight are within the highest of their thresholds, a
// critical retry's. between, if set, runs on each goroutine every 64
// iterations.
func hammer(t *testing.T, l *Limiter, mix []Class, goroutines, iterations int, sample func(*rand.Rand) Sample, between func(*rand.Rand)) (peak, peakOthers int64) {
	t.Helper()
	var inflight, others, peakAll, peakOth, overLimit atomic.Int64
	raise := func(p *atomic.Int64, n int64) {
		for v := p.Load(); n > v && !p.CompareAndSwap(v, n); v = p.Load() {
		}
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range iterations {
				if between != nil && i%64 == 0 {
					between(rng)
				}
				c := mix[rng.IntN(len(mix))]
				if l.Acquire(c) != ReasonAdmitted {
					continue
				}
				isCritical := c == critical
				raise(&peakAll, inflight.Add(1))
				if !isCritical {
					n := others.Add(1)
					raise(&peakOth, n)
					if between == nil && n > int64(l.Threshold(criticalRetry)) {
						overLimit.Add(1)
					}
				}
				runtime.Gosched() // hold the slot while others try
				inflight.Add(-1)
				if !isCritical {
					others.Add(-1)
				}
				s := sample(rng)
				s.Critical = isCritical
				l.Release(s)
			}
		})
	}
	wg.Wait()
	if n := overLimit.Load(); n > 0 {
		t.Errorf("%d admissions found more requests other than critical first attempts in flight than a critical retry's threshold", n)
	}
	if got := l.InFlight(); got != 0 {
		t.Errorf("InFlight() = %d after every request was released, want 0", got)
	}
	if got := l.critical.Load(); got != 0 {
		t.Errorf("%d critical first attempts counted in flight after every request was released, want 0", got)
	}
	return peakAll.Load(), peakOth.Load()
}

func TestConcurrentFixedLimit(t *testing.T) {
	const limit = 16
	l := frozenLimiter(t, limit)
	reserve := limit - l.Threshold(interactive) // 4
	okSample := func(*rand.Rand) Sample { return ok0 }
	// Without critical first attempts nothing goes over a critical retry's
	// threshold, so a lost update of the in-flight count shows.
	if _, others := hammer(t, l, classes[:len(classes)-1], 64, 20000, okSample, nil); others < int64(l.Threshold(criticalRetry)) {
		t.Errorf("peak in flight without critical first attempts %d: the test did not press a critical retry's threshold, %d", others, l.Threshold(criticalRetry))
	}
	peak, others := hammer(t, l, classes, 64, 20000, okSample, nil)
	t.Logf("peak in flight %d (%d other than critical first attempts) of a limit of %d and a reserve of %d", peak, others, limit, reserve)
	if peak > int64(limit+reserve) {
		t.Fatalf("peak in flight %d, over the limit %d plus the critical reserve %d", peak, limit, reserve)
	}
	if others > limit {
		t.Fatalf("peak in flight other than critical first attempts %d, over the limit %d", others, limit)
	}
	if peak < limit/2 {
		t.Fatalf("peak in flight %d: the test did not press the limit of %d", peak, limit)
	}
}

func TestConcurrentAdapting(t *testing.T) {
	clk := newFakeClock()
	cfg := testConfig(clk)
	cfg.Ceiling = 32
	cfg.InitialLimit = 32
	cfg.Window = time.Millisecond
	l := newLimiter(t, cfg)
	sample := func(rng *rand.Rand) Sample {
		switch rng.IntN(500) {
		case 0:
			return overloaded
		case 1:
			return Sample{}
		}
		return okWait(time.Duration(rng.IntN(100)) * time.Millisecond)
	}
	between := func(rng *rand.Rand) {
		clk.Advance(100 * time.Microsecond)
		switch rng.IntN(40) {
		case 0:
			l.SetClamp(rng.IntN(40))
		case 1:
			l.SetEmergency(rng.IntN(40))
		case 2:
			l.SetCeiling(16 + rng.IntN(17))
		case 3:
			if err := l.SetShares(0.1+0.2*rng.Float64(), 0.3, 0.95); err != nil {
				t.Error(err)
			}
		case 4:
			s := l.Snapshot()
			// The adaptive limit may stand above a lowered ceiling; the
			// limit never above either.
			if s.Adaptive < 1 || s.Limit > min(s.Adaptive, s.Ceiling) {
				t.Errorf("inconsistent snapshot %+v", s)
			}
		}
	}
	peak, others := hammer(t, l, classes, 64, 20000, sample, between)
	s := l.Snapshot()
	t.Logf("peak in flight %d (%d other than critical first attempts); final %+v", peak, others, s)
	// Only critical first attempts go over the limit, from the reserve: at
	// most 32 − floor(32 × 0.7) = 10 of them, at the largest reserve set.
	if others > 32 {
		t.Fatalf("peak in flight other than critical first attempts %d, over the highest ceiling ever set, 32", others)
	}
	if peak > 32+10 {
		t.Fatalf("peak in flight %d, over the highest ceiling ever set, 32, plus the largest reserve, 10", peak)
	}
	if s.Adaptive < min(cfg.MinLimit, s.Ceiling) || s.Adaptive > s.Ceiling {
		t.Fatalf("adaptive %d outside [MinLimit %d, Ceiling %d]", s.Adaptive, cfg.MinLimit, s.Ceiling)
	}
}
