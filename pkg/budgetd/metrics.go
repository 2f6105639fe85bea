package budgetd

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/pkg/wellknown"
)

// Outcomes of a Lease call: the bounded values of the outcome label.
const (
	outcomeLocal       = "local"       // answered by this replica, the leader
	outcomeForwarded   = "forwarded"   // answered by the leader through this follower
	outcomeUnavailable = "unavailable" // no leader could answer
	outcomeInvalid     = "invalid"     // INVALID_ARGUMENT
	outcomeExhausted   = "exhausted"   // too many budget keys
	outcomeImplausible = "implausible" // a report above MaxClientRate
	outcomeForbidden   = "forbidden"   // a client_id its certificate cannot bind
)

// otherKey labels every budget key without its own configuration in etcd:
// clients choose keys, operators choose which keys get their own series.
const otherKey = "other"

type metrics struct {
	isLeader       prometheus.Gauge
	acquired       prometheus.Counter
	sessionLosses  prometheus.Counter
	leases         *prometheus.CounterVec // by outcome
	forwarded      *prometheus.CounterVec // by rpc, result
	granted        *prometheus.CounterVec // by key (configured keys, else "other")
	denied         *prometheus.CounterVec // by key
	firstAttempts  *prometheus.CounterVec // by key
	retries        *prometheus.CounterVec // by key
	uncredited     prometheus.Counter
	configErrors   prometheus.Counter
	configInvalid  prometheus.Gauge
	keys           prometheus.Gauge
	clients        prometheus.Gauge
	configSettings *prometheus.GaugeVec // by key, setting
}

func newMetrics(reg prometheus.Registerer) *metrics {
	byKey := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"key"})
	}
	m := &metrics{
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: wellknown.MetricBudgetdIsLeader,
			Help: "1 while this replica leads and grants leases, else 0.",
		}),
		acquired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "levee_budgetd_leadership_acquired_total",
			Help: "Times this replica became the leader.",
		}),
		sessionLosses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "levee_budgetd_etcd_session_losses_total",
			Help: "Times this replica's etcd session expired or could not be renewed (not counting shutdown).",
		}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_budgetd_leases_total",
			Help: "Lease calls by outcome (local, forwarded, unavailable, invalid, exhausted, implausible, forbidden).",
		}, []string{"outcome"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "levee_budgetd_forwarded_total",
			Help: "Calls forwarded to the leader, by rpc (lease, status) and result (ok, error).",
		}, []string{"rpc", "result"}),
		granted: byKey("levee_budgetd_tokens_granted_total",
			"Retry tokens granted by this replica as leader, by key (keys without their own configuration: \"other\")."),
		denied: byKey("levee_budgetd_tokens_denied_total",
			"Retry tokens wanted but not granted by this replica as leader, by key."),
		firstAttempts: byKey("levee_budgetd_first_attempts_reported_total",
			"First attempts reported by clients to this replica as leader, by key."),
		retries: byKey("levee_budgetd_retries_reported_total",
			"Retries reported by clients to this replica as leader, by key."),
		uncredited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "levee_budgetd_reported_uncredited_total",
			Help: "First attempts and retries reported beyond what their identity may be credited with (MaxClientRate a second, ForgetAfter's worth saved): not counted, never earned.",
		}),
		configErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "levee_budgetd_config_errors_total",
			Help: "Configuration values in etcd rejected (malformed JSON, unknown or missing fields, out-of-range values, bad key names).",
		}),
		configInvalid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "levee_budgetd_config_invalid",
			Help: "Configuration keys in etcd whose current value is rejected (the last good value stays in force).",
		}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "levee_budgetd_budget_keys",
			Help: "Budget keys this replica accounts for as leader.",
		}),
		clients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "levee_budgetd_clients",
			Help: "Client-key pairs this replica accounts for as leader.",
		}),
		configSettings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "levee_budgetd_settings",
			Help: "Settings in force for each configured key and for the default (key \"_default\"), by setting (ratio, burst, min_per_second).",
		}, []string{"key", "setting"}),
	}
	reg.MustRegister(m.isLeader, m.acquired, m.sessionLosses, m.leases, m.forwarded, m.granted, m.denied,
		m.firstAttempts, m.retries, m.uncredited, m.configErrors, m.configInvalid, m.keys, m.clients, m.configSettings)
	for _, o := range []string{outcomeLocal, outcomeForwarded, outcomeUnavailable, outcomeInvalid, outcomeExhausted} {
		m.leases.WithLabelValues(o)
	}
	for _, rpc := range []string{"lease", "status"} {
		m.forwarded.WithLabelValues(rpc, "ok")
		m.forwarded.WithLabelValues(rpc, "error")
	}
	return m
}
