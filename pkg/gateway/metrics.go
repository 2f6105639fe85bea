package gateway

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/wellknown"
)

// Refusal reasons: the bounded values of the reason label.
const (
	reasonLimit      = "limit"       // the whole limit is in use
	reasonPriority   = "priority"    // over this class's share of the limit
	reasonDeadline   = "deadline"    // remaining time cannot cover a verification
	reasonNoVerifier = "no_verifier" // none serving, or every breaker open
	reasonBusy       = "busy"        // every serving verifier's slots are held
	nReasons         = 5
)

// Indexes into reasons, for the allocation-free counters.
const (
	reasonIndexLimit = iota
	reasonIndexPriority
	reasonIndexDeadline
	reasonIndexNoVerifier
	reasonIndexBusy
)

var reasons = [nReasons]string{reasonLimit, reasonPriority, reasonDeadline, reasonNoVerifier, reasonBusy}

const (
	nPriorities = 4 // unspecified, critical, interactive, batch
	nAttempts   = 2 // first, retry
)

// attemptNames are the attempt class label's values, in the order of the
// second index of the per-class arrays; the priority label's values are
// callmeta.Priority's String, indexed by the priority.
var attemptNames = [nAttempts]string{callmeta.FirstAttempt, callmeta.RetryAttempt}

// classMetrics are the counters of one class of calls (priority × attempt
// class), prepared at start: a call looks its own up once (newCall) instead
// of calling WithLabelValues on the request path.
type classMetrics struct {
	admitted prometheus.Counter
	goodput  prometheus.Counter
	late     prometheus.Counter
	failed   prometheus.Counter
	refused  [nReasons]prometheus.Counter // by reason index
}

// forClass returns the counters of the class of calls with priority p,
// first attempts or retries; a priority outside the enumeration counts as
// unspecified.
func (m *metrics) forClass(p callmeta.Priority, retry bool) *classMetrics {
	pi, ai := int(p), 0
	if pi >= nPriorities {
		pi = 0
	}
	if retry {
		ai = 1
	}
	return &m.class[pi][ai]
}

// maxVerifierLabels bounds the per-verifier series; verifiers beyond it are
// still served, only not shown one by one.
const maxVerifierLabels = 64

type metrics struct {
	class   [nPriorities][nAttempts]classMetrics
	invalid prometheus.Counter

	fleetRetries   prometheus.Counter
	fleetNoBudget  prometheus.Counter
	verifierWait   prometheus.Histogram
	forwardLatency prometheus.Histogram

	retryRatio *prometheus.GaugeVec // by source: clients, gateway

	configErrors prometheus.Counter
	autoEngaged  prometheus.Gauge
	autoActions  *prometheus.CounterVec // by action
	autoFlushed  prometheus.Counter

	vOutstanding *prometheus.GaugeVec // by verifier
	vBreaker     *prometheus.GaugeVec // by verifier: 0 closed, 1 half-open, 2 open
	vEjected     *prometheus.GaugeVec // by verifier: 1 while ejected as an outlier
	vEjections   *prometheus.GaugeVec // by verifier: ejections so far
	vFraction    *prometheus.GaugeVec // by verifier: breaker's admitted fraction
	vServing     *prometheus.GaugeVec // by verifier
	vSlots       *prometheus.GaugeVec // by verifier
	vStanding    *prometheus.GaugeVec // by verifier
	vResults     *prometheus.CounterVec
	labelsMu     sync.Mutex
	labelled     map[string]bool
}

// latencyBuckets span 1 ms to ~33 s.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)

