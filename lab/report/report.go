// Package report writes what the lab found as files a reader can check:
// each run's seconds as CSV, a summary CSV with one row per run, plots
// (PNG), and a Markdown report that embeds them and says how it was made.
//
// What it promises: every figure in report.md is computed from the same
// records the CSVs hold, so a reader can recompute any of it; a report of an
// interrupted run says how many of the planned runs it holds.
package report

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/leveehq/levee/lab/drive"
	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/observe"
	"github.com/leveehq/levee/lab/sim"
)

// Kind is what a report of runs holds, which decides its plots and tables.
type Kind string

// The kinds of runs.
const (
	// Single: one experiment against each fleet; each run plotted, the
	// fleets compared and, on a local fleet, each run beside its
	// simulation.
	Single Kind = "run"
	// Grid: a heatmap and a table per fleet and trigger.
	Grid Kind = "grid"
	// Ramp: goodput against offered load on the way up and down.
	Ramp Kind = "ramp"
	// Sim: simulated fleets only.
	Sim Kind = "sim"
)

// Runs is a report of experiment runs and how they were made.
type Runs struct {
	Kind    Kind
	Results []*experiment.Result
	// Planned is the number of runs the experiment asked for; fewer
	// Results means it was interrupted.
	Planned int
	// Command is how the report was made, quoted in report.md.
	Command string
	// Clients are the populations that loaded the fleets.
	Clients experiment.Clients
	// Ramp is the ramp of a Ramp report, Sim the simulated fleet of a Sim
	// report.
	Ramp experiment.Ramp
	Sim  sim.Config
	// Local, when set, is the local fleet a Single report's runs were made
	// on: each real run is then simulated and plotted beside it.
	Local *drive.LocalConfig
}

// runsWriter writes a Runs report and lists the files it wrote.
type runsWriter struct {
	Runs
	Files []string
}

// WriteRuns puts the report's files under dir: a CSV of each run's seconds
// (runs/), summary.csv, a PNG per run and, for several fleets or a grid,
// comparisons, and report.md embedding them. It returns the files written,
// sorted.
func WriteRuns(dir string, r Runs) ([]string, error) {
	w := &runsWriter{Runs: r}
	err := w.write(dir)
	sort.Strings(w.Files)
	return w.Files, err
}

