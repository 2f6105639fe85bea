package admission

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// population is a closed-loop client population for the shedding
// simulations: clients[i] clients of classes[i] each want one request in
// flight at all times. A refused client tries again the next step; an
// admitted one holds its slot for 1–20 steps, then tries again. Counting
// starts after warmup steps, once the first rush into an empty limiter is
// over.
type population struct {
	l       *Limiter
	rng     *rand.Rand
	clients []int // per class, in the order of classes
	warmup  int

	attempts, admitted [6]int
	// maxAtAdmission is the highest in-flight count seen just before a
	// request of the class was admitted.
	maxAtAdmission [6]int
}

type simClient struct {
	class int
	hold  int // steps left in flight; 0: idle
}

func (p *population) run(steps int) {
	var all []*simClient
	for k, n := range p.clients {
		for range n {
			all = append(all, &simClient{class: k})
		}
	}
	for step := range steps {
		counting := step >= p.warmup
		for _, c := range all {
			if c.hold > 0 {
				if c.hold--; c.hold == 0 {
					p.l.Release(Sample{})
				}
			}
		}
		p.rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		for _, c := range all {
			if c.hold > 0 {
				continue
			}
			before := p.l.InFlight()
			admitted := p.l.Acquire(classes[c.class]) == ReasonAdmitted
			if admitted {
				c.hold = 1 + p.rng.IntN(20)
			}
			if !counting {
				continue
			}
			p.attempts[c.class]++
			if admitted {
				p.admitted[c.class]++
				p.maxAtAdmission[c.class] = max(p.maxAtAdmission[c.class], before)
			}
		}
	}
}

func (p *population) fraction(k int) float64 {
	if p.attempts[k] == 0 {
		return 1
	}
	return float64(p.admitted[k]) / float64(p.attempts[k])
}

func (p *population) String() string {
	s := ""
	for k, c := range classes {
		s += fmt.Sprintf("\n  %-17s clients %4d  attempts %7d  admitted %6d (%5.1f%%)  max in flight at admission %d",
			className(c), p.clients[k], p.attempts[k], p.admitted[k], 100*p.fraction(k), p.maxAtAdmission[k])
	}
	return s
}

// frozenLimiter returns a Limiter whose limit stays at limit: its clock never
// moves, so no window ever ends.
func frozenLimiter(t *testing.T, limit int) *Limiter {
	t.Helper()
	cfg := testConfig(newFakeClock())
	cfg.InitialLimit = limit
	return newLimiter(t, cfg)
}

func TestShedOrderUnderSaturation(t *testing.T) {
	const limit = 100
	for _, tc := range []struct {
		name    string
		clients []int // batch retry, batch, interactive retry, interactive, critical retry, critical
		// criticalFloor: critical first attempts must be admitted at least
		// this often.
		criticalFloor float64
	}{
		// 10× the limit, critical (first and retries) below CriticalReserve.
		{"lower classes saturating", []int{250, 250, 250, 235, 3, 15}, 0.99},
		// Critical retries saturating too: critical first attempts below
		// (1 − RetryShare) of the limit are still admitted.
		{"critical retries saturating", []int{200, 200, 200, 200, 200, 8}, 0.99},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := frozenLimiter(t, limit)
			p := &population{l: l, rng: rand.New(rand.NewPCG(1, 2)), clients: tc.clients, warmup: 100}
			p.run(3000)
			t.Log(p)

			if got := p.fraction(rankCritical); got < tc.criticalFloor {
				t.Errorf("critical first attempts admitted %.2f%%, want ≥ %.0f%%", 100*got, 100*tc.criticalFloor)
			}
			// Shedding order: a class is never admitted more often than the
			// one above it.
			for k := 1; k < numRanks; k++ {
				if p.fraction(k-1) > p.fraction(k) {
					t.Errorf("%s admitted %.2f%%, more than %s (%.2f%%)", className(classes[k-1]),
						100*p.fraction(k-1), className(classes[k]), 100*p.fraction(k))
				}
			}
			if p.fraction(rankBatchRetry) >= p.fraction(rankInteractive) {
				t.Errorf("batch retries admitted as often as interactive first attempts (%.2f%%)", 100*p.fraction(rankInteractive))
			}
			// No class is admitted past its share.
			for k, c := range classes {
				if thr := l.Threshold(c); p.admitted[k] > 0 && p.maxAtAdmission[k] >= thr {
					t.Errorf("%s admitted with %d in flight, at or past its threshold %d", className(c), p.maxAtAdmission[k], thr)
				}
			}
			if l.InFlight() > limit {
				t.Errorf("in flight %d over the limit %d", l.InFlight(), limit)
			}
		})
	}
}

