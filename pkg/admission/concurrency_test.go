package admission

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hammer runs goroutines × iterations Acquire/Release pairs of random
// classes on l and returns the most requests it ever had in flight at once,
// counted on its own. between, if set, runs on each goroutine every 64
// iterations.
func hammer(t *testing.T, l *Limiter, goroutines, iterations int, sample func(*rand.Rand) Sample, between func(*rand.Rand)) int64 {
	t.Helper()
	var inflight, peak, overLimit atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range iterations {
				if between != nil && i%64 == 0 {
					between(rng)
				}
				if l.Acquire(classes[rng.IntN(len(classes))]) != ReasonAdmitted {
					continue
				}
				n := inflight.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if n > int64(l.Limit()) && between == nil {
					overLimit.Add(1)
				}
				runtime.Gosched() // hold the slot while others try
				inflight.Add(-1)
				l.Release(sample(rng))
			}
		})
	}
	wg.Wait()
	if n := overLimit.Load(); n > 0 {
		t.Errorf("%d admissions found more requests in flight than the limit", n)
	}
	if got := l.InFlight(); got != 0 {
		t.Errorf("InFlight() = %d after every request was released, want 0", got)
	}
	return peak.Load()
}

func TestConcurrentFixedLimit(t *testing.T) {
	const limit = 16
	l := frozenLimiter(t, limit)
	peak := hammer(t, l, 64, 20000, func(*rand.Rand) Sample { return ok0 }, nil)
	t.Logf("peak in flight %d of a limit of %d", peak, limit)
	if peak > limit {
		t.Fatalf("peak in flight %d, over the limit %d", peak, limit)
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
	peak := hammer(t, l, 64, 20000, sample, between)
	s := l.Snapshot()
	t.Logf("peak in flight %d; final %+v", peak, s)
	if peak > 32 {
		t.Fatalf("peak in flight %d, over the highest ceiling ever set, 32", peak)
	}
	if s.Adaptive < min(cfg.MinLimit, s.Ceiling) || s.Adaptive > s.Ceiling {
		t.Fatalf("adaptive %d outside [MinLimit %d, Ceiling %d]", s.Adaptive, cfg.MinLimit, s.Ceiling)
	}
}
