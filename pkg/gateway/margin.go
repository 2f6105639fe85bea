package gateway

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/pkg/metastable"
	"github.com/leveehq/levee/pkg/wellknown"
)

// MarginConfig says what the bistability margin assumes of the callers, for
// what the gateway cannot see of them: how they retry once every attempt
// fails.
type MarginConfig struct {
	// Attempts is how many attempts a caller makes when every one fails
	// (the seed's ordinary SDK: 3). The highest levee-attempt seen in the
	// last 10 s raises it; callers that send no attempt header are
	// invisible as retriers and are covered only by this.
	Attempts int
	// RetryRatio caps the callers' retries per first attempt when they
	// spend a fleet retry budget; negative means they have none.
	RetryRatio float64
}

// Validate reports the first invalid field.
func (m MarginConfig) Validate() error {
	if m.Attempts < 1 || m.Attempts > 100 || math.IsNaN(m.RetryRatio) || m.RetryRatio > 10 {
		return errInvalidMargin
	}
	return nil
}

// serviceSamples is the number of recent service times a backend keeps for
// the capacity estimate.
const serviceSamples = 16

// serviceTimes keeps a verifier's recent service times; its median is
// robust to the odd hash that spanned a pause.
type serviceTimes struct {
	mu   sync.Mutex
	ring [serviceSamples]time.Duration
	n    int
	med  atomic.Int64 // the samples' median, recomputed by observe; 0 with none
}

// observe adds a sample and recomputes the median, once per sample, so
// that the readers (each verifier's queue size, the limiter's target, the
// margin) read it for nothing.
func (s *serviceTimes) observe(d time.Duration) {
	s.mu.Lock()
	s.ring[s.n%serviceSamples] = d
	s.n++
	var xs [serviceSamples]time.Duration
	k := min(s.n, serviceSamples)
	copy(xs[:], s.ring[:k])
	slices.Sort(xs[:k])
	s.med.Store(int64(xs[k/2]))
	s.mu.Unlock()
}

// median is the median of the samples, 0 with none.
func (s *serviceTimes) median() time.Duration { return time.Duration(s.med.Load()) }

// maxWindow is the highest value added over the last len(ring) rolls.
type maxWindow struct {
	cur  atomic.Int64
	mu   sync.Mutex
	ring [10]int64
	n    int
}

func (w *maxWindow) add(v int64) {
	for {
		c := w.cur.Load()
		if v <= c || w.cur.CompareAndSwap(c, v) {
			return
		}
	}
}

// peek is the highest value added over the last len(ring) rolls and since
// the last one, without rolling.
func (w *maxWindow) peek() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return max(w.cur.Load(), slices.Max(w.ring[:]))
}

// reset forgets every value added.
func (w *maxWindow) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cur.Store(0)
	clear(w.ring[:])
}

func (w *maxWindow) roll() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ring[w.n%len(w.ring)] = w.cur.Swap(0)
	w.n++
	return slices.Max(w.ring[:])
}

// capacity is what the serving verifiers can answer per second: each one's
// workers over the median of its recent service times. Zero while no
// serving verifier has answered yet.
func (bs *backends) capacity() float64 {
	c := 0.0
	for _, b := range bs.list() {
		if !b.eligible() {
			continue
		}
		if s := b.service.median(); s > 0 {
			c += float64(max(b.workers.Load(), 1)) / s.Seconds()
		}
	}
	return c
}

// marginGauges export the bistability margin and what it is computed from.
type marginGauges struct {
	margin, offered, capacity, load prometheus.Gauge
}

func newMarginGauges(reg prometheus.Registerer) marginGauges {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := marginGauges{
		margin: g(wellknown.MetricGatewayMargin,
			"1 − (load the callers would offer after a trigger that failed every attempt) ÷ capacity: above 0 the fleet returns by itself, at or below 0 its callers' retries can hold it congested (package metastable). NaN while the capacity is unknown."),
		offered:  g(wellknown.MetricGatewayMarginOffered, "First attempts per second over the last 10 s, as the margin counts them."),
		capacity: g(wellknown.MetricGatewayMarginCapacity, "Verifications per second the serving verifiers can answer: workers ÷ median service time, summed."),
		load:     g(wellknown.MetricGatewayMarginCongestedAt, "Attempts per second the callers would settle at after a trigger (the congested fixed point, or the first attempts when there is none)."),
	}
	reg.MustRegister(m.margin, m.offered, m.capacity, m.load)
	return m
}

// updateMargin recomputes the margin from the last 10 s (housekeeping).
func (g *Gateway) updateMargin(firstPerSecond float64) {
	attempts := max(int(g.maxAttempt.roll()), g.cfg.Margin.Attempts)
	ratio := g.cfg.Margin.RetryRatio
	if ratio < 0 {
		ratio = math.Inf(1)
	}
	f := metastable.Fleet{Capacity: g.backends.capacity(), Sheds: !g.cfg.Unguarded}
	pops := []metastable.Population{{Offered: firstPerSecond, Attempts: attempts, RetryRatio: ratio}}
	g.marginGauges.offered.Set(firstPerSecond)
	g.marginGauges.capacity.Set(f.Capacity)
	g.marginGauges.load.Set(metastable.CongestedLoad(f, pops))
	g.marginGauges.margin.Set(metastable.Margin(f, pops))
}
