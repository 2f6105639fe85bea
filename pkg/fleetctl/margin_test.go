package fleetctl_test

import (
	"bytes"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leveehq/levee/pkg/fleetctl"
	"github.com/leveehq/levee/pkg/wellknown"
)

// servedMargin serves a /metrics page over HTTP with the gateway's margin
// gauges, as the gateway names them (wellknown), set to these values.
func servedMargin(t *testing.T, margin, offered, capacity, load float64) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	for name, v := range map[string]float64{
		wellknown.MetricGatewayMargin:            margin,
		wellknown.MetricGatewayMarginOffered:     offered,
		wellknown.MetricGatewayMarginCapacity:    capacity,
		wellknown.MetricGatewayMarginCongestedAt: load,
	} {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: name})
		g.Set(v)
		reg.MustRegister(g)
	}
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// TestPrintMargin: what `levee status` prints of a gateway's margin, for
// each verdict, and an unreachable gateway as an error.
func TestPrintMargin(t *testing.T) {
	for _, tc := range []struct {
		name                            string
		margin, offered, capacity, load float64
		want                            []string
	}{
		{"returns by itself", 0.25, 600, 1000, 750,
			[]string{"+0.25 — no congested state", "first attempts 600.0/s, capacity 1000.0/s, load after a trigger 750.0/s"}},
		{"congested state", -0.8, 800, 1000, 1800,
			[]string{"-0.80 — a congested state exists", "load after a trigger 1800.0/s"}},
		{"zero margin is congested", 0, 500, 1000, 1000, []string{"+0.00 — a congested state exists"}},
		{"capacity unknown", math.NaN(), 10, 0, 10, []string{"NaN — unknown: no verifier has answered yet"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := servedMargin(t, tc.margin, tc.offered, tc.capacity, tc.load)
			var buf bytes.Buffer
			if err := fleetctl.PrintMargin(ctxT(t), &buf, url); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			for _, want := range append(tc.want, "Bistability margin (gateway "+url+")") {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}

	srv := httptest.NewServer(nil)
	url := srv.URL + "/metrics"
	srv.Close()
	if err := fleetctl.PrintMargin(ctxT(t), new(bytes.Buffer), url); err == nil || !strings.Contains(err.Error(), "gateway metrics") {
		t.Errorf("PrintMargin of a gateway that is gone: %v, want a gateway metrics error", err)
	}
}
