package storm

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/observe"
)

// TestSoakNoGrowth is the soak's short version (docs/faults.md has the 30
// minute one): a Levee fleet of separate processes at 0.8 C for two minutes
// after the warm-up, every member's resident memory, goroutines and open
// files read each second. None may grow beyond its allowance from the first
// fifth of the span to the last, and the fleet must serve.
func TestSoakNoGrowth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fleet at 0.8 C for about three minutes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	cfg := DefaultConfig()
	cfg.Mode = SoakMode
	cfg.Soak = Soak{Duration: 2 * time.Minute, Load: 0.8}
	cfg.Local.Bin = buildBinaries(ctx, t)
	cfg.Local.Dir = t.TempDir()
	cfg.Fleets = []string{"levee"}
	cfg.Out = t.TempDir()
	cfg.Command = "go test -run TestSoakNoGrowth ./pkg/storm"
	cfg.Logger = quietLogger()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Soak
	t.Logf("served %.2f %% at %.0f/s", 100*r.Served, r.Result.Verdict.Baseline)
	// Every member is watched: etcd, both budgetd replicas, both verifiers
	// and the gateway, for memory and open files at least.
	watched := map[string]int{}
	for _, g := range r.Growth {
		t.Logf("%-4s %-22s early %8.1f late %8.1f allowed ≤ %8.1f", g.Member, g.Metric, g.Early, g.Late, g.Allowed)
		watched[g.Member]++
		if math.IsNaN(g.Early) || g.Early <= 0 && g.Metric != "goroutines" {
			t.Errorf("%s %s: early level %v: not measured", g.Member, g.Metric, g.Early)
		}
		if !g.OK() {
			t.Errorf("%s: %s grew from %.1f to %.1f (allowed %.1f)", g.Member, g.Metric, g.Early, g.Late, g.Allowed)
		}
	}
	for _, m := range []string{"e1", "b1", "b2", "v1", "v2", "gw"} {
		if watched[m] < 2 {
			t.Errorf("member %s: %d metrics watched, want memory and open files at least", m, watched[m])
		}
	}
	for _, u := range r.Unjudged {
		t.Errorf("not judged: %s", u)
	}
	if r.Served < 0.95 {
		t.Errorf("the fleet served %.1f %% of the soak's arrivals: a soak of a fleet that does not serve says nothing", 100*r.Served)
	}
}

// judgeSoak on made-up seconds: steady levels pass; memory that grows, a
// member that restarted, and a member with no late reading fail.
func TestJudgeSoak(t *testing.T) {
	soak := func(cols map[string]func(i int) float64) *SoakResult {
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
		return judgeSoak(r)
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
