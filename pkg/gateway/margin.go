package gateway

import (
	"math"
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
	// (an ordinary SDK: 3). The highest levee-attempt seen in the
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
		capacity: g(wellknown.MetricGatewayMarginCapacity, "Verifications per second the serving verifiers can answer: workers ÷ service time (the median of the last 10 s, weighted by each call's expected cost), summed."),
		load:     g(wellknown.MetricGatewayMarginCongestedAt, "Attempts per second the callers would settle at after a trigger (the congested fixed point, or the first attempts when there is none)."),
	}
	reg.MustRegister(m.margin, m.offered, m.capacity, m.load)
	return m
}

// updateMargin recomputes the margin from the last 10 s (tick).
func (g *Gateway) updateMargin(now time.Time, firstPerSecond float64) {
	attempts := max(int(g.maxAttempt.roll(now)), g.cfg.Margin.Attempts)
	g.setMargin(g.verifiers.Capacity(), firstPerSecond, attempts)
}

// setMargin sets the margin gauges for callers offering firstPerSecond
// first attempts to verifiers that answer capacity a second, making up to
// attempts attempts each (within the configured retry budget, if any).
func (g *Gateway) setMargin(capacity, firstPerSecond float64, attempts int) {
	ratio := g.cfg.Margin.RetryRatio
	if ratio < 0 {
		ratio = math.Inf(1)
	}
	f := metastable.Fleet{Capacity: capacity, Sheds: !g.cfg.Unguarded}
	pops := []metastable.Population{{Offered: firstPerSecond, Attempts: attempts, RetryRatio: ratio}}
	g.marginGauges.offered.Set(firstPerSecond)
	g.marginGauges.capacity.Set(f.Capacity)
	g.marginGauges.load.Set(metastable.CongestedLoad(f, pops))
	g.marginGauges.margin.Set(metastable.Margin(f, pops))
}
