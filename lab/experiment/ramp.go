package experiment

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Ramp is the triangle of load that shows hysteresis: Hold at Low, up to
// High over Up, back down to Low over Down, Hold at Low again. A fleet
// without a congested state of its own answers the same at a load on the way
// down as it did at that load on the way up.
type Ramp struct {
	Low, High      float64 // fractions of capacity
	Hold, Up, Down time.Duration
}

// DefaultRamp is 0.2 C → 10 C → 0.2 C, a minute each way, 15 s held at
// each end.
func DefaultRamp() Ramp {
	return Ramp{Low: 0.2, High: 10, Hold: 15 * time.Second, Up: time.Minute, Down: time.Minute}
}

// Validate reports every invalid field.
func (r Ramp) Validate() error {
	if !(r.Low > 0 && r.High > r.Low && r.High <= 100) || r.Hold < 5*time.Second || r.Up < time.Second || r.Down < time.Second {
		return fmt.Errorf("experiment: ramp: want 0 < low < high ≤ 100, hold ≥ 5s, up and down ≥ 1s; got %v, %v, %v, %v, %v",
			r.Low, r.High, r.Hold, r.Up, r.Down)
	}
	return nil
}

// profile is the offered load at t, as a fraction of capacity. The ramp is
// geometric (constant ratio per second), so that every decade of load gets
// the same time: a linear ramp would cross the interesting region, around
// 1 C, in a few seconds.
func (r Ramp) profile(t time.Duration) float64 {
	ratio := r.High / r.Low
	switch {
	case t < r.Hold:
		return r.Low
	case t < r.Hold+r.Up:
		return r.Low * math.Pow(ratio, float64(t-r.Hold)/float64(r.Up))
	case t < r.Hold+r.Up+r.Down:
		return r.High * math.Pow(1/ratio, float64(t-r.Hold-r.Up)/float64(r.Down))
	}
	return r.Low
}

// experiment is the ramp as an experiment: the first hold is the baseline,
// the ramp itself the "trigger" span, the last hold what is judged.
func (r Ramp) Spec(template Spec) Spec {
	e := template
	e.Warmup = 0
	e.Baseline = r.Hold
	e.Trigger = Trigger{Kind: RampLoad, Targets: "verifiers", Duration: r.Up + r.Down}
	e.After, e.AfterWindow = r.Hold, r.Hold-2*time.Second
	e.Profile = r.profile
	e.Load = r.Low
	return e
}

// Hysteresis compares, bin by bin of offered load, the goodput on the way
// up with the goodput on the way down.
type Hysteresis struct {
	// Bins are the offered-load bins (fractions of capacity, lower edges),
	// Up and Down the mean goodput (fractions of capacity) in each; NaN
	// where a direction has no second in the bin.
	Bins, Up, Down []float64
	// Gap is the largest Up − Down in a bin at or below 1 C (where a
	// healthy fleet serves everything), and At that bin.
	Gap, At float64
}

// hysteresis bins the ramp's seconds by offered load.
func (ramp Ramp) Hysteresis(r *Result) (Hysteresis, error) {
	if r.Capacity.PerSecond <= 0 {
		return Hysteresis{}, errors.New("experiment: ramp without a capacity")
	}
	offered, goodput := r.Series.Offered(), r.Series.Goodput()
	const perDecade = 6
	lo, hi := math.Log10(ramp.Low), math.Log10(ramp.High)
	n := int(math.Ceil((hi-lo)*perDecade)) + 1
	var h Hysteresis
	upSum, upN, downSum, downN := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	peak := r.Trig.From + int(ramp.Up/time.Second)
	for i := r.Trig.From; i < min(r.Trig.To, len(offered)); i++ {
		// Bin by the load the lab meant to offer this second, not by the
		// Poisson count, which scatters a bin's seconds into its neighbours.
		load := ramp.profile(time.Duration(i)*time.Second + 500*time.Millisecond)
		b := min(max(int((math.Log10(load)-lo)*perDecade), 0), n-1)
		g := goodput[i] / r.Capacity.PerSecond
		if i < peak {
			upSum[b] += g
			upN[b]++
		} else {
			downSum[b] += g
			downN[b]++
		}
	}
	for b := range n {
		h.Bins = append(h.Bins, math.Pow(10, lo+float64(b)/perDecade))
		h.Up = append(h.Up, upSum[b]/upN[b])
		h.Down = append(h.Down, downSum[b]/downN[b])
		if h.Bins[b] <= 1 && upN[b] > 0 && downN[b] > 0 {
			if gap := h.Up[b] - h.Down[b]; gap > h.Gap {
				h.Gap, h.At = gap, h.Bins[b]
			}
		}
	}
	return h, nil
}
