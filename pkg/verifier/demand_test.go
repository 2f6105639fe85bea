package verifier

import (
	"math"
	"testing"
	"time"

	"github.com/leveehq/levee/pkg/workpool"
)

// The demand ratio is arrivals' work per second over the last DemandWindow
// of whole seconds, per active worker: a constant arrival rate reads the
// same whatever happens to the calls, the partial current second is not
// counted, and work older than the window is forgotten.
func TestDemandRatio(t *testing.T) {
	pool, err := workpool.New(workpool.Config{Workers: 4, QueueCapacity: 1, MaxQueueWait: time.Second, LIFOAfter: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	now := time.Unix(1_000_000, 0)
	d := newDemand(pool, nil, nil, nil, func() time.Time { return now })
	check := func(what string, want float64) {
		t.Helper()
		if got := d.ratio(); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: ratio %v, want %v", what, got, want)
		}
	}
	check("nothing arrived", 0)
	// Four workers; each second 8 calls of 0.25 s arrive: 2 work-seconds
	// per second for 4 workers, 0.5.
	for s := range 30 {
		for range 8 {
			d.add(250 * time.Millisecond)
		}
		now = now.Add(time.Second)
		if s >= int(DemandWindow/time.Second)-1 {
			check("steady arrivals", 0.5)
		}
	}
	// A burst in the current second is not counted until it is over.
	for range 40 {
		d.add(250 * time.Millisecond)
	}
	check("burst in the current second", 0.5)
	now = now.Add(time.Second)
	// The burst's second (10 work-seconds, no steady arrivals) replaced the
	// oldest steady one (2).
	check("burst counted", 0.5+(10.0-2)/DemandWindow.Seconds()/4)
	now = now.Add(DemandWindow + time.Second)
	check("all forgotten", 0)
	// Fewer active workers: the same work is a larger share.
	pool.SetCapacity(2, 1)
	for range 8 {
		d.add(250 * time.Millisecond)
	}
	now = now.Add(time.Second)
	check("two active workers", 2/DemandWindow.Seconds()/2)
}
