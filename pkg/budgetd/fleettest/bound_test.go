package fleettest

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
	"github.com/leveehq/levee/pkg/fleetctl"
	"github.com/leveehq/levee/pkg/mtls"
)

// The 500-client fleet: each client sends 10 first attempts a second, all
// failing; the fleet sends 5,000 a second. budgetd runs with its production
// timings (1 s refresh, 3 s leases), which is also what keeps 500 refreshes
// a second affordable under -race on two cores.
const (
	fleetSize        = 500
	fleetRate        = 10     // first attempts per second per client
	fleetFirstTarget = 60_000 // 12 s: longer than the 10 s window of Status's rates
	fleetRefresh     = time.Second
	fleetLease       = 3 * time.Second
)

// TestFleetBound: 500 budget Clients, each its own client ID and connection,
// all seeing 100% failures and all asking to retry every failure, against
// one budgetd replica on a real etcd.
//
// It proves, by counting:
//   - in every window between two snapshots of the leader, the tokens it
//     granted stay within its documented bound (cap + Ratio × first attempts
//     reported + MinPerSecond × the window);
//   - over the whole run, the retries the 500 clients actually sent stay
//     within Ratio × first attempts + MinPerSecond × time + what their local
//     fallback could add by its rule (counted from their modes, and checked
//     against what it did add);
//   - that is far below what the same 500 processes would have been allowed
//     with per-process budgets of the same settings;
//   - the leader's Status shows the live retry ratio at Ratio, and
//     `budgetd status` (fleetctl.StatusCommand) shows the key, the first-attempt rate,
//     the retry ratio and ~500 clients while the load runs.
func TestFleetBound(t *testing.T) {
	testlock.Quiet(t) // 500 clients and an etcd session that must not lapse under them
	etcd := etcdtest.StartEtcd(t)
	budgetdtest.PutConfig(t, etcd, "", key, settingsJSON(settings))
	leaderStart := time.Now() // the ledger cannot start before its leader
	r := budgetdtest.StartReplica(t, etcd, func(c *budgetd.Config) {
		c.RefreshInterval, c.LeaseValidity, c.ForgetAfter = fleetRefresh, fleetLease, 10*time.Second
	})
	budgetdtest.WaitLeader(t, leaderWait, r)

	f := newFleet(t, fleetConfig{
		name: "proc", target: r.Addr(), n: fleetSize, refresh: fleetRefresh,
		rate: func(int) float64 { return fleetRate },
	})
	took := waitFor(t, 30*time.Second, "every client's first lease", f.allShared)
	t.Logf("%d clients in shared mode %v after they started", fleetSize, took)

	smp := f.sample(statusOf(r))
	stop := f.drive()
	waitFor(t, time.Minute, "half the load", func() bool { return f.firstAttempts() >= fleetFirstTarget/2 })

	t.Run("budgetd status mid-load", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var buf bytes.Buffer
		if err := (&fleetctl.StatusCommand{Addr: r.Addr(), Timeout: 5 * time.Second, TLS: mtls.Settings{Insecure: true}}).Run(ctx, &buf); err != nil {
			t.Fatalf("budgetd status: %v", err)
		}
		out := buf.String()
		head, _, _ := strings.Cut(out, "\nclients of ")
		t.Logf("budgetd status (client lines cut):\n%s", head)
		row := statusRow(t, out, key)
		if row == nil {
			return
		}
		if row.ratio != settings.Ratio || row.burst != settings.Burst || row.minPerSec != settings.MinPerSecond {
			t.Errorf("settings shown: ratio %g burst %g min/s %g; want %+v", row.ratio, row.burst, row.minPerSec, settings)
		}
		// The fleet sends 5,000 first attempts a second; the window starts
		// before the load, so the rate shown is lower while it fills.
		if row.firstPerSec <= 0 {
			t.Errorf("FIRST/S = %v, want the live first-attempt rate (> 0)", row.firstPerSec)
		}
		if row.retryRatio <= 0 || row.retryRatio > 2*settings.Ratio {
			t.Errorf("RETRY RATIO = %v, want a live ratio in (0, %g]", row.retryRatio, 2*settings.Ratio)
		}
		if row.clients < fleetSize*95/100 || row.clients > fleetSize {
			t.Errorf("CLIENTS = %d, want ~%d (those that reported within one lease period)", row.clients, fleetSize)
		}
		if n := strings.Count(out, "\n  proc-"); n != row.clients {
			t.Errorf("%d client lines under \"clients of %s\", want %d", n, key, row.clients)
		}
	})

	waitFor(t, time.Minute, "the load", func() bool { return f.firstAttempts() >= fleetFirstTarget })
	live := smp.latest() // the leader's view while the load runs
	stop()
	samples := smp.stop()
	end := time.Now()
	last := samples[len(samples)-1]
	if last.leader == nil {
		t.Fatal("no leader snapshot at the end")
	}

	// 1. Every window, from the leader's own counters.
	ls := leaderSamples(samples)
	if len(ls) < 20 {
		t.Fatalf("only %d leader snapshots; want a window per pair of many", len(ls))
	}
	capMax, _ := checkLedgerWindows(t, ls, fleetLease)

	// 2. The whole run, in retries the clients actually sent. The leader's
	// ledger started empty when it took over (after leaderStart), so what
	// it granted is at most what it earned since; the clients retried with
	// those grants and with their local fallback budgets.
	tot := last.totals()
	allowance, usedFallback := f.checkFallback(t, samples)
	elapsed := end.Sub(leaderStart).Seconds()
	// A refresh that budgetd took but whose answer was lost is reported
	// again (at least once), so budgetd may have counted more than was
	// sent: the bound is on the larger.
	first := max(tot.first, last.leader.first)
	bound := settings.Ratio*float64(first) + settings.MinPerSecond*elapsed + allowance
	if tot.retries != tot.allowed {
		t.Errorf("clients sent %d retries but were allowed %d: the driver retries exactly when allowed", tot.retries, tot.allowed)
	}
	if tot.allowed > tot.granted+tot.allowedFallback {
		t.Errorf("clients were allowed %d retries, more than budgetd granted them (%d) plus their fallback (%d)", tot.allowed, tot.granted, tot.allowedFallback)
	}
	if float64(last.leader.granted) > settings.Ratio*float64(last.leader.first)+settings.MinPerSecond*elapsed+1e-6 {
		t.Errorf("the leader granted %d tokens, more than it earned: %g × %d reported + %g × %.1fs",
			last.leader.granted, settings.Ratio, last.leader.first, settings.MinPerSecond, elapsed)
	}
	if float64(tot.retries) > bound {
		t.Errorf("the fleet sent %d retries for %d first attempts; the fleet budget allows %.0f", tot.retries, first, bound)
	}

	// 3. The same 500 processes with per-process budgets of the same
	// settings: each its own burst and minimum, plus Ratio × its own first
	// attempts.
	perProcess := float64(fleetSize)*(settings.Burst+settings.MinPerSecond*elapsed) + settings.Ratio*float64(tot.first)
	t.Logf("%d clients over %.1fs: %d first attempts sent (%d reported), %d retries sent = %.4f per first attempt "+
		"(%d from leases, %d from local fallback; fallback rule allows %.1f; %d fallback entries, %.0f failed refreshes)",
		fleetSize, elapsed, tot.first, last.leader.first, tot.retries, float64(tot.retries)/float64(tot.first),
		tot.allowed-tot.allowedFallback, usedFallback, allowance, tot.entries, f.refreshErrors())
	f.logRefreshErrors(t)
	t.Logf("retries allowed: fleet-wide budget ≤ %.0f (window cap %.0f); per-process budgets would allow %.0f (%.1f×)",
		bound, capMax, perProcess, perProcess/bound)
	if perProcess < 5*bound {
		t.Errorf("per-process budgets would allow %.0f retries, the fleet budget %.0f: want the fleet's far (5×) below", perProcess, bound)
	}

	// 4. The live retry ratio the leader shows (over its 10 s window) while
	// the load runs, once the window holds only the load: at Ratio, a
	// little below it (the tokens earned by one report are granted by the
	// next, and the retries they pay for are reported by the one after).
	if live.leader == nil {
		t.Fatal("no leader snapshot during the load")
	}
	t.Logf("leader during the load: %.0f first attempts/s, retry ratio %.4f, %d clients",
		live.leader.firstPerSec, live.leader.retryRatio, live.leader.clients)
	if got := live.leader.retryRatio; got < 0.8*settings.Ratio || got > 1.1*settings.Ratio {
		t.Errorf("live retry ratio in Status = %.4f, want near %g (-20%%..+10%%)", got, settings.Ratio)
	}
}

