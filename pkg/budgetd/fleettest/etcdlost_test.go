package fleettest

import (
	"testing"
	"time"

	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
)

// TestFleetEtcdLost: two replicas, 100 clients pointed at both, all failing
// and retrying; then etcd goes away entirely (every connection cut).
//
// It proves, by counting:
//   - no replica grants without etcd, so every client falls back to its
//     local budget (Status mode Fallback) once its lease has run out;
//   - while they are there, each client retries within its local budget:
//     what its bucket held when the outage window began + Ratio × the first
//     attempts it sent + FallbackMinPerSecond × the window, and the fleet
//     within the sum of those (a ratio budget, not unlimited, and not zero);
//     over the whole run each client's fallback stays within its rule;
//   - when etcd returns, a leader is elected and every client is back on
//     the shared budget, with tokens granted again.
func TestFleetEtcdLost(t *testing.T) {
	const (
		n    = 100
		rate = 20.0 // first attempts per second per client
	)
	etcd := etcdtest.NewEtcd(t)
	budgetdtest.PutConfig(t, etcd.Endpoints(), "", key, settingsJSON(settings))
	r1 := budgetdtest.StartReplica(t, etcd.Endpoints(), nil)
	r2 := budgetdtest.StartReplica(t, etcd.Endpoints(), nil)
	budgetdtest.WaitLeader(t, leaderWait, r1, r2)
	cfg := budgetdtest.TestConfig(t, nil)

	f := newFleet(t, fleetConfig{
		name: "app", target: r1.Addr() + "," + r2.Addr(), n: n, refresh: cfg.RefreshInterval,
		rate: func(int) float64 { return rate },
	})
	waitFor(t, 15*time.Second, "every client's first lease", f.allShared)
	smp := f.sample(nil)
	stop := f.drive()
	waitFor(t, time.Minute, "load with etcd", func() bool { return f.firstAttempts() >= n*rate })

	etcd.Stop()
	lost := time.Now()
	// Every client in fallback with nothing left of its last lease: from
	// then on every retry is paid by a local budget.
	var outageStart int
	took := waitFor(t, 15*time.Second, "every client on its local budget alone", func() bool {
		i, s := smp.latestIndexed()
		for _, c := range s.clients {
			if c.mode != budget.Fallback || c.leaseTokens != 0 {
				return false
			}
		}
		outageStart = i
		return true
	})
	t.Logf("every client on its local budget %v after etcd stopped", took)
	firstAtStart := f.firstAttempts()
	waitFor(t, time.Minute, "load without etcd", func() bool { return f.firstAttempts() >= firstAtStart+2*n*rate })
	outageEnd := smp.latest()

	etcd.Restart()
	restarted := time.Now()
	leader := budgetdtest.WaitLeader(t, leaderWait, r1, r2)
	elected := time.Since(restarted)
	back := waitFor(t, 15*time.Second, "every client back on the shared budget", func() bool {
		for _, c := range f.clients {
			if st := c.Status(); st.Mode != budget.Shared || st.Leader != leader.Addr() {
				return false
			}
		}
		return true
	})
	t.Logf("etcd down %v; after its restart a leader in %v, every client shared %v later", restarted.Sub(lost).Round(time.Millisecond), elected.Round(time.Millisecond), back.Round(time.Millisecond))
	grantedBack := sampleNow(f).totals().granted
	waitFor(t, 10*time.Second, "tokens granted again", func() bool { return sampleNow(f).totals().granted > grantedBack })
	stop()
	samples := smp.stop()

	// The outage window: from the first sample with every client on its
	// local budget alone to the last one before etcd returned.
	a := samples[outageStart]
	var b sample
	for _, s := range samples {
		if !s.before.After(outageEnd.before) {
			b = s
		}
	}
	window := b.after.Sub(a.before)
	var retries, first, allowance float64
	for c := range n {
		ca, cb := a.clients[c], b.clients[c]
		if cb.mode != budget.Fallback || cb.entries != ca.entries {
			t.Fatalf("client %d left fallback during the outage (mode %v, entries %d → %d)", c, cb.mode, ca.entries, cb.entries)
		}
		if cb.granted != ca.granted {
			t.Errorf("client %d received %d tokens while etcd was down", c, cb.granted-ca.granted)
		}
		// One bucket throughout. It had earned on the first attempts sent
		// before a, up to the one the driver may have been between
		// recording and retrying (hence +1).
		dr := float64(cb.retries - ca.retries)
		df := float64(cb.first - ca.first)
		limit := ca.fallbackTokens + settings.Ratio*(df+1) + f.fallbackMin*window.Seconds()
		if dr > limit+1e-9 {
			t.Errorf("client %d sent %.0f retries on its local budget; it held %.2f and earned at most %.2f (%.0f first attempts in %v)",
				c, dr, ca.fallbackTokens, limit-ca.fallbackTokens, df, window)
		}
		retries += dr
		first += df
		allowance += limit
	}
	t.Logf("without etcd, over %v: %.0f first attempts, %.0f retries (%.4f per first attempt); local budgets allow %.1f",
		window.Round(time.Millisecond), first, retries, retries/first, allowance)
	if retries == 0 {
		t.Errorf("no client retried at all on its local budget: fallback must not be zero")
	}
	fbAllowance, fbUsed := f.checkFallback(t, samples)
	t.Logf("whole run: %d retries from local budgets; the fallback rule allows %.1f", fbUsed, fbAllowance)
}
