package verifier

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/internal/tenantlabel"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/wellknown"
	"github.com/leveehq/levee/pkg/workpool"
)

// Drop reasons: the bounded values of the reason label.
const (
	reasonArrival      = "arrival"         // refused before queueing: the node's own bound (overload)
	reasonDeadline     = "deadline"        // refused before queueing: the caller's deadline cannot be met
	reasonExpired      = "dequeue_expired" // dropped at dequeue: deadline too close
	reasonQueueExpired = "queue_expired"   // deadline passed while queued
	reasonCancel       = "cancelled"       // caller left while queued
	reasonDraining     = "draining"        // node draining or closed
	reasonTooBig       = "over_memory"     // stored hash needs more memory than the whole budget
	reasonPushedOut    = "pushed_out"      // queued, then its place in the full queue went to a tenant with fewer queued (overload)
)

type metrics struct {
	queueWait *prometheus.HistogramVec // by rpc
	service   *prometheus.HistogramVec // by algorithm
	goodput   *prometheus.CounterVec   // by rpc
	late      *prometheus.CounterVec   // by rpc
	dropped   *prometheus.CounterVec   // by reason, priority
	hashes    *prometheus.CounterVec   // by algorithm

	// Credential-stuffing signals.
	attempts *prometheus.CounterVec // by algorithm, tenant
	verdicts *prometheus.CounterVec // by algorithm, tenant, result
	workSecs *prometheus.CounterVec // by tenant
	tenants  *tenantlabel.Labels
}

// MaxTenantLabels bounds the tenant label: the busiest tenants of the last
// minutes get their own value, chosen again every minute, the rest share
// "other"; no tenant is "none" (package tenantlabel).
const MaxTenantLabels = 32

// latencyBuckets span 1 ms to ~33 s: from a cheap hash to a hopeless queue.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)

