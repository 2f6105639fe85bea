package faults

import (
	"math"
	"testing"
	"time"

	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/observe"
)

// TestVerifierSecondsWithoutCalls: the quorum-loss routing check counts a
// second in which a scraped verifier got no call, ignores other columns, and
// does not pass on a verifier it scraped in fewer than half the seconds.
func TestVerifierSecondsWithoutCalls(t *testing.T) {
	for _, tc := range []struct {
		name       string
		v1, v2     []float64 // arrivals per second; NaN: not scraped
		idle, seen int
	}{
		{"both served throughout", []float64{90, 80, 100, 95}, []float64{85, 99, 70, 88}, 0, 8},
		{"one forgotten halfway", []float64{90, 80, 100, 95}, []float64{85, 99, 0, 0}, 2, 8},
		{"one scrape missed", []float64{90, math.NaN(), 100, 95}, []float64{85, 99, 70, 88}, 0, 7},
		{"one never scraped", []float64{90, 80, 100, 95}, []float64{math.NaN(), math.NaN(), math.NaN(), 88}, 3, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := observe.NewSeries(time.Now(), len(tc.v1))
			for i := range tc.v1 {
				vals := map[string]float64{"v1_queue": 0, "gw_arrivals_total": 0}
				if !math.IsNaN(tc.v1[i]) {
					vals["v1_arrivals"] = tc.v1[i]
				}
				if !math.IsNaN(tc.v2[i]) {
					vals["v2_arrivals"] = tc.v2[i]
				}
				s.SetScraped(i, vals)
			}
			r := &faultRun{res: &experiment.Result{Series: s}}
			idle, seen := r.verifierSecondsWithoutCalls(0, len(tc.v1))
			if idle != tc.idle || seen != tc.seen {
				t.Errorf("idle %d of %d verifier-seconds, want %d of %d", idle, seen, tc.idle, tc.seen)
			}
		})
	}
}
