package gateway

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveehq/levee/internal/window"
)

// The request path only adds to atomics; tick, once a second, moves what
// was added into a window of the last rollWindow seconds.
const rollWindow = 10

// retryCounts counts first attempts and retries: their ratio, and the
// first attempts per second, over the last rollWindow seconds.
type retryCounts struct {
	firsts, retries atomic.Uint64

	mu      sync.Mutex
	w       *window.Window
	rolledF uint64 // firsts already in w
	rolledR uint64 // retries already in w
	started time.Time
	rolled  bool
}

func newRetryCounts() *retryCounts {
	return &retryCounts{w: window.New(rollWindow, time.Second, 2)}
}

func (w *retryCounts) add(first bool) {
	if first {
		w.firsts.Add(1)
	} else {
		w.retries.Add(1)
	}
}

// roll moves what was added since the last roll into now's second and
// returns retries ÷ first attempts over the window, and the first attempts
// per second over it (over the time since the first roll, if shorter).
func (w *retryCounts) roll(now time.Time) (ratio, firstsPerSecond float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f, r := w.firsts.Load(), w.retries.Load()
	w.w.Add(now, 0, float64(f-w.rolledF))
	w.w.Add(now, 1, float64(r-w.rolledR))
	w.rolledF, w.rolledR = f, r
	if !w.rolled {
		w.rolled, w.started = true, now
	}
	firsts, retries := w.w.Sum(now, 0), w.w.Sum(now, 1)
	if firsts == 0 {
		return 0, 0
	}
	if span := min(now.Sub(w.started), w.w.Len()); span >= time.Second {
		firstsPerSecond = firsts / span.Truncate(time.Second).Seconds()
	}
	return retries / firsts, firstsPerSecond
}

// recentMax is the highest value added over the last rollWindow seconds.
type recentMax struct {
	cur atomic.Int64
	mu  sync.Mutex
	w   *window.Window
}

func newRecentMax() *recentMax { return &recentMax{w: window.New(rollWindow, time.Second, 1)} }

func (w *recentMax) add(v int64) {
	for {
		c := w.cur.Load()
		if v <= c || w.cur.CompareAndSwap(c, v) {
			return
		}
	}
}

// roll moves the highest value added since the last roll into now's second
// and returns the highest over the window.
func (w *recentMax) roll(now time.Time) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.w.Raise(now, 0, float64(w.cur.Swap(0)))
	return int64(w.w.Max(now, 0))
}
