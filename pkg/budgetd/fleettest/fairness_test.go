package fleettest

import (
	"testing"
	"time"

	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
)

// TestFleetFairness: one noisy client sends 10× the first attempts of each
// of 49 others; all of them fail every request and every client wants far
// more retry tokens than exist (TokensHeadroom 1,000). Counting the tokens
// each client actually spent from its leases, the noisy one gets no more
// than its share of the fleet's first attempts (× 1.15) — and no less than
// 0.85 of it — and no quiet one gets less than half its share.
func TestFleetFairness(t *testing.T) {
	const (
		n           = 50
		quietRate   = 20.0 // first attempts per second
		noisyRate   = 10 * quietRate
		firstTarget = 7_000 // ~6 s of load at 1,180 first attempts a second
	)
	etcd := etcdtest.StartEtcd(t)
	budgetdtest.PutConfig(t, etcd, "", key, settingsJSON(settings))
	r := budgetdtest.StartReplica(t, etcd, nil) // 200 ms refresh, 1 s leases
	budgetdtest.WaitLeader(t, leaderWait, r)

	f := newFleet(t, fleetConfig{
		name: "svc", target: r.Addr(), n: n, refresh: 200 * time.Millisecond, headroom: 1000,
		rate: func(i int) float64 {
			if i == 0 {
				return noisyRate
			}
			return quietRate
		},
	})
	waitFor(t, 15*time.Second, "every client's first lease", f.allShared)
	smp := f.sample(nil)
	stop := f.drive()
	waitFor(t, time.Minute, "the load", func() bool { return f.firstAttempts() >= firstTarget })
	stop()
	samples := smp.stop()
	base, last := samples[0], samples[len(samples)-1]

	// Tokens used: retries paid for by leases (the local fallback is not
	// budgetd's to share), from the start of the load.
	used := make([]uint64, n)
	var usedAll, firstAll uint64
	for c := range n {
		a, b := base.clients[c], last.clients[c]
		used[c] = (b.allowed - b.allowedFallback) - (a.allowed - a.allowedFallback)
		usedAll += used[c]
		firstAll += b.first - a.first
	}
	if usedAll == 0 {
		t.Fatal("no token was used: the share is meaningless")
	}
	noisyFirstShare := float64(last.clients[0].first-base.clients[0].first) / float64(firstAll)
	noisyShare := float64(used[0]) / float64(usedAll)
	minQuiet, maxQuiet := used[1], used[1]
	for _, u := range used[1:] {
		minQuiet, maxQuiet = min(minQuiet, u), max(maxQuiet, u)
	}
	t.Logf("%d first attempts, %d tokens used from leases; noisy client: %.3f of the first attempts, %.3f of the tokens (%d); quiet clients used %d..%d each (fair %.1f)",
		firstAll, usedAll, noisyFirstShare, noisyShare, used[0], minQuiet, maxQuiet, float64(usedAll)*(1-noisyFirstShare)/float64(n-1))
	if noisyShare > 1.15*noisyFirstShare {
		t.Errorf("the noisy client used %.3f of the fleet's tokens; its share of first attempts is %.3f (at most ×1.15 = %.3f allowed)",
			noisyShare, noisyFirstShare, 1.15*noisyFirstShare)
	}
	// Nor is the noisy client squeezed below its share (a first-come,
	// first-served or per-client-equal split would do that), nor a quiet
	// one starved.
	if noisyShare < 0.85*noisyFirstShare {
		t.Errorf("the noisy client used %.3f of the fleet's tokens; its share of first attempts is %.3f (at least ×0.85 = %.3f wanted)",
			noisyShare, noisyFirstShare, 0.85*noisyFirstShare)
	}
	if fair := float64(usedAll) * (1 - noisyFirstShare) / float64(n-1); float64(minQuiet) < fair/2 {
		t.Errorf("a quiet client used %d tokens, less than half its fair share %.1f", minQuiet, fair)
	}
	if tot := last.totals(); tot.fallback > 0 {
		t.Logf("%d clients in fallback at the end", tot.fallback)
	}
}