func (rep *runsWriter) write(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	add := func(path string, write func(io.Writer) error) error {
		if err := writeFile(path, write); err != nil {
			return err
		}
		rep.Files = append(rep.Files, path)
		return nil
	}
	plotted, plottedTenants := map[*experiment.Result]string{}, map[*experiment.Result]string{}
	tenanted := false
	for _, r := range rep.Results {
		tenanted = tenanted || len(r.Tenants) > 0
	}
	for _, r := range rep.Results {
		if err := add(filepath.Join(dir, "runs", fileName(r)+".csv"), r.Series.WriteCSV); err != nil {
			return err
		}
		if rep.Kind != Grid && rep.Kind != Sim {
			png := filepath.Join(dir, fileName(r)+".png")
			if err := plotRun(r, png); err != nil {
				return fmt.Errorf("report: plot: %w", err)
			}
			rep.Files = append(rep.Files, png)
			plotted[r] = filepath.Base(png)
			if len(r.Tenants) > 0 {
				tpng := filepath.Join(dir, fileName(r)+"-tenants.png")
				if err := plotTenants(r, tpng); err != nil {
					return fmt.Errorf("report: plot: %w", err)
				}
				rep.Files = append(rep.Files, tpng)
				plottedTenants[r] = filepath.Base(tpng)
			}
			if r.Adversary != nil {
				gpng := filepath.Join(dir, fileName(r)+"-gateway.png")
				if err := plotGateway(r, gpng); err != nil {
					return fmt.Errorf("report: plot: %w", err)
				}
				rep.Files = append(rep.Files, gpng)
			}
		}
	}
	if err := add(filepath.Join(dir, "summary.csv"), func(w io.Writer) error { return writeSummary(w, rep.Results) }); err != nil {
		return err
	}
	if tenanted {
		if err := add(filepath.Join(dir, "summary-tenants.csv"), func(w io.Writer) error { return writeTenantSummary(w, rep.Results) }); err != nil {
			return err
		}
	}

	var md strings.Builder
	fmt.Fprintf(&md, "# Levee lab report\n\n")
	if rep.Command != "" {
		fmt.Fprintf(&md, "Made by `%s`", rep.Command)
	} else {
		fmt.Fprintf(&md, "Made by `levee-lab`")
	}
	fmt.Fprintf(&md, " on %s (%d CPUs, %s/%s, %s).", time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.GOOS,
		runtime.GOARCH, runtime.Version())
	if rep.Kind != Sim {
		fmt.Fprintf(&md, " Every fleet member is a separate process on this machine, and so is the lab that loads them: "+
			"`lab_cpu` in each run's CSV is the load generator's own CPU, in cores.")
	}
	fmt.Fprintf(&md, "\n\n")
	if rep.Planned > len(rep.Results) {
		fmt.Fprintf(&md, "**Interrupted: %d of the %d runs planned completed**; only those are reported.\n\n", len(rep.Results), rep.Planned)
	}
	if rep.Kind == Sim {
		fmt.Fprintf(&md, "Simulated in virtual time, no fleet started: %s.\n\n", describeSim(rep.Sim))
	} else if tenanted {
		fmt.Fprintf(&md, "Clients: per tenant, as the Tenants table says (name:load × C:kind[:cost=N], the load multiplied by the run's), "+
			"each tenant an open-loop Poisson process naming itself in levee-tenant; %s. ", describeKinds(rep.Clients))
	} else {
		fmt.Fprintf(&md, "Clients: %s. ", describeClients(rep.Clients))
	}
	fmt.Fprintf(&md, "A verdict compares the share of arriving logical requests that succeed with the baseline's; "+
		"*recovered* means a %d-second window of arrivals after the trigger succeeded at %.0f %% of the baseline's share, "+
		"*stuck* that none did by the end of the run; *after* is goodput over the last %v of arrivals relative to the baseline; "+
		"*wasted* counts hashes the verifiers finished after their caller had left (docs/lab.md).\n\n",
		experiment.RecoveryWindow, 100*experiment.RecoveredFraction, afterWindowOf(rep.Results))

	switch rep.Kind {
	case Grid:
		if err := rep.writeGrid(&md, dir); err != nil {
			return err
		}
		writeTenantTable(&md, rep.Results)
	case Sim:
		if err := rep.writeSim(&md, dir, rep.Sim); err != nil {
			return err
		}
	case Ramp:
		if err := rep.writeRamp(&md, dir, rep.Ramp); err != nil {
			return err
		}
		fallthrough
	default:
		writeTable(&md, rep.Results)
		writeTenantTable(&md, rep.Results)
		if len(rep.Results) > 1 && rep.Kind != Ramp && !tenanted {
			png := filepath.Join(dir, "compare.png")
			e := rep.Results[0].Spec
			if err := plotCompare(rep.Results, fmt.Sprintf("%s at %.2f C: goodput relative to each fleet's baseline", e.Trigger, e.Load), png); err != nil {
				return fmt.Errorf("report: plot: %w", err)
			}
			rep.Files = append(rep.Files, png)
			fmt.Fprintf(&md, "\n![goodput of each fleet relative to its baseline](compare.png)\n")
		}
		if rep.Kind == Single && !tenanted {
			if err := rep.writeSimVsReal(&md, dir); err != nil {
				return err
			}
		}
		for _, r := range rep.Results {
			if png, ok := plotted[r]; ok {
				fmt.Fprintf(&md, "\n![%s](%s)\n", fileName(r), png)
			}
			if png, ok := plottedTenants[r]; ok {
				fmt.Fprintf(&md, "\n![%s, by tenant](%s)\n", fileName(r), png)
			}
		}
	}
	if err := add(filepath.Join(dir, "report.md"), func(w io.Writer) error { _, err := io.WriteString(w, md.String()); return err }); err != nil {
		return err
	}
	return nil
}

