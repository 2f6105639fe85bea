package fleettest

import (
	"testing"
	"time"

	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
)

// TestFleetFailover: two replicas on one etcd, 100 clients pointed at both
// ("a:1,b:2", round-robin; the follower forwards to the leader), all
// failing, all retrying. The leader stops while the load runs.
//
// It proves, by counting:
//   - the other replica takes over and grants again (tokens reach the
//     clients after the switch), and every client is back on the shared
//     budget of the new leader; meanwhile each client spends what is left
//     of its lease or its local fallback budget, and its fallback allows no
//     more than the documented rule;
//   - each leader granted at most what it earned in its own term (a new
//     leader starts empty), and in every window of a term at most its
//     documented bound;
//   - so across the switch the retries the fleet sent stay within Ratio ×
//     first attempts + MinPerSecond × the leaders' terms + the fallback
//     rule's allowance (and hence within the looser per-leader form
//     Ratio × first + cap × leaders + MinPerSecond × time + fallback).
func TestFleetFailover(t *testing.T) {
	const (
		n    = 100
		rate = 20.0 // first attempts per second per client: 2,000 for the fleet
	)
	etcd := etcdtest.StartEtcd(t)
	budgetdtest.PutConfig(t, etcd, "", key, settingsJSON(settings))
	start := time.Now()
	r1 := budgetdtest.StartReplica(t, etcd, nil) // 200 ms refresh, 1 s leases, 2 s election TTL
	budgetdtest.WaitLeader(t, leaderWait, r1)
	r2 := budgetdtest.StartReplica(t, etcd, nil)
	cfg := budgetdtest.TestConfig(t, etcd)

	f := newFleet(t, fleetConfig{
		name: "gw", target: r1.Addr() + "," + r2.Addr(), n: n, refresh: cfg.RefreshInterval,
		rate: func(int) float64 { return rate },
	})
	waitFor(t, 15*time.Second, "every client's first lease", f.allShared)
	// Status through the follower: forwarded to r1 before the switch,
	// answered by r2 itself after.
	smp := f.sample(statusOf(r2))
	stop := f.drive()
	waitFor(t, time.Minute, "load before the switch", func() bool { return f.firstAttempts() >= 2*n*rate })

	before := smp.latest().totals()
	stopping := time.Now()
	r1.Stop()
	stopped := time.Now()
	atSwitch := sampleNow(f).totals()
	took := waitFor(t, leaderWait, "r2 to lead", r2.IsLeader)
	t.Logf("leader stopped in %v; r2 leading %v later", stopped.Sub(stopping), took)

	waitFor(t, time.Minute, "load after the switch", func() bool { return f.firstAttempts() >= before.first+4*n*rate })
	waitFor(t, 10*time.Second, "every client back on the shared budget, from r2", func() bool {
		for _, c := range f.clients {
			if st := c.Status(); st.Mode != budget.Shared || st.Leader != r2.Addr() {
				return false
			}
		}
		return true
	})
	stop()
	samples := smp.stop()
	last := samples[len(samples)-1]
	tot := last.totals()
	end := time.Now()

	// The modes during the switch.
	maxFallback, lowLease := 0, int64(-1)
	for _, s := range samples {
		if s.before.Before(stopping) {
			continue
		}
		st := s.totals()
		maxFallback = max(maxFallback, st.fallback)
		if lowLease < 0 || st.leaseTokens < lowLease {
			lowLease = st.leaseTokens
		}
	}
	t.Logf("after the stop: at most %d of %d clients in fallback at once; lease tokens held by the fleet fell to %d; %d fallback entries in all",
		maxFallback, n, lowLease, tot.entries)

	// Grants resume after the switch.
	if tot.granted <= atSwitch.granted {
		t.Errorf("clients received %d tokens in all, %d by the time the leader had stopped: none from the new leader", tot.granted, atSwitch.granted)
	}
	acquired1 := metricValue(t, r1.Server().Registry(), "levee_budgetd_leadership_acquired_total")
	acquired2 := metricValue(t, r2.Server().Registry(), "levee_budgetd_leadership_acquired_total")
	if acquired1 != 1 || acquired2 != 1 {
		t.Errorf("leaderships: r1 %v, r2 %v; want one each (one switch, no flapping)", acquired1, acquired2)
	}

	// Each leader's term, from its own counters (exact: a stopped replica
	// keeps its registry). A term's ledger starts empty, so over the term
	// it grants at most what the term earned.
	type term struct {
		name           string
		granted, first float64
		length         time.Duration // an upper bound on the term
	}
	terms := []term{
		{"r1", 0, 0, stopped.Sub(start)},
		{"r2", 0, 0, end.Sub(stopping)}, // r2 could not lead before r1 resigned
	}
	for i, r := range []*budgetdtest.Replica{r1, r2} {
		reg := r.Server().Registry()
		terms[i].granted = metricValue(t, reg, "levee_budgetd_tokens_granted_total", "key", key)
		terms[i].first = metricValue(t, reg, "levee_budgetd_first_attempts_reported_total", "key", key)
	}
	var grantedAll, reportedAll, timeAll float64
	for _, tm := range terms {
		earned := settings.Ratio*tm.first + settings.MinPerSecond*tm.length.Seconds()
		t.Logf("%s: granted %.0f tokens for %.0f first attempts reported (earned at most %.1f over ≤ %v)",
			tm.name, tm.granted, tm.first, earned, tm.length.Round(time.Millisecond))
		if tm.granted > earned+1e-6 {
			t.Errorf("%s granted %.0f tokens, more than its term earned (%.1f)", tm.name, tm.granted, earned)
		}
		grantedAll += tm.granted
		reportedAll += tm.first
		timeAll += tm.length.Seconds()
	}
	if terms[1].granted == 0 {
		t.Errorf("the new leader granted nothing")
	}

	// Every window within each term, from the leader snapshots.
	var capMax float64
	byLeader := map[string][]leaderSample{}
	for _, l := range leaderSamples(samples) {
		byLeader[l.leader] = append(byLeader[l.leader], l)
	}
	for addr, ls := range byLeader {
		if addr != r1.Addr() && addr != r2.Addr() {
			t.Errorf("a snapshot names leader %s, neither replica", addr)
		}
		c, _ := checkLedgerWindows(t, ls, cfg.LeaseValidity)
		capMax = max(capMax, c)
	}
	if len(byLeader[r2.Addr()]) < 2 {
		t.Errorf("%d snapshots of the new leader; want its windows checked", len(byLeader[r2.Addr()]))
	}

	// The fleet across the switch.
	allowance, usedFallback := f.checkFallback(t, samples)
	if tot.retries != tot.allowed || tot.allowed > tot.granted+tot.allowedFallback {
		t.Errorf("clients sent %d retries, were allowed %d, received %d tokens and used %d from fallback",
			tot.retries, tot.allowed, tot.granted, tot.allowedFallback)
	}
	if float64(tot.granted) > grantedAll {
		t.Errorf("clients received %d tokens; the leaders granted %.0f", tot.granted, grantedAll)
	}
	first := max(float64(tot.first), reportedAll) // budgetd counts a report again if its answer was lost
	bound := settings.Ratio*first + settings.MinPerSecond*timeAll + allowance
	looser := settings.Ratio*first + capMax*2 + settings.MinPerSecond*end.Sub(start).Seconds() + allowance
	f.logRefreshErrors(t)
	t.Logf("fleet across the switch: %d first attempts sent (%.0f reported), %d retries sent (%d on fallback; its rule allows %.1f); bound %.0f (per-leader form %.0f)",
		tot.first, reportedAll, tot.retries, usedFallback, allowance, bound, looser)
	if float64(tot.retries) > bound {
		t.Errorf("the fleet sent %d retries across the failover; the budget allows %.0f", tot.retries, bound)
	}
}

// sampleNow reads every client once (outside the sampler).
func sampleNow(f *fleet) sample {
	s := &sampler{f: f}
	s.take()
	return s.samples[0]
}
