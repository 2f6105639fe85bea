package soak

import (
	"math"
	"testing"
	"time"

	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/observe"
)

// Judge on made-up seconds: steady levels pass; memory that grows, a
// member that restarted, and a member with no late reading fail.
func TestJudgeSoak(t *testing.T) {
	soak := func(cols map[string]func(i int) float64) *Result {
		s := observe.NewSeries(time.Now(), 100)
		for i := range 100 {
			vals := map[string]float64{}
			for c, f := range cols {
				if v := f(i); !math.IsNaN(v) {
					vals[c] = v
				}
			}
			s.SetScraped(i, vals)
			s.Second(i).ArrivedOK.Store(10)
			s.Second(i).ArrivedEnded.Store(10)
		}
		r := &experiment.Result{Series: s, Base: experiment.Window{From: 0, To: 100}}
		r.Verdict = experiment.Judge(s, r.Base, experiment.Window{From: 100, To: 100}, experiment.Window{From: 100, To: 100}, 0)
		return Judge(r)
	}
	steady := func(v float64) func(int) float64 { return func(int) float64 { return v } }
	if r := soak(map[string]func(int) float64{"v1_rss_mb": steady(500), "v1_goroutines": steady(30), "v1_fds": steady(12), "v1_pid": steady(42)}); !r.OK() {
		t.Errorf("steady levels: %+v, want OK", r)
	}
	grows := func(i int) float64 { return 100 + float64(i) }
	if r := soak(map[string]func(int) float64{"v1_rss_mb": grows, "v1_pid": steady(42)}); r.OK() {
		t.Errorf("memory from 100 to 200 MB: judged OK")
	}
	restarted := func(i int) float64 {
		if i < 60 {
			return 42
		}
		return 43
	}
	if r := soak(map[string]func(int) float64{"v1_rss_mb": steady(500), "v1_pid": restarted}); r.OK() || len(r.Unjudged) != 1 {
		t.Errorf("a restart 60 s in: OK %v, unjudged %v; want it not judged", r.OK(), r.Unjudged)
	}
	// Goroutines that swing with the calls in progress are the load, not
	// growth; goroutines left behind by calls that ended are growth.
	queue := func(i int) float64 { return float64(40 * (i / 50)) } // 0, then 40 queued
	withQueue := func(i int) float64 { return 30 + queue(i) }
	if r := soak(map[string]func(int) float64{"v1_rss_mb": steady(500), "v1_goroutines": withQueue, "v1_queue": queue}); !r.OK() {
		t.Errorf("goroutines 30 → 70 as the queue goes 0 → 40: %+v, want OK", r.Growth)
	}
	if r := soak(map[string]func(int) float64{"gw_rss_mb": steady(30), "gw_goroutines": withQueue, "gw_inflight": steady(0)}); r.OK() {
		t.Errorf("goroutines 30 → 70 with nothing in flight: judged OK")
	}
	gone := func(i int) float64 {
		if i < 50 {
			return 500
		}
		return math.NaN()
	}
	if r := soak(map[string]func(int) float64{"v1_rss_mb": gone}); r.OK() || len(r.Unjudged) != 1 {
		t.Errorf("no late reading: OK %v, unjudged %v; want it not judged", r.OK(), r.Unjudged)
	}
}