func newMetrics(reg prometheus.Registerer, pool *workpool.Pool, model *verify.CostModel, policy *verify.Hash,
	stall *stallDetector) *metrics {
	m := &metrics{
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    wellknown.MetricVerifierQueueWait,
			Help:    "Time requests spent queued before a worker took them (or dropped them).",
			Buckets: latencyBuckets,
		}, []string{"rpc"}),
		service: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "levee_verifier_service_seconds",
			Help:    "Time a worker was held by one hash, slowdown included.",
			Buckets: latencyBuckets,
		}, []string{"algorithm"}),
		goodput: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_verifier_goodput_total",
			Help: "Requests answered before the caller's deadline.",
		}, []string{"rpc"}),
		late: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: wellknown.MetricVerifierLate,
			Help: "Requests whose hash completed after the caller's deadline or departure: wasted work.",
		}, []string{"rpc"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: wellknown.MetricVerifierDropped,
			Help: "Requests not hashed, by reason (arrival, deadline, dequeue_expired, queue_expired, cancelled, draining, over_memory, pushed_out) and priority.",
		}, []string{"reason", "priority"}),
		hashes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_verifier_hashes_total",
			Help: "Hash computations started, by algorithm.",
		}, []string{"algorithm"}),
	}
	stat := func(f func(workpool.Stats) float64) func() float64 {
		return func() float64 { return f(pool.Stats()) }
	}
	m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: wellknown.MetricVerifierAttempts,
		Help: "Verify calls received with a well-formed request, by algorithm of the stored hash (no_user: the policy's) and tenant (the 32 busiest, chosen again every minute; then other).",
	}, []string{"algorithm", "tenant"})
	m.verdicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "levee_verifier_verdicts_total",
		Help: "Verify calls answered, by algorithm, tenant and result (match, no_match, no_user). Match ratio = match / all; a falling ratio with rising attempts, or many no_user, is the shape of credential stuffing.",
	}, []string{"algorithm", "tenant", "result"})
	m.workSecs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: wellknown.MetricVerifierTenantWork,
		Help: "Seconds workers were held by each tenant's hashes (tenant: the 32 busiest, chosen again every minute; then other). The queue shares workers among the tenants with calls queued, so while two are busy their rates should be about equal.",
	}, []string{"tenant"})
	reg.MustRegister(m.attempts, m.verdicts, m.workSecs)
	m.tenants, _ = tenantlabel.New(tenantlabel.Config{Max: MaxTenantLabels, Period: time.Minute, Dropped: func(tenant string) {
		m.attempts.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
		m.verdicts.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
		m.workSecs.DeletePartialMatch(prometheus.Labels{"tenant": tenant})
	}}) // valid by construction
	reg.MustRegister(m.queueWait, m.service, m.goodput, m.late, m.dropped, m.hashes,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "levee_verifier_inflight",
			Help: "Hashes running now.",
		}, stat(func(s workpool.Stats) float64 { return float64(s.Busy) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: wellknown.MetricVerifierQueueLength,
			Help: "Requests waiting for a worker.",
		}, stat(func(s workpool.Stats) float64 { return float64(s.Queued) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "levee_verifier_workers_active",
			Help: "Workers taking work (lower than configured while the capacity knob is in use).",
		}, stat(func(s workpool.Stats) float64 { return float64(s.Active) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "levee_verifier_memory_budget_bytes",
			Help: "Argon2 memory the hashes running at once may hold in all.",
		}, stat(func(s workpool.Stats) float64 { return float64(s.MemoryBudget) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "levee_verifier_memory_in_use_bytes",
			Help: "Argon2 memory held by the hashes running now (by their parameters).",
		}, stat(func(s workpool.Stats) float64 { return float64(s.MemoryInUse) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "levee_verifier_lifo",
			Help: "1 while the queue serves newest first.",
		}, stat(func(s workpool.Stats) float64 { return b2f(s.LIFO) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: wellknown.MetricVerifierExpectedService,
			Help: "Current estimate of one hash under the hashing policy: the calibrated time times the stretch.",
		}, func() float64 { return model.Estimate(policy).Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "levee_verifier_calibrated_service_seconds",
			Help: "One hash under the hashing policy as the warm-up measured it, run alone.",
		}, func() float64 { return model.Baseline(policy).Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "levee_verifier_cost_stretch",
			Help: "How much slower than calibrated the policy's hashes ran lately (median, bounded; 1 without recent samples).",
		}, func() float64 { return model.Stretch(policy) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "levee_verifier_stalls_total",
			Help: "Times the process was seen not running for a while (a late ticker: SIGSTOP, a pause); runs that spanned one teach the cost model nothing.",
		}, func() float64 { return float64(stall.stalls.Load()) }),
	)
	// Pre-create the label combinations so that every series exists at zero.
	for _, rpc := range []string{"verify", "hash"} {
		m.queueWait.WithLabelValues(rpc)
		m.goodput.WithLabelValues(rpc)
		m.late.WithLabelValues(rpc)
	}
	for _, a := range verify.Algorithms() {
		m.service.WithLabelValues(a.String())
		m.hashes.WithLabelValues(a.String())
	}
	for _, r := range []string{reasonArrival, reasonDeadline, reasonExpired, reasonQueueExpired, reasonCancel, reasonDraining, reasonTooBig, reasonPushedOut} {
		for _, p := range []callmeta.Priority{callmeta.Critical, callmeta.Interactive, callmeta.Batch} {
			m.dropped.WithLabelValues(r, p.String())
		}
	}
	return m
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// attempt counts a well-formed Verify call.
func (m *metrics) attempt(h *verify.Hash, tenant string) {
	m.attempts.WithLabelValues(h.Algorithm.String(), m.tenants.Label(tenant)).Inc()
}

// work counts the time a worker was held for tenant.
func (m *metrics) work(tenant string, held time.Duration) {
	m.workSecs.WithLabelValues(m.tenants.Label(tenant)).Add(held.Seconds())
}

// verdict counts an answered Verify call.
func (m *metrics) verdict(h *verify.Hash, tenant string, noUser, match bool) {
	result := "no_match"
	switch {
	case noUser:
		result = "no_user"
	case match:
		result = "match"
	}
	m.verdicts.WithLabelValues(h.Algorithm.String(), m.tenants.Label(tenant), result).Inc()
}
