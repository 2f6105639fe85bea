package experiment

import (
	"time"

	"github.com/leveehq/levee/lab/observe"
)

// Recovery is judged on windows of this many seconds of arrivals: one second
// of Poisson arrivals at 70/s varies by 12 %, three by 7 %, and the success
// ratio of those arrivals (successes ÷ arrivals) varies far less than either.
const RecoveryWindow = 3

// RecoveredFraction is the share of its baseline a fleet must be back to:
// recovered means the logical requests arriving over a window succeed at 95 %
// of the rate that the baseline's arrivals did.
const RecoveredFraction = 0.95

// Verdict is what one experiment says of the fleet.
type Verdict struct {
	// Baseline is the goodput (logical requests answered with success
	// before their caller's deadline) per second over the baseline window,
	// and BaselineRatio the share of the baseline's arrivals that succeeded.
	Baseline, BaselineRatio float64
	// During is the goodput per second while the trigger was on.
	During float64
	// After is the goodput per second over the last AfterWindow seconds of
	// arrivals, and AfterRatio the share of those arrivals that succeeded;
	// AfterFraction is AfterRatio over BaselineRatio.
	After, AfterRatio, AfterFraction float64
	// Recovered says whether, after the trigger ended, a window of arrivals
	// succeeded at RecoveredFraction of BaselineRatio, and Recovery how long
	// after the trigger's end the first such window began (0 when the
	// trigger's end found the fleet serving). Stuck: the run ended without
	// the fleet coming back. Neither holds when less than one recovery window
	// followed the trigger (Verdict.String says "not judged").
	Recovered bool
	Recovery  time.Duration
	Stuck     bool
	// Wasted counts hashes the verifiers completed after their caller had
	// left (their late_total), over the whole run, and WastedAfter those
	// after the trigger ended; NaN when no verifier metrics were scraped.
	Wasted, WastedAfter float64
	// RetryRatio is retries ÷ first attempts sent by the clients over the
	// whole run.
	RetryRatio float64
	// LatencyP50 and LatencyP99 are of successful logical requests that
	// arrived in the baseline window, arrival to answer.
	LatencyP50, LatencyP99 time.Duration
}

// String is the recovery verdict in a few words.
func (v Verdict) String() string {
	switch {
	case v.Recovered:
		return "recovered in " + v.Recovery.String()
	case v.Stuck:
		return "stuck"
	}
	return "not judged"
}

// Window is a span of seconds of an experiment, [From, To).
type Window struct{ From, To int }

// judge computes the verdict of a series whose baseline, trigger and
// observation spans are given in seconds; afterWindow is how many final
// seconds "after" averages over.
func Judge(s *observe.Series, base, trig, obs Window, afterWindow int) Verdict {
	n := s.Len()
	arrOK, arrEnded := make([]float64, n), make([]float64, n)
	var first, retries float64
	for i := range n {
		x := s.Second(i)
		arrOK[i] = float64(x.ArrivedOK.Load())
		arrEnded[i] = float64(x.ArrivedEnded.Load())
		first += float64(x.First.Load())
		retries += float64(x.Retries.Load())
	}
	goodput := s.Goodput()
	v := verdictOf(goodput, arrOK, arrEnded, base, trig, obs, afterWindow)
	if first > 0 {
		v.RetryRatio = retries / first
	}
	v.LatencyP50 = s.LatencyQuantile(base.From, base.To, 0.5)
	v.LatencyP99 = s.LatencyQuantile(base.From, base.To, 0.99)
	wasted := s.Scraped(observe.ColWasted)
	v.Wasted, v.WastedAfter = observe.SumKnown(wasted, 0, n), observe.SumKnown(wasted, trig.To, n)
	return v
}

// verdictOf is judge on plain per-second counts: goodput by the second a
// logical request ended, and successes and endings by the second it arrived.
func verdictOf(goodput, arrOK, arrEnded []float64, base, trig, obs Window, afterWindow int) Verdict {
	var v Verdict
	v.Baseline = observe.Mean(goodput, base.From, base.To)
	v.BaselineRatio = ratio(arrOK, arrEnded, base.From, base.To)
	v.During = observe.Mean(goodput, trig.From, trig.To)
	last := Window{max(obs.To-afterWindow, obs.From), obs.To}
	v.After = observe.Mean(goodput, last.From, last.To)
	v.AfterRatio = ratio(arrOK, arrEnded, last.From, last.To)
	if v.BaselineRatio > 0 {
		v.AfterFraction = v.AfterRatio / v.BaselineRatio
	}
	want := RecoveredFraction * v.BaselineRatio
	for s := trig.To; s+RecoveryWindow <= obs.To; s++ {
		if r := ratio(arrOK, arrEnded, s, s+RecoveryWindow); v.BaselineRatio > 0 && r >= want {
			v.Recovered = true
			v.Recovery = time.Duration(s-trig.To) * time.Second
			break
		}
	}
	// A run with less than one window after its trigger (an experiment with
	// no trigger and no watch: healthy load only) is not judged either way.
	v.Stuck = !v.Recovered && obs.To-trig.To >= RecoveryWindow
	return v
}

func ratio(num, den []float64, from, to int) float64 {
	from, to = max(from, 0), min(to, len(num), len(den))
	var a, b float64
	for i := from; i < to; i++ {
		a += num[i]
		b += den[i]
	}
	if b == 0 {
		return 0
	}
	return a / b
}
