package gateway

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/leveehq/levee/internal/tenantlabel"
	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/wellknown"
)

// Refusal reasons: the bounded values of the reason label.
const (
	reasonLimit      = "limit"        // the whole limit is in use
	reasonPriority   = "priority"     // over this class's share of the limit
	reasonDeadline   = "deadline"     // remaining time cannot cover a verification
	reasonNoVerifier = "no_verifier"  // none serving, or every breaker open
	reasonBusy       = "busy"         // every serving verifier's slots are held
	reasonTenant     = "tenant_share" // the caller's tenant is over its share while others need theirs
	nReasons         = 6
)

// Indexes into reasons, for the allocation-free counters.
const (
	reasonIndexLimit = iota
	reasonIndexPriority
	reasonIndexDeadline
	reasonIndexNoVerifier
	reasonIndexBusy
	reasonIndexTenant
)

var reasons = [nReasons]string{reasonLimit, reasonPriority, reasonDeadline, reasonNoVerifier, reasonBusy, reasonTenant}

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

// maxTenantLabels bounds the tenant label of the gateway's series.
const maxTenantLabels = 32

type metrics struct {
	class   [nPriorities][nAttempts]classMetrics
	invalid prometheus.Counter
	// withheld counts the verifiers' answers whose details the caller was
	// not told (Gateway.forCaller), by code.
	withheld *prometheus.CounterVec
	// tenantCalls counts the calls that reached the tenant shares, by
	// tenant (the busiest, tenantlabel) and outcome (admitted, refused).
	tenantCalls  *prometheus.CounterVec
	tenantLabels *tenantlabel.Labels

	fleetRetries   prometheus.Counter
	fleetNoBudget  prometheus.Counter
	verifierWait   prometheus.Histogram
	forwardLatency prometheus.Histogram

	retryRatio *prometheus.GaugeVec // by source: clients, gateway

	configErrors prometheus.Counter
	autoEngaged  prometheus.Gauge
	autoActions  *prometheus.CounterVec // by action
	autoFlushed  prometheus.Counter
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
		Help: "Requests refused at the edge without a hop, by priority, attempt class and reason (limit, priority, deadline, no_verifier, busy, tenant_share).",
	}, []string{"priority", "attempt", "reason"})

	m := &metrics{
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "levee_gateway_invalid_total",
			Help: "Requests refused at the edge as bad input (INVALID_ARGUMENT).",
		}),
		tenantCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_gateway_tenant_calls_total",
			Help: "Calls admitted past the limiter that the tenant shares judged, by tenant (the 32 busiest, chosen again every minute; then other) and outcome (admitted, refused: over its share while others needed theirs).",
		}, []string{"tenant", "outcome"}),
		withheld: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_gateway_details_withheld_total",
			Help: "Verifier answers passed to the caller with a generic message, by code: the details (a pepper key id, a memory budget, a cost estimate) are the operator's, at debug level in the log.",
		}, []string{"code"}),
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
	for _, c := range []codes.Code{codes.FailedPrecondition, codes.DeadlineExceeded, codes.Internal} {
		m.withheld.WithLabelValues(c.String())
	}
	now := time.Now
	if g.clock != nil {
		now = g.clock.Now
	}
	m.tenantLabels, _ = tenantlabel.New(tenantlabel.Config{Max: maxTenantLabels, Period: time.Minute, Now: now,
		Dropped: func(tenant string) { m.tenantCalls.DeletePartialMatch(prometheus.Labels{"tenant": tenant}) }}) // valid by construction
	reg.MustRegister(admitted, goodput, late, failed, refused, m.invalid, m.withheld, m.tenantCalls, m.fleetRetries, m.fleetNoBudget,
		m.verifierWait, m.forwardLatency, m.retryRatio, m.configErrors, m.autoEngaged, m.autoActions, m.autoFlushed,
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
	)
	return m
}