func describeClients(c experiment.Clients) string {
	var parts []string
	for _, k := range experiment.Kinds {
		if s := c.Mix[k]; s > 0 {
			parts = append(parts, fmt.Sprintf("%s × %.2g", describeKind(c, k), s))
		}
	}
	return strings.Join(parts, ", ") + "; open-loop Poisson arrivals"
}

// describeKinds describes every client kind a tenant may have.
func describeKinds(c experiment.Clients) string {
	var parts []string
	for _, k := range experiment.Kinds {
		parts = append(parts, describeKind(c, k))
	}
	return strings.Join(parts, ", ")
}

func describeKind(c experiment.Clients, k experiment.Kind) string {
	switch k {
	case experiment.Naive:
		return fmt.Sprintf("naive (%d attempts of %v each, retried at once on any error)", c.Naive.Attempts, c.Naive.Timeout)
	case experiment.Levee:
		return fmt.Sprintf("levee (pkg/client: %v per call, ≤ %d attempts, fleet budget from %d processes)", c.Levee.Deadline, c.Levee.MaxAttempts, c.Levee.Processes)
	case experiment.Human:
		return fmt.Sprintf("human (%d tries, %v patience, %v between)", c.Human.Tries, c.Human.Patience, c.Human.Think)
	case experiment.NoDeadline:
		return fmt.Sprintf("no deadline (given up after %v)", c.NoDeadline.Cap)
	}
	return string(k)
}

func writeTable(md *strings.Builder, rs []*experiment.Result) {
	fmt.Fprintf(md, "| fleet | trigger | load | C | baseline | during | after | verdict | wasted | retries/first | p50 / p99 | unloaded p50 / p99 |\n")
	fmt.Fprintf(md, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		v := r.Verdict
		verdict := v.String()
		if v.Stuck {
			verdict = "**stuck**"
		}
		fmt.Fprintf(md, "| %s | %s | %.2f C | %.0f/s | %.0f/s (%.1f %% ok) | %.0f/s | %.0f/s (%.0f %% of baseline) | %s | %s | %.2f | %v / %v | %v / %v |\n",
			r.Fleet, r.Spec.Trigger, r.Spec.Load, r.Capacity.PerSecond, v.Baseline, 100*v.BaselineRatio, v.During,
			v.After, 100*v.AfterFraction, verdict, fmtCount(v.Wasted), v.RetryRatio, v.LatencyP50.Round(100*time.Microsecond), v.LatencyP99.Round(100*time.Microsecond),
			r.Capacity.UnloadedP50.Round(100*time.Microsecond), r.Capacity.UnloadedP99.Round(100*time.Microsecond))
	}
}

func fmtCount(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.0f", v)
}

