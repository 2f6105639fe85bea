package verifier

import (
	"context"
	"sync/atomic"
	"time"
)

// stallDetector notices that the whole process stopped running for a while
// (SIGSTOP, a VM or container pause, a page-thrashing host) by a ticker that
// fires late: a run whose interval contains such a gap measured the stall,
// not the node's speed, and must not teach the cost model (see runCost).
//
// A CPU quota that throttles the process in short periods makes every tick
// a little late and the node honestly slower; it is not a stall, and the
// cost model's bounded stretch is what follows it.
type stallDetector struct {
	tick      time.Duration
	threshold time.Duration // a tick this much later than due is a stall
	lastEnd   atomic.Int64  // unix nanos of the end of the last stall; 0: none
	lastTick  atomic.Int64  // unix nanos of the last tick; 0: not running
	stalls    atomic.Uint64 // stalls seen
}

// Stall detection: a tick every 50 ms; one 250 ms late is a stall (no Go
// scheduler or GC pause comes near it on a node that is running).
const (
	stallTick      = 50 * time.Millisecond
	stallThreshold = 250 * time.Millisecond
)

func newStallDetector() *stallDetector {
	return &stallDetector{tick: stallTick, threshold: stallThreshold}
}

// run ticks until ctx ends.
func (d *stallDetector) run(ctx context.Context) {
	t := time.NewTicker(d.tick)
	defer t.Stop()
	last := time.Now()
	d.lastTick.Store(last.UnixNano())
	for {
		select {
		case <-ctx.Done():
			d.lastTick.Store(0)
			return
		case <-t.C:
		}
		now := time.Now()
		if gap := now.Sub(last); gap > d.tick+d.threshold {
			d.lastEnd.Store(now.UnixNano())
			d.stalls.Add(1)
		}
		last = now
		d.lastTick.Store(now.UnixNano())
	}
}

// spanned reports whether a run that began at start and ends now overlapped
// a stall: one ended at or after start, or one is ending now, its tick not
// yet run (after a SIGCONT the hash may finish before the ticker wakes).
func (d *stallDetector) spanned(start, now time.Time) bool {
	if end := d.lastEnd.Load(); end != 0 && end >= start.UnixNano() {
		return true
	}
	last := d.lastTick.Load()
	return last != 0 && now.UnixNano()-last > int64(d.tick+d.threshold)
}
