package storm

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/leveehq/levee/lab/observe"
)

// Grid is the lab's proof: every trigger × duration × load × seed, against
// each fleet, each cell on a freshly started fleet so that no cell inherits
// another's state.
type Grid struct {
	Triggers  []Trigger // kinds and targets; durations come from Durations
	Durations []time.Duration
	Loads     []float64 // fractions of capacity
	Seeds     int
}

// DefaultGrid is the grid: stop, CPU cut and capacity knob ×
// {1, 3, 5, 10, 20, 30, 60} s × {0.5, 0.7, 0.9} C × 2 seeds.
func DefaultGrid() Grid {
	base := DefaultTrigger()
	var ts []Trigger
	for _, k := range []TriggerKind{Stop, CPU, Knob} {
		t := base
		t.Kind = k
		ts = append(ts, t)
	}
	var ds []time.Duration
	for _, s := range []int{1, 3, 5, 10, 20, 30, 60} {
		ds = append(ds, time.Duration(s)*time.Second)
	}
	return Grid{Triggers: ts, Durations: ds, Loads: []float64{0.5, 0.7, 0.9}, Seeds: 2}
}

// Validate reports every invalid field.
func (g Grid) Validate() error {
	var errs []error
	if len(g.Triggers) == 0 || len(g.Durations) == 0 || len(g.Loads) == 0 {
		errs = append(errs, errors.New("storm: grid: want at least one trigger, duration and load"))
	}
	for _, d := range g.Durations {
		if d <= 0 || d > time.Hour {
			errs = append(errs, fmt.Errorf("storm: grid: durations must be in (0, 1h], got %v", d))
		}
	}
	for _, l := range g.Loads {
		if !(l > 0 && l <= 100) {
			errs = append(errs, fmt.Errorf("storm: grid: loads must be in (0, 100], got %v", l))
		}
	}
	if g.Seeds < 1 || g.Seeds > 100 {
		errs = append(errs, fmt.Errorf("storm: grid: seeds must be in [1, 100], got %d", g.Seeds))
	}
	return errors.Join(errs...)
}

// cells expands the grid over the template experiment, seeds innermost so
// that a cell's seeds run together.
func (g Grid) cells(template Experiment) []Experiment {
	var out []Experiment
	for _, t := range g.Triggers {
		for _, d := range g.Durations {
			for _, l := range g.Loads {
				for s := range g.Seeds {
					e := template
					e.Trigger = t
					e.Trigger.Duration = d
					e.Load = l
					e.Seed = template.Seed + uint64(s)
					out = append(out, e)
				}
			}
		}
	}
	return out
}

var summaryHeader = []string{"fleet", "trigger", "targets", "duration_s", "load", "seed", "capacity_per_s",
	"baseline_per_s", "baseline_success_ratio", "during_per_s", "after_per_s", "after_success_ratio", "after_fraction",
	"recovered", "recovery_s", "stuck", "wasted_hashes", "wasted_after_trigger", "retry_ratio",
	"latency_p50_ms", "latency_p99_ms", "unloaded_p50_ms", "unloaded_p99_ms", "healthy_p99_bound_ms", "healthy_p99_ok",
	"lab_cpu_cores", "host_cpu_cores", "other_cpu_cores"}

// writeSummary writes one row per result.
func writeSummary(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(summaryHeader); err != nil {
		return err
	}
	f := func(v float64, prec int) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', prec, 64)
	}
	for _, r := range results {
		e, v, c := r.Experiment, r.Verdict, r.Capacity
		healthyOK := ""
		if c.HealthyP99Bound() > 0 && v.LatencyP99 > 0 {
			healthyOK = strconv.FormatBool(v.LatencyP99 <= c.HealthyP99Bound())
		}
		rec := ""
		if v.Recovered {
			rec = f(v.Recovery.Seconds(), 0)
		}
		row := []string{r.Fleet, string(e.Trigger.Kind), e.Trigger.Targets, f(e.triggerDuration().Seconds(), 0),
			f(e.Load, 2), strconv.FormatUint(e.Seed, 10), f(r.Capacity.PerSecond, 1),
			f(v.Baseline, 1), f(v.BaselineRatio, 4), f(v.During, 1), f(v.After, 1), f(v.AfterRatio, 4), f(v.AfterFraction, 4),
			strconv.FormatBool(v.Recovered), rec, strconv.FormatBool(v.Stuck), f(v.Wasted, 0), f(v.WastedAfter, 0),
			f(v.RetryRatio, 3), f(float64(v.LatencyP50)/1e6, 1), f(float64(v.LatencyP99)/1e6, 1),
			f(float64(c.UnloadedP50)/1e6, 1), f(float64(c.UnloadedP99)/1e6, 1), f(float64(c.HealthyP99Bound())/1e6, 1), healthyOK,
			f(observe.MeanKnown(r.Series.Scraped(observe.ColLabCPU), 0, r.Obs.to), 2),
			f(observe.MeanKnown(r.Series.Scraped(observe.ColHostCPU), 0, r.Obs.to), 2), f(observe.MeanKnown(r.Series.OtherCPU(), 0, r.Obs.to), 2)}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
