package upstream

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/wellknown"
)

// maxLabels bounds the per-verifier series; verifiers beyond it are still
// served, only not shown one by one.
const maxLabels = 64

// metrics are the per-verifier series, labelled by address for at most
// maxLabels verifiers.
type metrics struct {
	outstanding *prometheus.GaugeVec
	breaker     *prometheus.GaugeVec
	ejected     *prometheus.GaugeVec
	ejections   *prometheus.GaugeVec
	fraction    *prometheus.GaugeVec
	serving     *prometheus.GaugeVec
	slots       *prometheus.GaugeVec
	standing    *prometheus.GaugeVec
	results     *prometheus.CounterVec

	mu       sync.Mutex
	labelled map[string]bool
}

func newMetrics(reg prometheus.Registerer, s *Set) *metrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"verifier"})
	}
	m := &metrics{
		outstanding: gauge("levee_gateway_verifier_outstanding", "Calls outstanding per verifier (at most 64 verifiers shown)."),
		breaker:     gauge(wellknown.MetricGatewayVerifierBreaker, "Circuit breaker per verifier: 0 closed, 1 half-open, 2 open."),
		ejected: gauge("levee_gateway_verifier_ejected",
			"1 while the verifier is out of rotation as an outlier (its answers mostly refusals or errors while its peers' are not)."),
		ejections: gauge("levee_gateway_verifier_ejections", "Times the verifier was ejected as an outlier since the gateway first saw it."),
		fraction: gauge("levee_gateway_verifier_breaker_fraction",
			"Fraction of picks the verifier's breaker admits (1 closed, 0 open, the ramp step half-open)."),
		serving: gauge(wellknown.MetricGatewayVerifierServing, "1 while the verifier's health stream says SERVING."),
		slots: gauge("levee_gateway_verifier_slots",
			"Calls the gateway may hold at the verifier at once: its workers and the queue it may form (critical slot aside)."),
		standing: gauge("levee_gateway_verifier_queue_standing",
			"1 while the verifier's queue is held to the queue delay's size because it stood above it for a whole second; 0 while a burst may queue up to the verifier's own bound."),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_gateway_verifier_results_total",
			Help: "Hops per verifier by result: ok, overloaded, failure, other.",
		}, []string{"verifier", "result"}),
		labelled: map[string]bool{},
	}
	if reg != nil {
		reg.MustRegister(m.outstanding, m.breaker, m.ejected, m.ejections, m.fraction, m.serving, m.slots, m.standing,
			m.results, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "levee_gateway_verifiers",
				Help: "Verifiers known (registered or static).",
			}, func() float64 { return float64(len(s.List())) }))
	}
	return m
}

// UpdateGauges refreshes the per-verifier gauges (Tick does, once a
// second; not per request).
func (s *Set) UpdateGauges() {
	m := s.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	for _, v := range s.List() {
		if !m.labelled[v.addr] && len(m.labelled) >= maxLabels {
			continue
		}
		m.labelled[v.addr] = true
		seen[v.addr] = true
		snap := v.brk.Load().Snapshot()
		ejected, times := v.Ejected()
		m.outstanding.WithLabelValues(v.addr).Set(float64(v.pending.Load()))
		m.breaker.WithLabelValues(v.addr).Set(breakerGauge(snap.State))
		m.fraction.WithLabelValues(v.addr).Set(snap.Fraction)
		m.ejected.WithLabelValues(v.addr).Set(b2f(ejected))
		m.ejections.WithLabelValues(v.addr).Set(float64(times))
		m.serving.WithLabelValues(v.addr).Set(b2f(v.Eligible()))
		m.slots.WithLabelValues(v.addr).Set(float64(v.Slots(0)))
		m.standing.WithLabelValues(v.addr).Set(b2f(v.standing.Load()))
	}
	for addr := range m.labelled {
		if !seen[addr] {
			delete(m.labelled, addr)
			for _, g := range []*prometheus.GaugeVec{m.outstanding, m.breaker, m.fraction, m.ejected, m.ejections,
				m.serving, m.slots, m.standing} {
				g.DeleteLabelValues(addr)
			}
			m.results.DeletePartialMatch(prometheus.Labels{"verifier": addr})
		}
	}
}

// result counts one hop's outcome for a labelled verifier.
func (m *metrics) result(v *Node, result string) {
	m.mu.Lock()
	ok := m.labelled[v.addr]
	m.mu.Unlock()
	if ok {
		m.results.WithLabelValues(v.addr, result).Inc()
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

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
