package window

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

// Counts stay while their bucket is inside the window and are gone once
// the clock has passed it, whether or not anything is added meanwhile.
func TestSumForgetsByTime(t *testing.T) {
	w := New(10, time.Second, 2)
	w.Add(at(0), 0, 3)
	w.Add(at(500*time.Millisecond), 0, 1)
	w.Add(at(4*time.Second), 1, 7)
	for _, c := range []struct {
		now          time.Duration
		want0, want1 float64
	}{
		{0, 4, 0},
		{4 * time.Second, 4, 7},
		{9999 * time.Millisecond, 4, 7},
		{10 * time.Second, 0, 7}, // second 0 has left the window
		{13999 * time.Millisecond, 0, 7},
		{14 * time.Second, 0, 0},
		{time.Hour, 0, 0},
	} {
		if got0, got1 := w.Sum(at(c.now), 0), w.Sum(at(c.now), 1); got0 != c.want0 || got1 != c.want1 {
			t.Errorf("at %v: sums %v, %v; want %v, %v", c.now, got0, got1, c.want0, c.want1)
		}
	}
}

// A slot reused for a later bucket starts from zero; a time older than the
// window is dropped rather than counted into the slot it maps to.
func TestSlotsReusedAndOldTimesDropped(t *testing.T) {
	w := New(3, time.Second, 1)
	w.Add(at(0), 0, 5)
	w.Add(at(3*time.Second), 0, 1) // the slot second 0 used
	if got := w.Sum(at(3*time.Second), 0); got != 1 {
		t.Errorf("sum %v after the slot was reused, want 1", got)
	}
	w.Add(at(0), 0, 100) // older than the window ending at 3s
	if got := w.Sum(at(3*time.Second), 0); got != 1 {
		t.Errorf("sum %v after adding at a time older than the window, want 1", got)
	}
}

func TestMaxAndRaise(t *testing.T) {
	w := New(10, time.Second, 1)
	w.Raise(at(0), 0, 4)
	w.Raise(at(0), 0, 2) // lower: no change
	w.Raise(at(3*time.Second), 0, 3)
	if got := w.Max(at(5*time.Second), 0); got != 4 {
		t.Errorf("max %v, want 4", got)
	}
	if got := w.Max(at(10*time.Second), 0); got != 3 {
		t.Errorf("max %v once second 0 left, want 3", got)
	}
	if got := w.Max(at(20*time.Second), 0); got != 0 {
		t.Errorf("max %v with nothing in the window, want 0", got)
	}
}

func TestReset(t *testing.T) {
	w := New(4, 250*time.Millisecond, 1)
	w.Add(at(0), 0, 1)
	w.Reset()
	if got := w.Sum(at(0), 0); got != 0 {
		t.Errorf("sum %v after Reset, want 0", got)
	}
	w.Add(at(0), 0, 2) // a time before the newest seen is fine after a reset
	if got := w.Sum(at(0), 0); got != 2 {
		t.Errorf("sum %v, want 2", got)
	}
	if w.Len() != time.Second {
		t.Errorf("Len %v, want 1s", w.Len())
	}
}

// Times before 1970 bucket by floor, as after it.
func TestNegativeTimes(t *testing.T) {
	w := New(2, time.Second, 1)
	w.Add(time.Unix(0, -1), 0, 1)
	w.Add(time.Unix(0, 0), 0, 1)
	if got := w.Sum(time.Unix(0, 0), 0); got != 2 {
		t.Errorf("sum %v over [-1s, 1s), want 2", got)
	}
	if got := w.Sum(time.Unix(1, 0), 0); got != 1 {
		t.Errorf("sum %v over [0s, 2s), want 1", got)
	}
}

// Buckets on both sides of the origin each keep their own slot: a window
// of ten spanning five before it and five after holds all ten. (The ledger
// spreads a report over the seconds it covers, which may begin before the
// ledger did.)
func TestBucketsBeforeTheOriginKeepTheirOwnSlots(t *testing.T) {
	w := New(10, time.Second, 1).AlignTo(t0)
	for b := -5; b < 5; b++ {
		w.Add(at(time.Duration(b)*time.Second), 0, float64(b+100))
	}
	want := 0.0
	for b := -5; b < 5; b++ {
		want += float64(b + 100)
	}
	if got := w.Sum(at(4*time.Second), 0); got != want {
		t.Errorf("sum %v over buckets -5 to 4, want %v: a bucket before the origin shared a slot", got, want)
	}
}

// Aligned to an origin, the buckets' edges are the origin and every width
// after it.
func TestAlignTo(t *testing.T) {
	origin := t0.Add(300 * time.Millisecond)
	w := New(2, time.Second, 1).AlignTo(origin)
	w.Add(origin.Add(-time.Millisecond), 0, 1) // the bucket before the origin's
	w.Add(origin, 0, 2)
	w.Add(origin.Add(999*time.Millisecond), 0, 4)
	if got := w.Sum(origin.Add(999*time.Millisecond), 0); got != 7 {
		t.Errorf("sum %v over the origin's bucket and the one before, want 7", got)
	}
	if got := w.Sum(origin.Add(time.Second), 0); got != 6 {
		t.Errorf("sum %v a bucket later, want 6", got)
	}
}
