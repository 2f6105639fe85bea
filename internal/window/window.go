// Package window keeps values over a rolling window of time: a ring of
// buckets, each a slice of time of the same width, so that what falls out of
// the window is forgotten as the clock passes, whether or not anything is
// added meanwhile. Every rolling count in Levee is one (a verifier's answers
// for outlier ejection, a breaker's outcomes, the retry ratios, a budget's
// first attempts and retries, held queue sizes).
//
// A Window allocates nothing after New and takes no lock: its owner
// serialises access. Times are bucketed by Time.UnixNano, so a fake clock
// works as well as the system's (AlignTo moves the buckets' edges); a time
// older than the window is dropped.
package window

import "time"

// Window holds Values numbers per bucket over the last Buckets buckets of
// Width. The zero Window is not usable; make one with New.
type Window struct {
	origin int64   // UnixNano of a bucket's start; 0: the Unix epoch
	width  int64   // ns per bucket
	values int     // numbers per bucket
	idx    []int64 // the bucket index each slot holds; empty slots hold noBucket
	data   []float64
	newest int64 // the newest bucket index seen, noBucket before any
}

const noBucket = -1 << 63

// New returns an empty window of n buckets of width, each holding values
// numbers. It panics unless n, width and values are positive: a window's
// shape is fixed in code.
func New(n int, width time.Duration, values int) *Window {
	if n <= 0 || width <= 0 || values <= 0 {
		panic("window: New needs positive n, width and values")
	}
	w := &Window{width: int64(width), values: values, idx: make([]int64, n), data: make([]float64, n*values)}
	w.Reset()
	return w
}

// AlignTo makes the buckets start at origin and every Width after it,
// rather than at the Unix epoch, and returns w. Call it before the first
// Add.
func (w *Window) AlignTo(origin time.Time) *Window {
	w.origin = origin.UnixNano()
	return w
}

// Reset forgets everything added.
func (w *Window) Reset() {
	for i := range w.idx {
		w.idx[i] = noBucket
	}
	clear(w.data)
	w.newest = noBucket
}

// Len is the window's length: Buckets × Width.
func (w *Window) Len() time.Duration { return time.Duration(int64(len(w.idx)) * w.width) }

func (w *Window) bucket(t time.Time) int64 {
	ns := t.UnixNano() - w.origin
	b := ns / w.width
	if ns < 0 && ns%w.width != 0 {
		b-- // floor, not truncation
	}
	return b
}

// slot returns the numbers of t's bucket, cleared if the slot held an older
// bucket, or nil when t is older than the window ending at the newest time
// seen.
func (w *Window) slot(t time.Time) []float64 {
	b := w.bucket(t)
	if b > w.newest {
		w.newest = b
	}
	if b <= w.newest-int64(len(w.idx)) {
		return nil
	}
	n := int64(len(w.idx))
	s := int(((b % n) + n) % n) // a bucket before the origin is negative
	vals := w.data[s*w.values : (s+1)*w.values]
	if w.idx[s] != b {
		w.idx[s] = b
		clear(vals)
	}
	return vals
}

// Add adds v to number i of t's bucket.
func (w *Window) Add(t time.Time, i int, v float64) {
	if vals := w.slot(t); vals != nil {
		vals[i] += v
	}
}

// Raise sets number i of t's bucket to v if v is greater.
func (w *Window) Raise(t time.Time, i int, v float64) {
	if vals := w.slot(t); vals != nil && v > vals[i] {
		vals[i] = v
	}
}

// Sum is number i summed over the buckets of the window that ends with
// now's bucket.
func (w *Window) Sum(now time.Time, i int) float64 {
	var sum float64
	w.each(now, func(vals []float64) { sum += vals[i] })
	return sum
}

// Max is the greatest of number i over the buckets of the window that ends
// with now's bucket, 0 when none holds one.
func (w *Window) Max(now time.Time, i int) float64 {
	var m float64
	w.each(now, func(vals []float64) { m = max(m, vals[i]) })
	return m
}

func (w *Window) each(now time.Time, f func([]float64)) {
	b := w.bucket(now)
	for s, idx := range w.idx {
		if idx <= b && idx > b-int64(len(w.idx)) {
			f(w.data[s*w.values : (s+1)*w.values])
		}
	}
}