func newMetrics(reg prometheus.Registerer, g *Gateway) *metrics {
	byClass := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"priority", "attempt"})
	}
	admitted := byClass(wellknown.MetricGatewayAdmitted, "Requests admitted past the edge limiter, by priority and attempt class (first, retry).")
	goodput := byClass("levee_gateway_goodput_total", "Requests answered successfully before the caller's deadline.")
	late := byClass(wellknown.MetricGatewayLate, "Requests answered after the caller's deadline: wasted work.")
	failed := byClass(wellknown.MetricGatewayFailed, "Admitted requests that ended in an error other than bad input (verifier refusal, node loss, deadline).")
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: wellknown.MetricGatewayRefused,
		Help: "Requests refused at the edge without a hop, by priority, attempt class and reason (limit, priority, deadline, no_verifier, busy).",
	}, []string{"priority", "attempt", "reason"})

	m := &metrics{
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "levee_gateway_invalid_total",
			Help: "Requests refused at the edge as bad input (INVALID_ARGUMENT).",
		}),
		fleetRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: wellknown.MetricGatewayFleetRetries,
			Help: "Hops retried on another verifier with a token from the fleet-wide budget.",
		}),
		fleetNoBudget: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "levee_gateway_fleet_retries_denied_total",
			Help: "Retryable hop failures not retried: no budget token, no time left, or no other verifier.",
		}),
		verifierWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "levee_gateway_verifier_queue_wait_seconds",
			Help:    "Queue wait that verifiers reported for admitted calls.",
			Buckets: latencyBuckets,
		}),
		forwardLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "levee_gateway_forward_seconds",
			Help:    "Time from admission to the answer of requests that reached a verifier.",
			Buckets: latencyBuckets,
		}),
		retryRatio: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "levee_gateway_retry_ratio",
			Help: "Retries per first attempt over the last 10 s: source=clients counts arrivals with attempt > 1, source=gateway the in-fleet retries.",
		}, []string{"source"}),
		configErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "levee_gateway_config_errors_total",
			Help: "Runtime settings read from etcd and rejected (the last good ones stay in force).",
		}),
		autoEngaged: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: wellknown.MetricGatewayAutopilotEngaged,
			Help: "1 while the recovery autopilot holds admission clamped.",
		}),
		autoActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_gateway_autopilot_actions_total",
			Help: "Autopilot actions: engage, ramp, tighten, stand_down, eject.",
		}, []string{"action"}),
		autoFlushed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "levee_gateway_autopilot_flushed_total",
			Help: "In-flight calls the autopilot cancelled because their callers had given up.",
		}),
		vOutstanding: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "levee_gateway_verifier_outstanding",
			Help: "Calls outstanding per verifier (at most 64 verifiers shown).",
		}, []string{"verifier"}),
		vBreaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: wellknown.MetricGatewayVerifierBreaker,
			Help: "Circuit breaker per verifier: 0 closed, 1 half-open, 2 open.",
		}, []string{"verifier"}),
		vEjected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "levee_gateway_verifier_ejected",
			Help: "1 while the verifier is out of rotation as an outlier (its answers mostly refusals or errors while its peers' are not).",
		}, []string{"verifier"}),
		vEjections: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "levee_gateway_verifier_ejections",
			Help: "Times the verifier was ejected as an outlier since the gateway first saw it.",
		}, []string{"verifier"}),
		vFraction: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "levee_gateway_verifier_breaker_fraction",
			Help: "Fraction of picks the verifier's breaker admits (1 closed, 0 open, the ramp step half-open).",
		}, []string{"verifier"}),
		vServing: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: wellknown.MetricGatewayVerifierServing,
			Help: "1 while the verifier's health stream says SERVING.",
		}, []string{"verifier"}),
		vSlots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "levee_gateway_verifier_slots",
			Help: "Calls the gateway may hold at the verifier at once: its workers and the queue it may form (critical slot aside).",
		}, []string{"verifier"}),
		vStanding: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "levee_gateway_verifier_queue_standing",
			Help: "1 while the verifier's queue is held to the queue delay's size because it stood above it for a whole second; 0 while a burst may queue up to the verifier's own bound.",
		}, []string{"verifier"}),
		vResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_gateway_verifier_results_total",
			Help: "Hops per verifier by result: ok, overloaded, failure, other.",
		}, []string{"verifier", "result"}),
		labelled: map[string]bool{},
	}
	for p := range nPriorities {
		for a := range nAttempts {
			lp, la := callmeta.Priority(p).String(), attemptNames[a]
			c := &m.class[p][a]
			c.admitted = admitted.WithLabelValues(lp, la)
			c.goodput = goodput.WithLabelValues(lp, la)
			c.late = late.WithLabelValues(lp, la)
			c.failed = failed.WithLabelValues(lp, la)
			for r := range nReasons {
				c.refused[r] = refused.WithLabelValues(lp, la, reasons[r])
			}
		}
	}
	for _, src := range []string{"clients", "gateway"} {
		m.retryRatio.WithLabelValues(src)
	}
	for _, act := range []string{"engage", "ramp", "tighten", "stand_down", "eject"} {
		m.autoActions.WithLabelValues(act)
	}
	lim := func(name, help string, f func(admission.Snapshot) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return f(g.limiter.Snapshot()) })
	}
	reg.MustRegister(admitted, goodput, late, failed, refused, m.invalid, m.fleetRetries, m.fleetNoBudget,
		m.verifierWait, m.forwardLatency, m.retryRatio, m.configErrors, m.autoEngaged, m.autoActions, m.autoFlushed,
		m.vOutstanding, m.vBreaker, m.vEjected, m.vEjections, m.vFraction, m.vServing, m.vSlots, m.vStanding, m.vResults,
		lim(wellknown.MetricGatewayLimit, "Effective concurrency limit: min(adaptive, ceiling, clamp, autopilot clamp).",
			func(s admission.Snapshot) float64 { return float64(s.Limit) }),
		lim("levee_gateway_limit_adaptive", "The adaptive limiter's own limit.",
			func(s admission.Snapshot) float64 { return float64(s.Adaptive) }),
		lim("levee_gateway_limit_ceiling", "Ceiling of the limit.",
			func(s admission.Snapshot) float64 { return float64(s.Ceiling) }),
		lim("levee_gateway_limit_clamp", "Operator clamp of the limit (0: none).",
			func(s admission.Snapshot) float64 { return float64(s.Clamp) }),
		lim("levee_gateway_limit_autopilot", "Autopilot clamp of the limit (0: none).",
			func(s admission.Snapshot) float64 { return float64(s.Emergency) }),
		lim(wellknown.MetricGatewayInflight, "Requests admitted and not yet answered.",
			func(s admission.Snapshot) float64 { return float64(s.InFlight) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "levee_gateway_verifiers",
			Help: "Verifiers known (registered or static).",
		}, func() float64 { return float64(len(g.backends.list())) }),
	)
	return m
}