// TestShedOrderAsLoadRises raises the offered concurrency, split evenly
// across the six classes, from a third of the limit to ten times it, and
// checks that the classes start being shed in order.
func TestShedOrderAsLoadRises(t *testing.T) {
	const limit = 100
	levels := []float64{0.3, 0.42, 0.48, 0.6, 0.75, 0.84, 0.96, 1.2, 1.5, 2, 3, 5, 10}
	onset := [numRanks]float64{}
	for k := range onset {
		onset[k] = math.Inf(1)
	}
	for _, m := range levels {
		per := int(math.Round(m * limit / numRanks))
		clients := []int{per, per, per, per, per, per}
		p := &population{l: frozenLimiter(t, limit), rng: rand.New(rand.NewPCG(3, 4)), clients: clients, warmup: 100}
		p.run(1000)
		for k := range numRanks {
			if p.fraction(k) < 0.99 && math.IsInf(onset[k], 1) {
				onset[k] = m
			}
		}
		// At every level, shed fractions fall along the order.
		for k := 1; k < numRanks; k++ {
			if p.fraction(k-1) > p.fraction(k)+0.001 {
				t.Errorf("offered %.2f× the limit: %s admitted %.2f%%, more than %s (%.2f%%)%s", m,
					className(classes[k-1]), 100*p.fraction(k-1), className(classes[k]), 100*p.fraction(k), p)
			}
		}
	}
	t.Logf("offered concurrency (× limit) at which each class starts being shed: %v", onset)
	for k := 1; k < numRanks; k++ {
		if onset[k-1] > onset[k] {
			t.Errorf("%s is shed from %.2f× the limit, after %s (from %.2f×)",
				className(classes[k-1]), onset[k-1], className(classes[k]), onset[k])
		}
	}
	if !(onset[rankBatchRetry] < onset[rankBatch] && onset[rankBatch] < onset[rankInteractive] &&
		onset[rankInteractive] < onset[rankCritical]) {
		t.Errorf("onsets %v: want batch retries strictly before batch, batch before interactive, interactive before critical", onset)
	}
	if onset[rankCritical] <= 1 {
		t.Errorf("critical first attempts shed at %.2f× the limit, want only above 1×", onset[rankCritical])
	}
}

// backend is a fleet of W workers with service time S: at N requests in
// flight it completes min(N, W)/S requests per unit of time, and a request
// waits max(0, N − W)/W × S in its queue.
type backend struct {
	workers int
	service time.Duration
	owed    float64 // completions due but not yet whole
}

func (b *backend) queueWait(inflight int) time.Duration {
	if inflight <= b.workers {
		return 0
	}
	return time.Duration(float64(inflight-b.workers) / float64(b.workers) * float64(b.service))
}

// step runs the backend for dt against l, which demand keeps full: it
// releases the requests that completed, with their queue wait, then admits
// until the limit is reached again.
func (b *backend) step(l *Limiter, dt time.Duration) {
	n := l.InFlight()
	b.owed += float64(min(n, b.workers)) * float64(dt) / float64(b.service)
	wait := b.queueWait(n)
	for ; b.owed >= 1 && l.InFlight() > 0; b.owed-- {
		l.Release(okWait(wait))
	}
	for l.Acquire(critical) == ReasonAdmitted {
	}
}

func TestConvergence(t *testing.T) {
	const (
		dt      = 10 * time.Millisecond
		windows = 200
		settled = 100 // the last windows, on which the limit is judged
	)
	for _, tc := range []struct {
		workers int
		service time.Duration
	}{
		{32, 100 * time.Millisecond},
		{8, 20 * time.Millisecond},
		{200, 50 * time.Millisecond},
		{64, 400 * time.Millisecond},
	} {
		cfg := DefaultConfig()
		want := float64(tc.workers) * (1 + float64(cfg.TargetQueueWait)/float64(tc.service))
		for _, start := range []int{cfg.MinLimit, int(math.Min(4*want, float64(cfg.Ceiling)))} {
			t.Run(fmt.Sprintf("W=%d,S=%v,from %d", tc.workers, tc.service, start), func(t *testing.T) {
				clk := newFakeClock()
				cfg.Clock = clk
				cfg.InitialLimit = start
				l := newLimiter(t, cfg)
				b := &backend{workers: tc.workers, service: tc.service}

				var history []int
				for range windows {
					for range int(cfg.Window / dt) {
						b.step(l, dt)
						clk.Advance(dt)
					}
					history = append(history, l.Adaptive())
				}
				tail := history[len(history)-settled:]
				lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
				for _, v := range tail {
					lo, hi, sum = math.Min(lo, float64(v)), math.Max(hi, float64(v)), sum+float64(v)
				}
				mean := sum / float64(len(tail))
				t.Logf("W×(1+T/S) = %.1f; last %d windows: mean %.1f, range [%.0f, %.0f]; first windows %v",
					want, settled, mean, lo, hi, history[:20])
				// Tolerances: the time average within 10% of W×(1+T/S),
				// and every settled window within 20% of it.
				if math.Abs(mean-want) > 0.1*want {
					t.Errorf("settled mean %.1f, want within 10%% of %.1f", mean, want)
				}
				if lo < 0.8*want || hi > 1.2*want {
					t.Errorf("settled range [%.0f, %.0f], want within 20%% of %.1f", lo, hi, want)
				}
			})
		}
	}
}
