package fleettest

import (
	"testing"
	"time"

	"github.com/leveehq/levee/pkg/ledger"
)

// TestLedgerSharesMove: traffic moves from one client to the next while
// nobody retries (a healthy fleet whose load balancer shifts), so that each
// client's account fills under a share it later loses; then an outage
// starts and every client wants every token at once. The ledger's bound —
// tokens held never exceed the cap, so a burst of grants is at most the cap
// plus what the window earned — must hold in every window.
//
// Before the fix in Ledger.settle, each account kept what it had saved
// under its old share while the next client filled its own under the new
// one: with four clients taking turns the fleet held, and was granted in
// one instant, the sum of every turn's cap (1,396 tokens for a cap of 500).
func TestLedgerSharesMove(t *testing.T) {
	s := ledger.Settings{Ratio: 0.1, Burst: 100, MinPerSecond: 1}
	const lease = time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := ledger.NewLedger(s, lease, t0)
	ids := []string{"a", "b", "c", "d"}

	type point struct {
		at             time.Time
		first, granted uint64
	}
	var first, granted uint64
	points := []point{{t0, 0, 0}}
	perSecond := map[int64]uint64{} // first attempts reported per calendar second
	report := func(id string, f uint64, want uint32, at time.Time) {
		granted += uint64(l.Report(id, ledger.Counts{First: f}, want, at).Tokens)
		first += f
		perSecond[at.Unix()] += f
		points = append(points, point{at, first, granted})
	}

	now := t0
	for turn, busy := range ids {
		for range 20 { // 20 s of traffic on one client; nobody retries
			now = now.Add(time.Second)
			for i, id := range ids {
				f := uint64(0)
				if id == busy {
					f = 1000 * uint64(turn+1) // and the traffic grows, so the cap does too
				}
				report(id, f, 0, now.Add(time.Duration(i)*time.Millisecond))
			}
		}
	}
	// The outage: everyone wants everything, at once.
	now = now.Add(time.Second)
	for i, id := range ids {
		report(id, 0, 1_000_000, now.Add(time.Duration(i)*time.Microsecond))
	}

	var maxRate uint64
	for _, n := range perSecond {
		maxRate = max(maxRate, n)
	}
	capMax := s.Burst + s.Ratio*float64(maxRate)*lease.Seconds()
	burst := points[len(points)-1].granted - points[len(points)-1-len(ids)].granted
	t.Logf("the outage's first instant: %d tokens granted at once (cap %.0f)", burst, capMax)
	for i := range points {
		for j := i + 1; j < len(points); j++ {
			a, b := points[i], points[j]
			allowed := capMax + s.Ratio*float64(b.first-a.first) + s.MinPerSecond*b.at.Sub(a.at).Seconds()
			if got := float64(b.granted - a.granted); got > allowed+1e-6 {
				t.Fatalf("window %v..%v: granted %.0f > allowed %.1f (cap %.0f)", a.at.Sub(t0), b.at.Sub(t0), got, allowed, capMax)
			}
		}
	}
	if burst == 0 {
		t.Fatal("nothing granted: the outage found no saved tokens")
	}
}
