package gateway

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// inflightCall is one admitted call, known to the autopilot so that it can
// cut calls whose callers have given up.
type inflightCall struct {
	arrived time.Time

	mu     sync.Mutex
	cancel context.CancelFunc
	cut    bool
}

// bind derives the hop's context: cancellable by the autopilot, and while
// the autopilot is engaged, ending ClientTimeout after the call arrived.
func (c *inflightCall) bind(ctx context.Context, a *autopilot) context.Context {
	var cancel context.CancelFunc
	if a.engaged.Load() {
		ctx, cancel = context.WithDeadline(ctx, c.arrived.Add(a.clientTimeout()))
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	c.mu.Lock()
	c.cancel = cancel
	cut := c.cut
	c.mu.Unlock()
	if cut {
		cancel()
	}
	return ctx
}

func (c *inflightCall) cutOff() {
	c.mu.Lock()
	c.cut = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

func (c *inflightCall) abandoned() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

// callSet holds the admitted calls in flight.
type callSet struct {
	mu    sync.Mutex
	calls map[*inflightCall]struct{}
}

func newCallSet() *callSet { return &callSet{calls: map[*inflightCall]struct{}{}} }

func (s *callSet) add(arrived time.Time) *inflightCall {
	c := &inflightCall{arrived: arrived}
	s.mu.Lock()
	s.calls[c] = struct{}{}
	s.mu.Unlock()
	return c
}

func (s *callSet) remove(c *inflightCall) {
	s.mu.Lock()
	delete(s.calls, c)
	s.mu.Unlock()
}

// flush cuts every call that arrived before cutoff and returns how many.
func (s *callSet) flush(cutoff time.Time) int {
	var old []*inflightCall
	s.mu.Lock()
	for c := range s.calls {
		if c.arrived.Before(cutoff) {
			old = append(old, c)
		}
	}
	s.mu.Unlock()
	for _, c := range old {
		c.cutOff()
	}
	return len(old)
}

// autopilot acts, once a Tick, as an operator would on the metastable
// signature: the work the fleet does is wasted. Its contract:
//
//   - The signature: of the calls forwarded that a verifier worked on
//     (answered, or still being worked on when the caller's deadline
//     passed), fewer than GoodputBelow were answered within the client
//     timeout of their arrival, while throughput over two ticks stays at
//     least half its recent peak and the mean queue wait the tick's
//     answers reported is above RampQueueWait. Refusals count neither way:
//     a fleet that refuses what it cannot finish in time is overloaded, the
//     limiter's business, not metastable. Nor does a call its caller
//     cancelled: leaving is the caller's choice, not the fleet's waste.
//   - Evidence is a tick in which some verifier answered a call it hashed.
//     A tick without one (a stall: every verifier frozen, paused or cut
//     off) is no evidence either way, and more than EngageAfter of them in
//     a row forget the signature seen before.
//   - It engages after EngageAfter ticks of the signature: it cuts calls
//     older than the client timeout, shortens forwarded deadlines to what a
//     caller still waits for, and clamps admission to ClampFraction of the
//     measured capacity. Each tick after that tightens the clamp (×0.8: the
//     signature again, or queue wait past the client timeout) or ramps it
//     (×RampFactor while queue wait stays below RampQueueWait, ×√RampFactor
//     in between).
//   - It stands down once the clamp has not bound for StandDownAfter ticks,
//     or has ramped to the limiter's ceiling. No tick leaves it as it was,
//     and a tick without traffic does not bind the clamp: what ends the
//     clamp needs no traffic the clamp refuses.
//   - Each tick, engaged or not, it ejects every verifier that refuses
//     everything while another serves (upstream.Set.EjectRefusing), which
//     the outlier ejector, judging against the peers' median, cannot do
//     where half the fleet or more refuses.
//
// docs/gateway.md ("The recovery autopilot") has the runs behind each rule.
type autopilot struct {
	g   *Gateway
	cfg AutopilotConfig

	enabled atomic.Bool
	timeout atomic.Int64 // ClientTimeout, ns
	engaged atomic.Bool

	// Fed by the request path, read and reset each tick.
	answers    atomic.Int64 // calls a verifier worked on: answered, or the caller's deadline passed meanwhile
	fast       atomic.Int64 // of them, answered within the client timeout of arrival
	waitSum    atomic.Int64 // reported queue wait, µs
	serviceSum atomic.Int64 // reported service time, µs
	reports    atomic.Int64
	peak       atomic.Int64 // most calls in flight seen

	// Loop state, owned by run.
	bad, calm      int
	quiet          int // ticks in a row without evidence, before engaging
	clamp          float64
	lastThroughput float64 // the previous tick's
	rate           float64 // throughput over the last two ticks
	peakThroughput float64 // of rate, decaying 1 % a tick
}

func newAutopilot(g *Gateway, cfg AutopilotConfig) *autopilot {
	a := &autopilot{g: g, cfg: cfg}
	a.enabled.Store(cfg.Enabled)
	a.timeout.Store(int64(cfg.ClientTimeout))
	return a
}

func (a *autopilot) clientTimeout() time.Duration { return time.Duration(a.timeout.Load()) }

func (a *autopilot) sawInflight(n int) {
	for {
		p := a.peak.Load()
		if int64(n) <= p || a.peak.CompareAndSwap(p, int64(n)) {
			return
		}
	}
}

// sawWork counts a call a verifier worked on, took after its arrival:
// answered, or not (the caller's deadline passed, or the autopilot cut it,
// while it was forwarded). Refusals and calls their callers cancelled are
// not counted.
func (a *autopilot) sawWork(took time.Duration, answered bool) {
	a.answers.Add(1)
	if answered && took <= a.clientTimeout() {
		a.fast.Add(1)
	}
}

func (a *autopilot) sawQueue(wait, service time.Duration) {
	a.waitSum.Add(wait.Microseconds())
	if service > 0 {
		a.serviceSum.Add(service.Microseconds())
	}
	a.reports.Add(1)
}

// signals are one tick's readings.
type signals struct {
	throughput float64       // calls worked on per second
	goodput    float64       // fraction answered within the client timeout
	queueWait  time.Duration // mean reported queue wait
	waitKnown  bool          // some answer reported its queue wait
	busy       float64       // calls being hashed on average (Little's law)
	peak       int           // most calls in flight
	answers    int64         // calls worked on
}

func (a *autopilot) read(tick time.Duration) signals {
	answers, fast := a.answers.Swap(0), a.fast.Swap(0)
	waitSum, serviceSum, reports := a.waitSum.Swap(0), a.serviceSum.Swap(0), a.reports.Swap(0)
	s := signals{answers: answers, peak: int(a.peak.Swap(int64(a.g.limiter.InFlight())))}
	s.throughput = float64(answers) / tick.Seconds()
	if answers > 0 {
		s.goodput = float64(fast) / float64(answers)
	}
	if reports > 0 {
		s.waitKnown = true
		s.queueWait = time.Duration(waitSum/reports) * time.Microsecond
		meanService := time.Duration(serviceSum/reports) * time.Microsecond
		s.busy = s.throughput * meanService.Seconds()
	}
	return s
}

func (a *autopilot) run(ctx context.Context) {
	t := time.NewTicker(a.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.tick(a.read(a.cfg.Tick))
		}
	}
}

// congested reports whether s shows the metastable signature (see
// autopilot). A tick in which no answer reported a queue wait (it reads
// zero) does not: the fleet answered no hashed call, so it is stalled, not
// busy.
func (a *autopilot) congested(s signals) bool {
	return s.answers > 0 &&
		s.goodput < a.cfg.GoodputBelow &&
		a.rate >= 0.5*a.peakThroughput &&
		s.queueWait > a.cfg.RampQueueWait
}

func (a *autopilot) tick(s signals) {
	// Throughput over two ticks: slow hashes answer in waves, and one
	// tick's count of a few calls is too noisy to compare with a peak.
	a.rate = (s.throughput + a.lastThroughput) / 2
	a.lastThroughput = s.throughput
	a.peakThroughput = max(a.rate, a.peakThroughput*0.99)
	log := a.g.log
	a.ejectRefusing(a.g.clock.Now())
	if !a.enabled.Load() {
		if a.engaged.Load() {
			a.standDown("autopilot disabled")
		}
		a.bad = 0
		return
	}
	if !a.engaged.Load() {
		if !s.waitKnown {
			// No verifier answered a hashed call: no evidence either way
			// (see autopilot), unless it lasts.
			if a.quiet++; a.quiet > a.cfg.EngageAfter {
				a.bad = 0
			}
			return
		}
		a.quiet = 0
		if !a.congested(s) {
			a.bad = 0
			return
		}
		a.bad++
		if a.bad < a.cfg.EngageAfter {
			return
		}
		a.bad, a.calm = 0, 0
		capacity := max(s.busy, 1)
		a.clamp = max(1, a.cfg.ClampFraction*capacity)
		a.engaged.Store(true)
		a.g.limiter.SetEmergency(int(math.Ceil(a.clamp)))
		flushed := a.g.calls.flush(time.Now().Add(-a.clientTimeout()))
		a.g.metrics.autoEngaged.Set(1)
		a.g.metrics.autoActions.WithLabelValues("engage").Inc()
		a.g.metrics.autoFlushed.Add(float64(flushed))
		log.Warn("autopilot engaged: metastable signature",
			"queue_wait", s.queueWait.Round(time.Millisecond), "client_timeout", a.clientTimeout(),
			"throughput", math.Round(s.throughput), "goodput", math.Round(s.goodput*100)/100,
			"capacity_inflight", math.Round(capacity*10)/10, "clamp", int(math.Ceil(a.clamp)), "flushed", flushed)
		return
	}

	flushed := a.g.calls.flush(time.Now().Add(-a.clientTimeout()))
	a.g.metrics.autoFlushed.Add(float64(flushed))
	switch {
	case a.congested(s) || s.queueWait > a.clientTimeout():
		a.clamp = max(1, a.clamp*0.8)
		a.calm = 0
		a.g.metrics.autoActions.WithLabelValues("tighten").Inc()
	default:
		binding := float64(s.peak) >= 0.9*a.clamp
		if !binding {
			a.calm++
			if a.calm >= a.cfg.StandDownAfter {
				a.standDown("demand below the clamp, no metastable signature")
				return
			}
		} else {
			a.calm = 0
		}
		factor := a.cfg.RampFactor
		if s.queueWait > a.cfg.RampQueueWait {
			factor = math.Sqrt(factor) // recovering, not recovered: ramp gently
		}
		a.clamp = max(a.clamp*factor, a.clamp+1)
		a.g.metrics.autoActions.WithLabelValues("ramp").Inc()
	}
	if ceiling := float64(a.g.limiter.Snapshot().Ceiling); a.clamp >= ceiling {
		a.standDown("the clamp ramped to the ceiling")
		return
	}
	a.g.limiter.SetEmergency(int(math.Ceil(a.clamp)))
}

// ejectRefusing takes out of rotation the verifiers that refuse everything
// while another serves (Gateway.ejectRefusing), when the autopilot is on.
// Each tick calls it, and so does each judgement of the outliers after a
// bad answer (upstream.Config.AfterJudging): a verifier whose ejection
// ended is judged on its first answers, not a tick later.
func (a *autopilot) ejectRefusing(now time.Time) {
	if !a.enabled.Load() {
		return
	}
	for _, addr := range a.g.verifiers.EjectRefusing(now) {
		a.g.metrics.autoActions.WithLabelValues("eject").Inc()
		a.g.log.Warn("autopilot ejected a verifier refusing everything while others serve", "verifier", addr)
	}
}

func (a *autopilot) standDown(why string) {
	a.engaged.Store(false)
	a.bad, a.calm = 0, 0
	a.g.limiter.SetEmergency(0)
	a.g.metrics.autoEngaged.Set(0)
	a.g.metrics.autoActions.WithLabelValues("stand_down").Inc()
	a.g.log.Info("autopilot stood down", "why", why, "limit", a.g.limiter.Limit())
}