// observeVerifiers refreshes the per-verifier gauges (on each scrape tick of
// the gateway's own loop, not per request).
func (m *metrics) observeVerifiers(list []*backend) {
	m.labelsMu.Lock()
	defer m.labelsMu.Unlock()
	seen := map[string]bool{}
	for _, b := range list {
		if !m.labelled[b.addr] && len(m.labelled) >= maxVerifierLabels {
			continue
		}
		m.labelled[b.addr] = true
		seen[b.addr] = true
		snap := b.brk.Load().Snapshot()
		m.vOutstanding.WithLabelValues(b.addr).Set(float64(b.pending.Load()))
		m.vBreaker.WithLabelValues(b.addr).Set(breakerGauge(snap.State))
		m.vFraction.WithLabelValues(b.addr).Set(snap.Fraction)
		m.vEjected.WithLabelValues(b.addr).Set(b2f(b.eject.ejectedNow()))
		m.vEjections.WithLabelValues(b.addr).Set(float64(b.eject.count.Load()))
		serving := 0.0
		if b.eligible() {
			serving = 1
		}
		m.vServing.WithLabelValues(b.addr).Set(serving)
		m.vSlots.WithLabelValues(b.addr).Set(float64(b.slots(0)))
		m.vStanding.WithLabelValues(b.addr).Set(b2f(b.standing.Load()))
	}
	for addr := range m.labelled {
		if !seen[addr] {
			delete(m.labelled, addr)
			m.vOutstanding.DeleteLabelValues(addr)
			m.vBreaker.DeleteLabelValues(addr)
			m.vFraction.DeleteLabelValues(addr)
			m.vEjected.DeleteLabelValues(addr)
			m.vEjections.DeleteLabelValues(addr)
			m.vServing.DeleteLabelValues(addr)
			m.vSlots.DeleteLabelValues(addr)
			m.vStanding.DeleteLabelValues(addr)
			m.vResults.DeletePartialMatch(prometheus.Labels{"verifier": addr})
		}
	}
}

// result counts one hop's outcome for a labelled verifier.
func (m *metrics) result(b *backend, result string) {
	m.labelsMu.Lock()
	ok := m.labelled[b.addr]
	m.labelsMu.Unlock()
	if ok {
		m.vResults.WithLabelValues(b.addr, result).Inc()
	}
}

func breakerGauge(s breaker.State) float64 {
	switch s {
	case breaker.HalfOpen:
		return 1
	case breaker.Open:
		return 2
	}
	return 0
}

// ratioWindow turns cumulative counts of first attempts and retries into the
// ratio over the last ten seconds: the request path only adds to atomics, and
// a once-a-second roll keeps ten snapshots.
type ratioWindow struct {
	firsts, retries atomic.Uint64

	mu   sync.Mutex
	ring [11][2]uint64 // snapshots of (firsts, retries), one per roll
	n    int           // rolls so far
}

func (w *ratioWindow) add(first bool) {
	if first {
		w.firsts.Add(1)
	} else {
		w.retries.Add(1)
	}
}

// roll takes a snapshot and returns retries / first attempts since the one
// ten rolls ago (or since the start), and the first attempts per roll over
// that span.
func (w *ratioWindow) roll() (ratio, firstsPerRoll float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := [2]uint64{w.firsts.Load(), w.retries.Load()}
	w.ring[w.n%len(w.ring)] = now
	w.n++
	var old [2]uint64
	if w.n >= len(w.ring) {
		old = w.ring[w.n%len(w.ring)]
	}
	f, r := now[0]-old[0], now[1]-old[1]
	if f == 0 {
		return 0, 0
	}
	// The first roll is at the start: n rolls span n−1 of them.
	if rolls := min(w.n-1, len(w.ring)-1); rolls > 0 {
		firstsPerRoll = float64(f) / float64(rolls)
	}
	return float64(r) / float64(f), firstsPerRoll
}
