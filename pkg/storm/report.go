package storm

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// write puts the report's files under dir: a CSV of each run's seconds
// (runs/), summary.csv, a PNG per run and, for several fleets or a grid,
// comparisons, and report.md embedding them.
func (rep *Report) write(dir string, cfg Config) error {
	if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o755); err != nil {
		return fmt.Errorf("storm: report: %w", err)
	}
	add := func(path string, write func(io.Writer) error) error {
		if err := writeFile(path, write); err != nil {
			return err
		}
		rep.Files = append(rep.Files, path)
		return nil
	}
	plotted := map[*Result]string{}
	for _, r := range rep.Results {
		if err := add(filepath.Join(dir, "runs", r.fileName()+".csv"), r.Series.WriteCSV); err != nil {
			return err
		}
		if cfg.Mode != GridMode {
			png := filepath.Join(dir, r.fileName()+".png")
			if err := plotRun(r, png); err != nil {
				return fmt.Errorf("storm: plot: %w", err)
			}
			rep.Files = append(rep.Files, png)
			plotted[r] = filepath.Base(png)
		}
	}
	if err := add(filepath.Join(dir, "summary.csv"), func(w io.Writer) error { return writeSummary(w, rep.Results) }); err != nil {
		return err
	}

	var md strings.Builder
	fmt.Fprintf(&md, "# Levee lab report\n\n")
	if cfg.Command != "" {
		fmt.Fprintf(&md, "Made by `%s`", cfg.Command)
	} else {
		fmt.Fprintf(&md, "Made by `levee storm`")
	}
	fmt.Fprintf(&md, " on %s (%d CPUs, %s/%s, %s). Every fleet member is a separate process on this machine, and so is the "+
		"lab that loads them: `lab_cpu` in each run's CSV is the load generator's own CPU, in cores.\n\n",
		time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(&md, "Clients: %s. A verdict compares the share of arriving logical requests that succeed with the baseline's; "+
		"*recovered* means a %d-second window of arrivals after the trigger succeeded at %.0f %% of the baseline's share, "+
		"*stuck* that none did by the end of the run; *after* is goodput over the last %v of arrivals relative to the baseline; "+
		"*wasted* counts hashes the verifiers finished after their caller had left (docs/lab.md).\n\n",
		describeClients(cfg.Clients), recoveryWindow, 100*RecoveredFraction, cfg.Experiment.AfterWindow)

	switch cfg.Mode {
	case GridMode:
		if err := rep.writeGrid(&md, dir); err != nil {
			return err
		}
	default:
		writeTable(&md, rep.Results)
		if len(rep.Results) > 1 {
			png := filepath.Join(dir, "compare.png")
			e := rep.Results[0].Experiment
			if err := plotCompare(rep.Results, fmt.Sprintf("%s at %.2f C: goodput relative to each fleet's baseline", e.Trigger, e.Load), png); err != nil {
				return fmt.Errorf("storm: plot: %w", err)
			}
			rep.Files = append(rep.Files, png)
			fmt.Fprintf(&md, "\n![goodput of each fleet relative to its baseline](compare.png)\n")
		}
		for _, r := range rep.Results {
			if png, ok := plotted[r]; ok {
				fmt.Fprintf(&md, "\n![%s](%s)\n", r.fileName(), png)
			}
		}
	}
	if err := add(filepath.Join(dir, "report.md"), func(w io.Writer) error { _, err := io.WriteString(w, md.String()); return err }); err != nil {
		return err
	}
	sort.Strings(rep.Files)
	return nil
}

func describeClients(c Clients) string {
	var parts []string
	for _, k := range kinds {
		s := c.Mix[k]
		if s <= 0 {
			continue
		}
		var d string
		switch k {
		case Naive:
			d = fmt.Sprintf("naive (%d attempts of %v each, retried at once on any error)", c.Naive.Attempts, c.Naive.Timeout)
		case Levee:
			d = fmt.Sprintf("levee (pkg/client: %v per call, ≤ %d attempts, fleet budget from %d processes)", c.Levee.Deadline, c.Levee.MaxAttempts, c.Levee.Processes)
		case Human:
			d = fmt.Sprintf("human (%d tries, %v patience, %v between)", c.Human.Tries, c.Human.Patience, c.Human.Think)
		case NoDeadline:
			d = fmt.Sprintf("no deadline (given up after %v)", c.NoDeadline.Cap)
		}
		parts = append(parts, fmt.Sprintf("%s × %.2g", d, s))
	}
	return strings.Join(parts, ", ") + "; open-loop Poisson arrivals"
}

func writeTable(md *strings.Builder, rs []*Result) {
	fmt.Fprintf(md, "| fleet | trigger | load | C | baseline | during | after | verdict | wasted | retries/first | p50 / p99 |\n")
	fmt.Fprintf(md, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		v := r.Verdict
		verdict := "**stuck**"
		if v.Recovered {
			verdict = "recovered in " + v.Recovery.String()
		}
		fmt.Fprintf(md, "| %s | %s | %.2f C | %.0f/s | %.0f/s (%.1f %% ok) | %.0f/s | %.0f/s (%.0f %% of baseline) | %s | %s | %.2f | %v / %v |\n",
			r.Fleet, r.Experiment.Trigger, r.Experiment.Load, r.Capacity, v.Baseline, 100*v.BaselineRatio, v.During,
			v.After, 100*v.AfterFraction, verdict, fmtCount(v.Wasted), v.RetryRatio, v.LatencyP50.Round(100*time.Microsecond), v.LatencyP99.Round(100*time.Microsecond))
	}
}

func fmtCount(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.0f", v)
}

// writeGrid writes a heatmap and a recovery table per fleet and trigger.
func (rep *Report) writeGrid(md *strings.Builder, dir string) error {
	type key struct{ fleet, trigger string }
	groups := map[key][]*Result{}
	var keys []key
	for _, r := range rep.Results {
		k := key{r.Fleet, string(r.Experiment.Trigger.Kind) + " " + r.Experiment.Trigger.Targets}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], r)
	}
	for _, k := range keys {
		rs := groups[k]
		name := fmt.Sprintf("heatmap-%s-%s", k.fleet, strings.ReplaceAll(k.trigger, " ", "-"))
		png := filepath.Join(dir, name+".png")
		title := fmt.Sprintf("%s fleet, %s: recovery after the trigger ends", k.fleet, k.trigger)
		if err := plotHeatmap(rs, title, png); err != nil {
			return fmt.Errorf("storm: plot: %w", err)
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
