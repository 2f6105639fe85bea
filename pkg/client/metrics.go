package client

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"
)

// Reasons a retryable failure was not retried (label values).
const (
	reasonBudget      = "budget"       // no token
	reasonDeadline    = "deadline"     // not enough time left
	reasonMaxAttempts = "max_attempts" // MaxAttempts reached
	reasonPushback    = "pushback"     // the server said not to (negative or malformed pushback)
)

// metrics are the Client's series. Labels are bounded: method (verify,
// hash), attempt (first, retry), code (gRPC codes), reason (above).
type metrics struct {
	attempts *prometheus.CounterVec
	calls    *prometheus.CounterVec
	denied   *prometheus.CounterVec
	pushback *prometheus.CounterVec
	delay    *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_client_attempts_total",
			Help: "Attempts sent, by method and attempt class (first or retry).",
		}, []string{"method", "attempt"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_client_calls_total",
			Help: "Calls ended, by method and final gRPC code.",
		}, []string{"method", "code"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_client_retries_denied_total",
			Help: "Retryable failures not retried, by method and reason (budget, deadline, max_attempts, pushback).",
		}, []string{"method", "reason"}),
		pushback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_client_pushback_honoured_total",
			Help: "Retries delayed by at least the server's grpc-retry-pushback-ms.",
		}, []string{"method"}),
		delay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "levee_client_retry_delay_seconds",
			Help:    "Wait before each retry (backoff plus pushback).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1 ms .. 8 s
		}, []string{"method"}),
	}
	var err error
	m.attempts = register(reg, m.attempts, &err)
	m.calls = register(reg, m.calls, &err)
	m.denied = register(reg, m.denied, &err)
	m.pushback = register(reg, m.pushback, &err)
	m.delay = register(reg, m.delay, &err)
	if err != nil {
		return nil, fmt.Errorf("client: register metrics: %w", err)
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// its name (so that several Clients can share a registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		*errp = errors.Join(*errp, err)
	}
	return c
}

// methodMetrics are the series of one method, resolved once.
type methodMetrics struct {
	m        *metrics
	name     string
	first    prometheus.Counter
	retry    prometheus.Counter
	pushback prometheus.Counter
	delay    prometheus.Observer
	deniedBy map[string]prometheus.Counter
}

func (m *metrics) method(name string) *methodMetrics {
	mm := &methodMetrics{
		m:        m,
		name:     name,
		first:    m.attempts.WithLabelValues(name, "first"),
		retry:    m.attempts.WithLabelValues(name, "retry"),
		pushback: m.pushback.WithLabelValues(name),
		delay:    m.delay.WithLabelValues(name),
		deniedBy: map[string]prometheus.Counter{},
	}
	for _, r := range []string{reasonBudget, reasonDeadline, reasonMaxAttempts, reasonPushback} {
		mm.deniedBy[r] = m.denied.WithLabelValues(name, r)
	}
	return mm
}

// done counts a call's end and returns err.
func (mm *methodMetrics) done(err error) error {
	mm.m.calls.WithLabelValues(mm.name, status.Code(err).String()).Inc()
	return err
}

// denied counts a retry not made and returns last, wrapped with why when
// why is not nil.
func (mm *methodMetrics) denied(reason string, last, why error) error {
	mm.deniedBy[reason].Inc()
	if why != nil {
		last = fmt.Errorf("%w (%w)", last, why)
	}
	return mm.done(last)
}
