package lab

import (
	"context"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/lab/drive"
)

func TestMain(m *testing.M) {
	// The lab's tests drive fleets at capacity: they run alone (see testlock).
	testlock.Exclusive()
	goleak.VerifyTestMain(m)
}

func quietLogger() *slog.Logger {
	if os.Getenv("LEVEE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// buildBinaries builds the fleet's programs from this source tree.
func buildBinaries(ctx context.Context, t *testing.T) drive.Binaries {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := drive.ModuleRoot(wd)
	if root == "" {
		t.Fatalf("no Levee source tree above %s", wd)
	}
	bin, err := drive.BuildBinaries(ctx, root, filepath.Join(t.TempDir(), "bin"))
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestLabControlStuckLeveeRecovers is the lab in one experiment, on real
// processes: the control fleet (the same binaries, -unguarded) and the Levee
// fleet, each loaded at 0.7 of its measured capacity by naive clients
// (three immediate attempts, 2 s timeout) while every verifier is
// SIGSTOPped for 10 s. The control must be healthy before the trigger and
// stuck after it, to the end of the run: 3 attempts × 0.7 C is more than C
// once every attempt times out, so a plain FIFO server can never drain, even
// when the closed-loop measurement reads C a third low on two busy cores.
// That is what proves the lab sees what it looks for. Levee must be healthy
// before the trigger too, and recover within 2 s of its end (docs/lab.md
// has the history of both bounds).
//
// Everything is judged by counting logical requests, not by timing one.
func TestLabControlStuckLeveeRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two fleets of real processes for about two minutes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	cfg := DefaultConfig()
	cfg.Local.Bin = buildBinaries(ctx, t)
	cfg.Local.Dir = t.TempDir()
	cfg.Out = t.TempDir()
	cfg.Fleets = []string{"control", "levee"}
	cfg.Experiment.Load = 0.7
	cfg.Experiment.Warmup, cfg.Experiment.Baseline = 3*time.Second, 10*time.Second
	cfg.Experiment.Trigger.Duration = 10 * time.Second
	cfg.Experiment.After, cfg.Experiment.AfterWindow = 20*time.Second, 8*time.Second
	cfg.Logger = quietLogger()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want 2", len(rep.Results))
	}
	for _, r := range rep.Results {
		t.Logf("%s", r.Line())
		if c := r.Capacity; c.UnloadedP50 <= 0 || c.UnloadedP99 < c.UnloadedP50 || c.HealthyP99Bound() <= c.UnloadedP99 {
			t.Errorf("%s: unloaded p50 %v, p99 %v, healthy p99 bound %v: the unloaded reference was not measured",
				r.Fleet, c.UnloadedP50, c.UnloadedP99, c.HealthyP99Bound())
		}
		// The lab's own books: every arrival was sent or dropped, and every
		// one sent ended; no answer was wrong.
		var offered, ended, dropped, wrong int64
		for i := range r.Series.Len() {
			x := r.Series.Second(i)
			offered += x.Offered.Load()
			ended += x.ArrivedEnded.Load()
			dropped += x.Dropped.Load()
			wrong += x.Wrong.Load()
		}
		if offered == 0 || ended+dropped != offered || wrong != 0 {
			t.Errorf("%s: offered %d, ended %d, dropped %d, wrong answers %d: the lab lost track of requests", r.Fleet, offered, ended, dropped, wrong)
		}
	}
	control, levee := rep.Results[0], rep.Results[1]
	if control.Fleet != "control" || levee.Fleet != "levee" {
		t.Fatalf("results of %s and %s, want control then levee", control.Fleet, levee.Fleet)
	}
	v := control.Verdict
	if v.BaselineRatio < 0.9 {
		t.Fatalf("the control served only %.1f %% of its baseline at 0.7 C: it must be healthy before the trigger for its failure to mean anything",
			100*v.BaselineRatio)
	}
	if !v.Stuck || v.AfterFraction > 0.2 {
		t.Errorf("the control was not stuck after the stall (recovered %v in %v, goodput %.1f %% of baseline over the last %v): "+
			"the lab cannot see the failure it looks for", v.Recovered, v.Recovery, 100*v.AfterFraction, cfg.Experiment.AfterWindow)
	}
	if !(v.WastedAfter > 0) {
		t.Errorf("the control wasted %v hashes after the trigger; a stuck plain server hashes for callers who left", v.WastedAfter)
	}
	lv := levee.Verdict
	if lv.BaselineRatio < 0.95 {
		t.Errorf("Levee answered %.1f %% of its requests at 0.7 C before the trigger, want ≥ 95 %%", 100*lv.BaselineRatio)
	}
	if !lv.Recovered || lv.Recovery > 2*time.Second {
		t.Errorf("Levee did not recover within 2 s of the stall's end (recovered %v in %v, goodput %.1f %% of baseline over the last %v)",
			lv.Recovered, lv.Recovery, 100*lv.AfterFraction, cfg.Experiment.AfterWindow)
	}
	for _, name := range []string{"report.md", "summary.csv", "compare.png"} {
		if _, err := os.Stat(filepath.Join(cfg.Out, name)); err != nil {
			t.Errorf("report: %v", err)
		}
	}
}

// TestSoakNoGrowth is the soak's short version (docs/faults.md has the 30
// minute one): a Levee fleet of separate processes at 0.8 C for 90 s
// after the warm-up, every member's resident memory, goroutines and open
// files read each second. None may grow beyond its allowance from the first
// fifth of the span to the last, and the fleet must serve.
func TestSoakNoGrowth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fleet at 0.8 C for about two minutes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	cfg := DefaultConfig()
	cfg.Mode = SoakMode
	cfg.Soak.Duration, cfg.Soak.Load = 90*time.Second, 0.8
	cfg.Local.Bin = buildBinaries(ctx, t)
	cfg.Local.Dir = t.TempDir()
	cfg.Fleets = []string{"levee"}
	cfg.Out = t.TempDir()
	cfg.Command = "go test -run TestSoakNoGrowth github.com/leveehq/levee/lab"
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
		t.Logf("%-4s %-36s early %8.1f late %8.1f allowed ≤ %8.1f", g.Member, g.Metric, g.Early, g.Late, g.Allowed)
		watched[g.Member]++
		if math.IsNaN(g.Early) || g.Early <= 0 {
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
