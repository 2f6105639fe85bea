package observe

import (
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leveehq/levee/lab/drive"
)

func TestQuantile(t *testing.T) {
	inf := math.Inf(1)
	cum := map[float64]float64{0.001: 0, 0.01: 50, 0.1: 90, 1: 100, inf: 100}
	for _, tc := range []struct{ q, want float64 }{{0.5, 0.01}, {0.25, 0.0055}, {0.9, 0.1}, {0.99, 0.91}} {
		if got := quantile(tc.q, cum); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("q%v = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := quantile(0.99, map[float64]float64{0.1: 1, inf: 10}); got != 0.1 {
		t.Errorf("beyond the last bound: %v, want the last finite bound 0.1", got)
	}
	if got := quantile(0.5, map[float64]float64{inf: 0}); !math.IsNaN(got) {
		t.Errorf("empty: %v, want NaN", got)
	}
}

// TestScraperTurnsCountersIntoRates reads a verifier-shaped metrics page
// over HTTP twice and checks the columns: counters as the change between
// reads, gauges as read, the queue-wait histogram as quantiles of its change.
func TestScraperTurnsCountersIntoRates(t *testing.T) {
	reg := prometheus.NewRegistry()
	late := prometheus.NewCounter(prometheus.CounterOpts{Name: "levee_verifier_late_total"})
	attempts := prometheus.NewCounter(prometheus.CounterOpts{Name: "levee_verifier_attempts_total"})
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "levee_verifier_dropped_total"})
	expected := prometheus.NewGauge(prometheus.GaugeOpts{Name: "levee_verifier_expected_service_seconds"})
	wait := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "levee_verifier_queue_wait_seconds", Buckets: []float64{0.001, 0.01, 0.1, 1}})
	reg.MustRegister(late, attempts, dropped, expected, wait)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	f := &drive.Fleet{Name: "levee", Members: []*drive.Member{{Name: "verifier-1", Role: drive.RoleVerifier, Metrics: srv.URL}}}
	sc := NewScraper(f, nil)
	late.Add(5)
	attempts.Add(100)
	wait.Observe(0.5)
	first := sc.Read(t.Context(), 5*time.Second)
	if _, ok := first["v1_late"]; ok {
		t.Errorf("first read has a counter delta %v; it only sets the zero", first["v1_late"])
	}

	late.Add(3)
	attempts.Add(10)
	dropped.Add(4)
	expected.Set(0.25)
	for range 9 {
		wait.Observe(0.005)
	}
	wait.Observe(0.05)
	got := sc.Read(t.Context(), 5*time.Second)
	for col, want := range map[string]float64{
		"v1_late": 3, ColWasted: 3, "v1_arrivals": 10, "v1_refusal_rate": 0.4, "v1_expected_ms": 250,
	} {
		if math.Abs(got[col]-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", col, got[col], want)
		}
	}
	// 9 of the 10 new waits are in (1 ms, 10 ms]: p50 in there, p99 in (10 ms, 100 ms].
	if p := got[ColQueueP50]; p <= 1 || p > 10 {
		t.Errorf("queue wait p50 = %v ms, want in (1, 10]", p)
	}
	if p := got[ColQueueP99]; p <= 10 || p > 100 {
		t.Errorf("queue wait p99 = %v ms, want in (10, 100] (the old 0.5 s wait is not in this second)", p)
	}
}
