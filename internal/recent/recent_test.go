package recent

import (
	"testing"
	"time"
)

// The median is weighted; measurements older than the window do not count
// and are displaced first; a new one otherwise displaces the lightest, the
// oldest of equals.
func TestSamples(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := New(10 * time.Second)
	if med, n, total := r.Median(t0); med != 0 || n != 0 || total != 0 {
		t.Fatalf("empty: %v, %d, %v", med, n, total)
	}
	r.Add(5, 0, t0) // no weight: ignored
	r.Add(5, -1, t0)
	if _, n, _ := r.Median(t0); n != 0 {
		t.Fatalf("%d samples after adding weightless ones, want 0", n)
	}
	r.Add(2, 3, t0)
	for range 10 {
		r.Add(1, 0.1, t0)
	}
	if med, n, total := r.Median(t0); med != 2 || n != 11 || total < 3.99 || total > 4.01 {
		t.Errorf("one heavy 2 beside ten light 1s: median %v of %d weighing %v, want 2 of 11 weighing 4", med, n, total)
	}
	// A flood of light ones displaces light ones, not the heavy one.
	for range 100 {
		r.Add(1, 0.1, t0)
	}
	if med, _, _ := r.Median(t0); med != 2 {
		t.Errorf("median %v after a flood of light measurements, want the heavy one's 2", med)
	}
	// Among equals the oldest goes: sixteen new ones of equal weight
	// replace all sixteen.
	for range Capacity {
		r.Add(7, 3, t0)
	}
	if med, n, _ := r.Median(t0); med != 7 || n != Capacity {
		t.Errorf("median %v of %d after %d new heavy measurements, want 7 of %d", med, n, Capacity, Capacity)
	}
	for range Capacity/2 + 1 {
		r.Add(8, 3, t0)
	}
	if med, _, _ := r.Median(t0); med != 8 {
		t.Errorf("median %v after %d newer measurements of 8 among %d of 7, want 8", med, Capacity/2+1, Capacity)
	}
	// Past the window nothing counts, and stale ones go first, even when
	// heavier.
	later := t0.Add(10*time.Second + time.Millisecond)
	if _, n, _ := r.Median(later); n != 0 {
		t.Errorf("%d measurements counted a window later, want 0", n)
	}
	for range 3 {
		r.Add(9, 0.1, later)
	}
	if med, n, _ := r.Median(later); med != 9 || n != 3 {
		t.Errorf("median %v of %d after three fresh light measurements, want 9 of 3", med, n)
	}
	r.Reset()
	if _, n, _ := r.Median(later); n != 0 {
		t.Errorf("%d after Reset, want 0", n)
	}
}