// writeGrid writes a heatmap and a recovery table per fleet and trigger.
func (rep *runsWriter) writeGrid(md *strings.Builder, dir string) error {
	type key struct{ fleet, trigger string }
	groups := map[key][]*experiment.Result{}
	var keys []key
	for _, r := range rep.Results {
		k := key{r.Fleet, string(r.Spec.Trigger.Kind) + " " + r.Spec.Trigger.Targets}
		if r.Variant != "" {
			k.fleet += " (" + r.Variant + ")"
		}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	for _, k := range keys {
		rs := groups[k]
		name := fmt.Sprintf("heatmap-%s-%s", strings.NewReplacer(" (", "-", ")", "", " ", "-").Replace(k.fleet), strings.ReplaceAll(k.trigger, " ", "-"))
		png := filepath.Join(dir, name+".png")
		title := fmt.Sprintf("%s fleet, %s: recovery after the trigger ends", k.fleet, k.trigger)
		if err := plotHeatmap(rs, title, png); err != nil {
			return fmt.Errorf("report: plot: %w", err)
		}
		rep.Files = append(rep.Files, png)
		fmt.Fprintf(md, "\n## %s fleet, %s\n\n![%s](%s.png)\n\n", k.fleet, k.trigger, title, name)
		durations, loads, cells := gridCells(rs)
		fmt.Fprintf(md, "| load \\ duration |")
		for _, d := range durations {
			fmt.Fprintf(md, " %v |", d)
		}
		fmt.Fprintf(md, "\n|---|")
		for range durations {
			fmt.Fprintf(md, "---|")
		}
		fmt.Fprintf(md, "\n")
		for j := len(loads) - 1; j >= 0; j-- {
			fmt.Fprintf(md, "| %.2f C |", loads[j])
			for i := range durations {
				c, ok := cells[[2]int{i, j}]
				switch {
				case !ok:
					fmt.Fprintf(md, " – |")
				case c.stuck > 0:
					fmt.Fprintf(md, " **stuck %d/%d** (%.0f %%) |", c.stuck, c.runs, 100*c.after)
				default:
					fmt.Fprintf(md, " %v |", c.worst)
				}
			}
			fmt.Fprintf(md, "\n")
		}
	}
	return nil
}

// writeRamp plots the ramp's loops and tabulates their gaps.
func (rep *runsWriter) writeRamp(md *strings.Builder, dir string, ramp experiment.Ramp) error {
	png := filepath.Join(dir, "ramp.png")
	if err := plotRamp(rep.Results, ramp, png); err != nil {
		return fmt.Errorf("report: plot: %w", err)
	}
	rep.Files = append(rep.Files, png)
	fmt.Fprintf(md, "![goodput against offered load on the way up and down](ramp.png)\n\n")
	fmt.Fprintf(md, "| fleet | largest gap, up − down, at ≤ 1 C | at offered | goodput at the end (× baseline) |\n|---|---|---|---|\n")
	for _, r := range rep.Results {
		h, err := ramp.Hysteresis(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(md, "| %s | %.2f C | %.2f C | %.2f |\n", r.Fleet, h.Gap, h.At, r.Verdict.AfterFraction)
	}
	fmt.Fprintf(md, "\n")
	return nil
}

func afterWindowOf(rs []*experiment.Result) time.Duration {
	if len(rs) == 0 {
		return 0
	}
	return rs[0].Spec.AfterWindow
}

func describeSim(c sim.Config) string {
	return fmt.Sprintf("C = %.0f/s (%d verifiers × %d workers × %v), offered %.0f/s (%.2f C) from %d client processes, "+
		"naive clients (%d attempts of %v, at once), every verifier stalled for %v; budgets: ratio %.2g, %.3g retries/s minimum "+
		"(per process, or once for the fleet), burst %g per process or %g for the fleet; admission, budget ledger and breakers "+
		"are Levee's own code (pkg/admission, pkg/budgetd's Ledger, pkg/breaker) on a virtual clock",
		c.Capacity(), c.Verifiers, c.Workers, c.Service, c.Load*c.Capacity(), c.Load, c.Processes, c.Attempts, c.Timeout,
		c.TriggerDuration, c.Ratio, c.MinPerSecond, sim.FullScale(false, sim.ProcessBudget).Burst, sim.FullScale(false, sim.FleetBudget).Burst)
}

var budgetColors = map[sim.BudgetMode]color.Color{
	sim.NoBudget:      color.RGBA{200, 40, 40, 255},
	sim.ProcessBudget: color.RGBA{230, 140, 30, 255},
	sim.FleetBudget:   color.RGBA{30, 140, 60, 255},
}

// writeSim plots the simulated fleets' goodput and attempts.
func (rep *runsWriter) writeSim(md *strings.Builder, dir string, c sim.Config) error {
	writeTable(md, rep.Results)
	var good, att []line
	for _, r := range rep.Results {
		guarded := strings.HasPrefix(r.Fleet, "sim-levee")
		b := sim.BudgetMode(r.Fleet[strings.LastIndexByte(r.Fleet, '-')+1:])
		if l, ok := goodputLine(r, r.Fleet, budgetColors[b], guarded); ok {
			good = append(good, l)
		}
		a := r.Series.Attempts()
		att = append(att, line{name: r.Fleet, ys: a[:min(r.Obs.To, len(a))], scale: 1, color: budgetColors[b], dashed: guarded})
	}
	if len(rep.Results) == 0 {
		return nil
	}
	trig := rep.Results[0].Trig
	for _, p := range []struct {
		file, title, ylabel string
		lines               []line
		top, ref            float64
	}{
		{"sim-goodput.png", "simulated: goodput relative to baseline (solid plain, dashed Levee)", "goodput ÷ baseline", good, 1.5, 0},
		{"sim-attempts.png", "simulated: attempts per second, against capacity C", "attempts per second", att, 0, c.Capacity()},
	} {
		if err := plotLines(p.title, p.ylabel, p.lines, trig, p.top, p.ref, "capacity C", filepath.Join(dir, p.file)); err != nil {
			return fmt.Errorf("report: plot: %w", err)
		}
		rep.Files = append(rep.Files, filepath.Join(dir, p.file))
		fmt.Fprintf(md, "\n![%s](%s)\n", p.title, p.file)
	}
	fmt.Fprintf(md, "\nThe load each fleet settles at once the stall is over (L = A(1 + p + p²) of the naive clients: %.0f/s "+
		"when every attempt fails), and at the end:\n\n| fleet | attempts/s, 10–40 s after the stall | × C | attempts/s over the last %v | × C |\n|---|---|---|---|---|\n",
		c.Load*c.Capacity()*float64(c.Attempts), rep.Results[0].Spec.AfterWindow)
	for _, r := range rep.Results {
		att := r.Series.Attempts()
		early := observe.Mean(att, r.Trig.To+10, r.Trig.To+40)
		late := observe.Mean(att, r.Obs.To-int(r.Spec.AfterWindow/time.Second), r.Obs.To)
		fmt.Fprintf(md, "| %s | %.0f | %.2f | %.0f | %.2f |\n", r.Fleet, early, early/r.Capacity.PerSecond, late, late/r.Capacity.PerSecond)
	}
	return nil
}

// writeSimVsReal simulates each real run and plots both.
func (rep *runsWriter) writeSimVsReal(md *strings.Builder, dir string) error {
	if rep.Local == nil {
		return nil
	}
	var ls []line
	var trig experiment.Window
	for _, r := range rep.Results {
		sc, ok := sim.Like(r, *rep.Local, rep.Clients)
		if !ok {
			continue
		}
		simulated, err := sim.Run(sc)
		if err != nil {
			return err
		}
		if l, ok := goodputLine(r, r.Fleet+" (real)", fleetColor(r.Fleet), false); ok {
			ls = append(ls, l)
		}
		if l, ok := goodputLine(simulated, r.Fleet+" (simulated)", fleetColor(r.Fleet), true); ok {
			ls = append(ls, l)
		}
		trig = r.Trig
	}
	if len(ls) == 0 {
		return nil
	}
	png := filepath.Join(dir, "sim-vs-real.png")
	if err := plotLines("real runs (solid) beside their simulation (dashed)", "goodput ÷ baseline", ls, trig, 1.5, 0, "", png); err != nil {
		return fmt.Errorf("report: plot: %w", err)
	}
	rep.Files = append(rep.Files, png)
	fmt.Fprintf(md, "\n![real runs beside their simulation](sim-vs-real.png)\n\nThe simulation runs the same fleet shape, "+
		"capacity, load and trigger in virtual time with Levee's own admission, breaker and ledger code; it models Levee's "+
		"design, not its bugs, so where the real Levee line falls below the simulated one a control loop misbehaves.\n")
	return nil
}

// fileName names a result's files: fleet, trigger, duration, load, seed.
func fileName(r *experiment.Result) string {
	e := r.Spec
	name := fmt.Sprintf("%s-%s-%ds-load%03.0f-seed%d", r.Fleet, e.Trigger.Kind, int(e.TriggerDuration()/time.Second), 100*e.Load, e.Seed)
	if len(r.Tenants) > 0 {
		name += "-" + tenantsLabel(r)
	}
	if r.Variant != "" {
		name += "-" + variantLabel(r.Variant)
	}
	return name
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("report: %s: %w", path, err)
	}
	return nil
}
