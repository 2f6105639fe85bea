package budgetd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
	"github.com/leveehq/levee/pkg/ledger"
)

// TestRetryRatioThroughAnOutage: 500 client processes' budgets (real
// budget.Clients, each with its own connection to a real budgetd over
// loopback) send 10 first attempts a second each; every attempt fails and
// asks for up to two retries, so the budget is all that stops them. budgetd
// goes away for 15 s (the clients fall back to their local budgets) and a new
// leader with an empty ledger takes over on the same address. Counted over
// the outage and the 15 s after it, retries stay within Ratio × first
// attempts (those of the span and those made before it that only the new
// leader heard of), plus the tokens the clients held when the outage began, plus
// the fleet's min_per_second over the span: the local budgets and the new
// leader do not both fund the outage's first attempts, and hundreds of
// processes in fallback together earn the fleet's minimum, not hundreds of
// times it.
func TestRetryRatioThroughAnOutage(t *testing.T) {
	const (
		clients   = 500
		perSecond = 10
		warmup    = 5 * time.Second
		outage    = 15 * time.Second // longer than a lease (3 s) and ForgetAfter (10 s)
		after     = 15 * time.Second
	)
	settings := ledger.DefaultSettings() // ratio 0.1, burst 100, 1/s
	endpoints := etcdtest.StartEtcd(t)
	addr := freeAddr(t)
	start := func() *budgetdtest.Replica {
		r := budgetdtest.StartReplica(t, endpoints, func(c *budgetd.Config) {
			c.ListenAddr, c.MetricsAddr = addr, ""
			c.RefreshInterval = time.Second // the production defaults
			c.LeaseValidity = 3 * time.Second
			c.ForgetAfter = 10 * time.Second
			c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		})
		budgetdtest.WaitLeader(t, time.Minute, r) // a setup wait: on a busy machine an election can take seconds
		return r
	}
	first := start()

	budgets := make([]*budget.Budget, clients)
	for i := range clients {
		cfg := budget.DefaultConfig()
		cfg.Target = addr
		cfg.ClientID = fmt.Sprintf("proc-%03d", i)
		cfg.Keys = []string{"verify"}
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		c, err := budget.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if budgets[i], err = c.Key("verify"); err != nil {
			t.Fatal(err)
		}
	}

	// phase 0: warm-up; 1: the outage; 2: after it.
	var phase atomic.Int32
	var firsts, retries [3]atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), warmup+outage+after+time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i, b := range budgets {
		wg.Go(func() {
			// Spread the processes over the period.
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(i) * time.Second / perSecond / clients):
			}
			tick := time.NewTicker(time.Second / perSecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				p := phase.Load()
				b.RecordFirstAttempt()
				firsts[p].Add(1)
				for range 2 { // the attempt and its retries all fail
					if !b.Allow() {
						break
					}
					b.RecordRetry()
					retries[p].Add(1)
				}
			}
		})
	}

	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
			t.Fatal("test deadline")
		case <-time.After(d):
		}
	}
	sleep(warmup)
	var fallbackSpent float64 // retries funded by local budgets before the outage
	for _, b := range budgets {
		fallbackSpent += float64(b.Status().AllowedFallback)
	}
	phase.Store(1)
	leaseSpent := float64(retries[0].Load()) - fallbackSpent
	firstsBefore := make([]uint64, clients)
	for i, b := range budgets {
		firstsBefore[i] = b.Status().FirstAttempts
	}
	first.Stop()
	// What the fleet held when the outage began: every token the first
	// leader granted, up to its last answer (a refresh it answered while
	// stopping counts), less what was spent before. A snapshot of the
	// leases' balances would miss those last grants.
	held := -leaseSpent
	// First attempts made before the outage that the first leader never
	// heard of (up to a refresh interval's, more when refreshes lag) are
	// reported to the next one, which rightly earns Ratio on them: their
	// retries fall inside the span counted below, the attempts before it.
	carried := 0.0
	for i, b := range budgets {
		st := b.Status()
		held += float64(st.Granted)
		acked := st.FirstAttempts - st.UnreportedFirst
		carried += float64(firstsBefore[i] - min(acked, firstsBefore[i]))
	}
	held = max(held, 0)
	sleep(outage)
	start()
	phase.Store(2)
	sleep(after)
	cancel()
	wg.Wait()

	a1, a2 := float64(firsts[1].Load()), float64(firsts[2].Load())
	r1, r2 := float64(retries[1].Load()), float64(retries[2].Load())
	minimum := settings.MinPerSecond * (outage + after).Seconds()
	allowed := settings.Ratio*(a1+a2+carried) + held + minimum
	t.Logf("warm-up: %d first attempts (%.0f not yet reported at the outage), %d retries; %0.f tokens held at the outage",
		firsts[0].Load(), carried, retries[0].Load(), held)
	t.Logf("outage: %.0f first attempts, %.0f retries (%.3f per first attempt)", a1, r1, r1/a1)
	t.Logf("after:  %.0f first attempts, %.0f retries (%.3f per first attempt)", a2, r2, r2/a2)
	t.Logf("outage and after: %.0f retries for %.0f first attempts (%.3f); allowed %.0f (ratio %.2f of them and the %.0f unreported + %.0f held + %.0f minimum)",
		r1+r2, a1+a2, (r1+r2)/(a1+a2), allowed, settings.Ratio, carried, held, minimum)
	if a1 < 0.8*clients*perSecond*outage.Seconds() || a2 < 0.8*clients*perSecond*after.Seconds() {
		t.Fatalf("the load generator fell behind: %.0f and %.0f first attempts", a1, a2)
	}
	if r1+r2 > allowed {
		t.Errorf("fleet retries over the outage and after: %.0f > %.0f allowed", r1+r2, allowed)
	}
	// Retrying must not have stopped either: the budget is spent, not lost.
	if r2 < 0.8*settings.Ratio*a2 {
		t.Errorf("after the outage only %.0f retries for %.0f first attempts: the new leader's budget was not spent", r2, a2)
	}
}

// freeAddr returns a loopback address nothing listens on now, so that a
// replica restarted after an outage comes back where its clients look.
func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}
