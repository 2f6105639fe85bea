package report

import (
	"encoding/csv"
	"io"
	"math"
	"strconv"

	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/observe"
)

var summaryHeader = []string{"fleet", "trigger", "targets", "duration_s", "load", "seed", "capacity_per_s",
	"baseline_per_s", "baseline_success_ratio", "during_per_s", "after_per_s", "after_success_ratio", "after_fraction",
	"recovered", "recovery_s", "stuck", "wasted_hashes", "wasted_after_trigger", "retry_ratio",
	"latency_p50_ms", "latency_p99_ms", "unloaded_p50_ms", "unloaded_p99_ms", "healthy_p99_bound_ms", "healthy_p99_ok",
	"lab_cpu_cores", "host_cpu_cores", "other_cpu_cores"}

// writeSummary writes one row per result.
func writeSummary(w io.Writer, results []*experiment.Result) error {
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
		e, v, c := r.Spec, r.Verdict, r.Capacity
		healthyOK := ""
		if c.HealthyP99Bound() > 0 && v.LatencyP99 > 0 {
			healthyOK = strconv.FormatBool(v.LatencyP99 <= c.HealthyP99Bound())
		}
		rec := ""
		if v.Recovered {
			rec = f(v.Recovery.Seconds(), 0)
		}
		row := []string{r.Fleet, string(e.Trigger.Kind), e.Trigger.Targets, f(e.TriggerDuration().Seconds(), 0),
			f(e.Load, 2), strconv.FormatUint(e.Seed, 10), f(r.Capacity.PerSecond, 1),
			f(v.Baseline, 1), f(v.BaselineRatio, 4), f(v.During, 1), f(v.After, 1), f(v.AfterRatio, 4), f(v.AfterFraction, 4),
			strconv.FormatBool(v.Recovered), rec, strconv.FormatBool(v.Stuck), f(v.Wasted, 0), f(v.WastedAfter, 0),
			f(v.RetryRatio, 3), f(float64(v.LatencyP50)/1e6, 1), f(float64(v.LatencyP99)/1e6, 1),
			f(float64(c.UnloadedP50)/1e6, 1), f(float64(c.UnloadedP99)/1e6, 1), f(float64(c.HealthyP99Bound())/1e6, 1), healthyOK,
			f(observe.MeanKnown(r.Series.Scraped(observe.ColLabCPU), 0, r.Obs.To), 2),
			f(observe.MeanKnown(r.Series.Scraped(observe.ColHostCPU), 0, r.Obs.To), 2), f(observe.MeanKnown(r.Series.OtherCPU(), 0, r.Obs.To), 2)}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
