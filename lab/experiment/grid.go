package experiment

import (
	"errors"
	"fmt"
	"time"
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

// DefaultGrid is the full grid: stop, CPU cut and capacity knob ×
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
		errs = append(errs, errors.New("experiment: grid: want at least one trigger, duration and load"))
	}
	for _, d := range g.Durations {
		if d <= 0 || d > time.Hour {
			errs = append(errs, fmt.Errorf("experiment: grid: durations must be in (0, 1h], got %v", d))
		}
	}
	for _, l := range g.Loads {
		if !(l > 0 && l <= 100) {
			errs = append(errs, fmt.Errorf("experiment: grid: loads must be in (0, 100], got %v", l))
		}
	}
	if g.Seeds < 1 || g.Seeds > 100 {
		errs = append(errs, fmt.Errorf("experiment: grid: seeds must be in [1, 100], got %d", g.Seeds))
	}
	return errors.Join(errs...)
}

// cells expands the grid over the template experiment, seeds innermost so
// that a cell's seeds run together.
func (g Grid) Cells(template Spec) []Spec {
	var out []Spec
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
