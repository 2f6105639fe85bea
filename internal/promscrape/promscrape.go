// Package promscrape reads Prometheus text pages: what the lab and the
// operator's tool scrape from a fleet's /metrics.
package promscrape

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MaxBody bounds what is read of one page.
const MaxBody = 8 << 20

// Families are one page's metric families by name.
type Families map[string]*dto.MetricFamily

// client opens a fresh connection for every page, so that none is left
// behind (a paused process's would hang until its keep-alive ran out).
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// Fetch reads the page at url.
func Fetch(ctx context.Context, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(io.LimitReader(resp.Body, MaxBody))
}

// Sum adds the samples of metric name whose labels include labels:
// counters, gauges and untyped by value, histograms by count. NaN when the
// page has no such metric.
func (fs Families) Sum(name string, labels map[string]string) float64 {
	mf, ok := fs[name]
	if !ok {
		return math.NaN()
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		if !HasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// HasLabels reports whether m carries every label of want.
func HasLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
