package budget

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/pkg/wellknown"
)

// The metrics are read from the budgets' own counters at scrape time, so the
// request path pays nothing for them. Label values are bounded: key (at most
// MaxKeys per client), mode, source, result.
var (
	descFallback = prometheus.NewDesc(wellknown.MetricBudgetFallback,
		"1 while the key runs on the local fallback budget, 0 on the shared one.", []string{"key"}, nil)
	descTokens = prometheus.NewDesc(wellknown.MetricBudgetTokens,
		"Retry tokens Allow can spend now, by source (lease or fallback).", []string{"key", "source"}, nil)
	descLeaseAge = prometheus.NewDesc("levee_budget_lease_age_seconds",
		"Time since the key's latest lease arrived (absent before the first).", []string{"key"}, nil)
	descAllowed = prometheus.NewDesc("levee_budget_allowed_total",
		"Retries allowed (tokens spent), by the source of the token.", []string{"key", "source"}, nil)
	descDenied = prometheus.NewDesc("levee_budget_denied_total",
		"Retries refused because no token was left.", []string{"key"}, nil)
	descFirst = prometheus.NewDesc("levee_budget_first_attempts_total",
		"First attempts recorded.", []string{"key"}, nil)
	descRetries = prometheus.NewDesc("levee_budget_retries_total",
		"Retries recorded as sent.", []string{"key"}, nil)
	descGranted = prometheus.NewDesc("levee_budget_tokens_granted_total",
		"Retry tokens granted by budgetd.", []string{"key"}, nil)
	descEntries = prometheus.NewDesc("levee_budget_fallback_entries_total",
		"Moves to the fallback budget.", []string{"key"}, nil)
	descRefresh = prometheus.NewDesc("levee_budget_refreshes_total",
		"Lease refreshes by result (ok or error).", []string{"result"}, nil)
)

type collector struct{ c *Client }

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFallback, descTokens, descLeaseAge, descAllowed, descDenied,
		descFirst, descRetries, descGranted, descEntries, descRefresh} {
		ch <- d
	}
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	for _, b := range *m.c.keys.Load() {
		s := b.Status()
		fb := 0.0
		if s.Mode == Fallback {
			fb = 1
		}
		gauge(descFallback, fb, s.Key)
		gauge(descTokens, float64(s.LeaseTokens), s.Key, "lease")
		gauge(descTokens, s.FallbackTokens, s.Key, "fallback")
		if s.HasLease {
			gauge(descLeaseAge, s.LeaseAge.Seconds(), s.Key)
		}
		counter(descAllowed, s.Allowed-s.AllowedFallback, s.Key, "lease")
		counter(descAllowed, s.AllowedFallback, s.Key, "fallback")
		counter(descDenied, s.Denied, s.Key)
		counter(descFirst, s.FirstAttempts, s.Key)
		counter(descRetries, s.Retries, s.Key)
		counter(descGranted, s.Granted, s.Key)
		counter(descEntries, s.FallbackEntries, s.Key)
	}
	counter(descRefresh, m.c.refreshOK.Load(), "ok")
	counter(descRefresh, m.c.refreshNG.Load(), "error")
}