// statusLine is one row of the KEY table `budgetd status` prints.
type statusLine struct {
	ratio, burst, minPerSec, tokens, firstPerSec, retriesPerSec, retryRatio float64
	granted, denied                                                         uint64
	clients                                                                 int
}

// statusRow parses the row of key in `budgetd status` output (KEY RATIO BURST
// MIN/S TOKENS FIRST/S RETRIES/S RETRY RATIO GRANTED DENIED CLIENTS).
func statusRow(t *testing.T, out, key string) *statusLine {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 11 || f[0] != key {
			continue
		}
		var l statusLine
		var errs []error
		fl := func(s string) float64 {
			v, err := strconv.ParseFloat(s, 64)
			errs = append(errs, err)
			return v
		}
		in := func(s string) uint64 {
			v, err := strconv.ParseUint(s, 10, 64)
			errs = append(errs, err)
			return v
		}
		l.ratio, l.burst, l.minPerSec, l.tokens = fl(f[1]), fl(f[2]), fl(f[3]), fl(f[4])
		l.firstPerSec, l.retriesPerSec, l.retryRatio = fl(f[5]), fl(f[6]), fl(f[7])
		l.granted, l.denied, l.clients = in(f[8]), in(f[9]), int(in(f[10]))
		for _, err := range errs {
			if err != nil {
				t.Errorf("row %q: %v", line, err)
				return nil
			}
		}
		return &l
	}
	t.Errorf("no row for key %q in the status output", key)
	return nil
}
