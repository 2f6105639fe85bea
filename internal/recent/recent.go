// Package recent keeps a few recent measurements, each weighted by the work
// it stood for, and answers their weighted median. It is what Levee's
// estimates learn from when the traffic they learn from is chosen by
// callers: a measurement counts by its weight, so a flood of light ones
// cannot outvote a few heavy ones, and they cannot push the heavy ones out
// either, since a new one displaces a stale one, else the lightest.
package recent

import (
	"cmp"
	"slices"
	"time"
)

// Capacity is how many measurements a Samples keeps.
const Capacity = 16

// Samples holds at most Capacity measurements no older than its window. The
// zero Samples is not usable; create one with New. It is not safe for
// concurrent use.
type Samples struct {
	window time.Duration
	s      [Capacity]sample
	n      int
	next   uint64 // seq of the next sample
}

type sample struct {
	value, weight float64
	at            time.Time
	seq           uint64 // order of arrival
}

// New returns an empty Samples whose measurements count for window.
func New(window time.Duration) Samples { return Samples{window: window} }

// Add keeps value with weight (> 0; others are ignored), measured at now:
// in a free place, else over one older than the window (the oldest), else
// over the lightest (the oldest of those).
func (r *Samples) Add(value, weight float64, now time.Time) {
	if !(weight > 0) {
		return
	}
	x := sample{value: value, weight: weight, at: now, seq: r.next}
	r.next++
	if r.n < Capacity {
		r.s[r.n] = x
		r.n++
		return
	}
	at := -1
	for i := range r.n {
		if r.stale(r.s[i], now) && (at < 0 || r.s[i].seq < r.s[at].seq) {
			at = i
		}
	}
	if at < 0 {
		for i := range r.n {
			if at < 0 || r.s[i].weight < r.s[at].weight ||
				r.s[i].weight == r.s[at].weight && r.s[i].seq < r.s[at].seq {
				at = i
			}
		}
	}
	r.s[at] = x
}

func (r *Samples) stale(x sample, now time.Time) bool { return now.Sub(x.at) > r.window }

// Median returns the weighted median of the measurements no older than the
// window at now (the least value at which their weight reaches half the
// total), how many there are, and their total weight; 0, 0, 0 with none.
func (r *Samples) Median(now time.Time) (median float64, n int, total float64) {
	var fresh [Capacity]sample
	for _, x := range r.s[:r.n] {
		if !r.stale(x, now) {
			fresh[n] = x
			total += x.weight
			n++
		}
	}
	if n == 0 {
		return 0, 0, 0
	}
	xs := fresh[:n]
	slices.SortFunc(xs, func(a, b sample) int { return cmp.Compare(a.value, b.value) })
	acc := 0.0
	for _, x := range xs {
		if acc += x.weight; acc >= total/2 {
			return x.value, n, total
		}
	}
	return xs[n-1].value, n, total
}

// Reset forgets every measurement.
func (r *Samples) Reset() { *r = New(r.window) }
