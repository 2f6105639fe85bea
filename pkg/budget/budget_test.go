package budget_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/budget/budgettest"
	"github.com/leveehq/levee/pkg/ledger"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const key = "verify"

// serverSettings: 20% retries (not the client's default 10%, so tests can
// tell which applies) and a large minimum, so that after the 10 s a fixture
// lets pass before the first report the key's ledger holds 1,000 tokens (its
// cap, Burst) and every want is granted in full.
var serverSettings = ledger.Settings{Ratio: 0.2, Burst: 1000, MinPerSecond: 100}

// fixture is one budgettest server and one Client on a shared fake clock:
// the ledger's accounting and the client's lease expiry read the same time,
// and nothing happens on the clock until the test advances it.
type fixture struct {
	t     *testing.T
	clock *budgettest.Clock
	srv   *budgettest.Server
	c     *budget.Client
	reg   *prometheus.Registry
	ctx   context.Context
}

func (f *fixture) startServer(cfg budgettest.Config) {
	f.t.Helper()
	cfg.Now = f.clock.Now
	f.srv = budgettest.NewServer(cfg)
	f.srv.SetSettings(key, serverSettings)
	if _, err := f.srv.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(f.srv.Stop)
}

func (f *fixture) config() budget.Config {
	cfg := budget.DefaultConfig()
	cfg.Target = f.srv.Addr()
	cfg.ClientID = "test-client"
	cfg.Keys = []string{key}
	cfg.Clock = f.clock
	cfg.Registry = f.reg
	cfg.TokensHeadroom = 50
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	// Reconnect at once after a test restarts the server.
	cfg.DialOptions = []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1, MaxDelay: 10 * time.Millisecond},
		MinConnectTimeout: time.Second,
	})}
	return cfg
}

func (f *fixture) startClient(cfg budget.Config) {
	f.t.Helper()
	c, err := budget.New(cfg)
	if err != nil {
		f.t.Fatalf("New: %v", err)
	}
	f.c = c
	f.t.Cleanup(func() {
		if err := c.Close(); err != nil {
			f.t.Errorf("Close: %v", err)
		}
	})
}

// newFixture starts a server whose ledger for key has earned for 10 s, and
// a client whose first lease (50 tokens: its headroom) has arrived.
func newFixture(t *testing.T, modify ...func(*budget.Config)) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	f := &fixture{t: t, clock: budgettest.NewClock(t0), reg: prometheus.NewRegistry(), ctx: ctx}
	f.startServer(budgettest.Config{ValidFor: 2 * time.Second, RefreshAfter: time.Second})
	f.clock.Advance(10 * time.Second)
	cfg := f.config()
	for _, m := range modify {
		m(&cfg)
	}
	f.startClient(cfg)
	f.waitRequests(1)
	f.waitParked()
	return f
}

func (f *fixture) waitRequests(n int) {
	f.t.Helper()
	if err := f.srv.WaitRequests(f.ctx, n); err != nil {
		f.t.Fatal(err)
	}
}

// waitParked waits until the refresher has applied the latest answer and is
// waiting on the fake clock.
func (f *fixture) waitParked() {
	f.t.Helper()
	if err := f.clock.WaitForWaiters(f.ctx, 1); err != nil {
		f.t.Fatalf("refresher never waited on the clock: %v", err)
	}
}

func (f *fixture) budget(name string) *budget.Budget {
	f.t.Helper()
	b, err := f.c.Key(name)
	if err != nil {
		f.t.Fatalf("Key(%q): %v", name, err)
	}
	return b
}

func (f *fixture) lastReport(key string) budgettest.Report {
	f.t.Helper()
	rs := f.srv.Reports()
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Key == key {
			return rs[i]
		}
	}
	f.t.Fatalf("no report for %q", key)
	return budgettest.Report{}
}

// drain calls Allow until it refuses and returns how many it allowed.
func drain(b *budget.Budget) int {
	n := 0
	for b.Allow() {
		n++
		if n > 1e6 {
			panic("Allow never refuses")
		}
	}
	return n
}

func TestAllowSpendsExactlyTheLease(t *testing.T) {
	f := newFixture(t)
	b := f.budget(key)
	r := f.lastReport(key)
	if r.TokensWanted != 50 || r.TokensGranted != 50 {
		t.Fatalf("first report wanted %d, granted %d; want 50 and 50", r.TokensWanted, r.TokensGranted)
	}
	if st := b.Status(); st.Mode != budget.Shared || st.LeaseTokens != 50 || !st.SettingsFromServer {
		t.Fatalf("before spending: %+v, want shared with 50 lease tokens and server settings", st)
	}
	if got := drain(b); got != 50 {
		t.Errorf("Allow granted %d retries, want exactly the 50 leased", got)
	}
	for range 3 {
		if b.Allow() {
			t.Fatal("Allow granted a retry from a drained lease")
		}
	}
	st := b.Status()
	want := budget.KeyStatus{Key: key, Mode: budget.Shared, Allowed: 50, Denied: 4, Granted: 50}
	got := budget.KeyStatus{Key: st.Key, Mode: st.Mode, Allowed: st.Allowed, Denied: st.Denied, Granted: st.Granted}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if st.Settings != (ledger.Settings{Ratio: 0.2, Burst: 1000, MinPerSecond: 100}) {
		t.Errorf("settings = %+v, want the server's", st.Settings)
	}
}

// TestAllowConcurrentNeverOverspends races 32 goroutines for a lease of 50.
func TestAllowConcurrentNeverOverspends(t *testing.T) {
	f := newFixture(t)
	b := f.budget(key)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 32 {
		wg.Go(func() {
			<-start
			for range 500 {
				if b.Allow() {
					allowed.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := allowed.Load(); got != 50 {
		t.Errorf("32 goroutines were allowed %d retries from a lease of 50", got)
	}
	if st := b.Status(); st.Allowed != 50 || st.Denied != 32*500-50 {
		t.Errorf("status allowed %d denied %d, want 50 and %d", st.Allowed, st.Denied, 32*500-50)
	}
}

// TestLeaseReplacesUnspentTokens: a new lease voids what was left of the
// previous one.
func TestLeaseReplacesUnspentTokens(t *testing.T) {
	f := newFixture(t)
	b := f.budget(key)
	for range 10 {
		if !b.Allow() {
			t.Fatal("Allow refused with tokens leased")
		}
	}
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	g := f.lastReport(key).TokensGranted
	if g != 50 {
		t.Fatalf("second grant = %d, want 50", g)
	}
	if got := drain(b); got != int(g) {
		t.Errorf("after renewal Allow granted %d, want the new lease's %d (the old lease's 40 are void)", got, g)
	}
	if st := b.Status(); st.Allowed != 60 || st.Granted != 100 {
		t.Errorf("allowed %d of granted %d, want 60 of 100", st.Allowed, st.Granted)
	}
}

// TestLeaseExpiresWithoutRenewal: budgetd hangs (no error), the lease runs
// out on the local clock, and its tokens stop counting at that instant.
func TestLeaseExpiresWithoutRenewal(t *testing.T) {
	f := newFixture(t)
	b := f.budget(key)
	release := f.srv.Hold()
	defer release()

	f.clock.Advance(2*time.Second - time.Nanosecond) // lease: 2 s from arrival
	if st := b.Status(); st.Mode != budget.Shared || st.LeaseTokens != 50 {
		t.Fatalf("1 ns before expiry: %+v, want shared with 50 tokens", st)
	}
	f.clock.Advance(time.Nanosecond)
	if b.Allow() {
		t.Fatal("Allow spent a token of an expired lease")
	}
	st := b.Status()
	if st.Mode != budget.Fallback || st.Cause != budget.CauseExpired || st.LeaseTokens != 0 || st.FallbackEntries != 1 {
		t.Fatalf("at expiry: mode %v cause %q lease tokens %d entries %d; want fallback, %q, 0, 1",
			st.Mode, st.Cause, st.LeaseTokens, st.FallbackEntries, budget.CauseExpired)
	}
	if got := gauge(t, f.reg, "levee_budget_fallback", key); got != 1 {
		t.Errorf("levee_budget_fallback = %v, want 1", got)
	}

	release()
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatalf("Refresh after release: %v", err)
	}
	if st := b.Status(); st.Mode != budget.Shared || st.LeaseTokens == 0 {
		t.Errorf("after renewal: mode %v, %d lease tokens; want shared with tokens", st.Mode, st.LeaseTokens)
	}
	if got := gauge(t, f.reg, "levee_budget_fallback", key); got != 0 {
		t.Errorf("levee_budget_fallback = %v, want 0", got)
	}
}

// TestFallbackWhenBudgetdFails is the whole outage: budgetd answers
// UNAVAILABLE, the key falls back to Ratio × this process's own first
// attempts plus the local minimum, the counts made meanwhile reach budgetd
// when it is back, and the key returns to the shared budget.
func TestFallbackWhenBudgetdFails(t *testing.T) {
	f := newFixture(t)
	b := f.budget(key)
	retried := 0
	spend := func() int {
		n := drain(b)
		for range n {
			b.RecordRetry()
		}
		retried += n
		return n
	}
	if got := spend(); got != 50 {
		t.Fatalf("shared lease gave %d, want 50", got)
	}

	f.srv.Fail(codes.Unavailable)
	err := f.c.Refresh(f.ctx)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Refresh = %v, want UNAVAILABLE", err)
	}
	st := f.c.Status()
	if st.Mode != budget.Fallback || st.ConsecutiveFailures != 1 || status.Code(st.LastError) != codes.Unavailable {
		t.Fatalf("client status %+v: want fallback after one UNAVAILABLE", st)
	}
	if ks := st.Keys[0]; ks.Cause != budget.CauseRefresh {
		t.Errorf("cause = %q, want %q", ks.Cause, budget.CauseRefresh)
	}

	// Every request fails and asks for a retry: 1,000 first attempts earn
	// Ratio (0.2, the server's last setting) each, so exactly 200 retries.
	const firsts = 1000
	allowed := 0
	for range firsts {
		b.RecordFirstAttempt()
		if b.Allow() {
			allowed++
			b.RecordRetry()
		}
	}
	retried += allowed
	if allowed != firsts/5 {
		t.Errorf("fallback allowed %d retries for %d first attempts, want %d (the server's ratio 0.2)", allowed, firsts, firsts/5)
	}

	// With no traffic, the local minimum (0.1/s) still earns, up to the
	// burst (10): 100 s earn 10.
	f.clock.Advance(100 * time.Second)
	if got := spend(); got != 10 {
		t.Errorf("after 100 s idle in fallback, %d retries allowed; want 10 (0.1/s, burst 10)", got)
	}
	if ks := b.Status(); ks.Mode != budget.Fallback || ks.UnreportedFirst != firsts || ks.UnreportedRetries != uint64(retried) {
		t.Errorf("still failing: mode %v unreported %d/%d, want fallback %d/%d",
			ks.Mode, ks.UnreportedFirst, ks.UnreportedRetries, firsts, retried)
	}

	f.srv.Fail(codes.OK)
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatalf("Refresh after recovery: %v", err)
	}
	ks := b.Status()
	if ks.Mode != budget.Shared || ks.UnreportedFirst != 0 || ks.UnreportedRetries != 0 {
		t.Errorf("recovered: mode %v unreported %d/%d; want shared 0/0", ks.Mode, ks.UnreportedFirst, ks.UnreportedRetries)
	}
	led := f.srv.Ledger(key)
	if led.FirstTotal != firsts || led.RetriesTotal != uint64(retried) {
		t.Errorf("budgetd saw %d first attempts and %d retries, want %d and %d", led.FirstTotal, led.RetriesTotal, firsts, retried)
	}
	if c := f.c.Status(); c.Mode != budget.Shared || c.ConsecutiveFailures != 0 || c.LastError == nil {
		t.Errorf("client after recovery: %+v; want shared, no failures, last error kept", c)
	}
}

// TestFallbackWhenBudgetdStops: the server goes away altogether and comes
// back on the same address.
func TestFallbackWhenBudgetdStops(t *testing.T) {
	f := newFixture(t)
	b := f.budget(key)
	f.srv.Stop()
	if err := f.c.Refresh(f.ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("Refresh with budgetd down = %v, want UNAVAILABLE", err)
	}
	if st := b.Status(); st.Mode != budget.Fallback {
		t.Fatalf("mode %v with budgetd down, want fallback", st.Mode)
	}
	for range 20 {
		b.RecordFirstAttempt()
	}
	if _, err := f.srv.Start(); err != nil {
		t.Fatal(err)
	}
	// The channel reconnects on its own backoff (10 ms here).
	var err error
	for range 200 {
		if err = f.c.Refresh(f.ctx); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("Refresh never succeeded after restart: %v", err)
	}
	if st := b.Status(); st.Mode != budget.Shared {
		t.Errorf("mode %v after restart, want shared", st.Mode)
	}
	if got := f.srv.Ledger(key).FirstTotal; got != 20 {
		t.Errorf("budgetd saw %d first attempts, want the 20 made while it was down", got)
	}
}

// TestStartsInFallback: until the first lease, a key runs on the local
// budget, which starts empty and earns from the first attempts.
func TestStartsInFallback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f := &fixture{t: t, clock: budgettest.NewClock(t0), reg: prometheus.NewRegistry(), ctx: ctx}
	f.startServer(budgettest.Config{})
	release := f.srv.Hold()
	defer release()
	f.startClient(f.config())
	b := f.budget(key)
	st := b.Status()
	if st.Mode != budget.Fallback || st.Cause != budget.CauseNoLease || st.HasLease || st.SettingsFromServer {
		t.Fatalf("before any lease: %+v; want fallback, %q, no lease", st, budget.CauseNoLease)
	}
	if st.Settings.Ratio != budget.DefaultConfig().DefaultRatio {
		t.Errorf("ratio before any lease = %v, want the configured default", st.Settings.Ratio)
	}
	if b.Allow() {
		t.Error("Allow granted a retry with no lease and no first attempt")
	}
	for range 10 {
		b.RecordFirstAttempt()
	}
	if !b.Allow() || b.Allow() {
		t.Error("10 first attempts at the default ratio 0.1 should allow exactly one retry")
	}
	release()
	if err := f.c.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if st := b.Status(); st.Mode != budget.Shared {
		t.Errorf("mode after first lease = %v, want shared", st.Mode)
	}
}

func TestCountsReported(t *testing.T) {
	f := newFixture(t)
	b := f.budget(key)
	if r := f.lastReport(key); r.FirstAttempts != 0 || r.Retries != 0 || r.ClientID != "test-client" {
		t.Fatalf("first report %+v, want no counts from test-client", r)
	}
	for range 123 {
		b.RecordFirstAttempt()
	}
	for range 7 {
		b.RecordRetry()
	}
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatal(err)
	}
	if r := f.lastReport(key); r.FirstAttempts != 123 || r.Retries != 7 {
		t.Errorf("report = %d first, %d retries; want 123, 7", r.FirstAttempts, r.Retries)
	}
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatal(err)
	}
	if r := f.lastReport(key); r.FirstAttempts != 0 || r.Retries != 0 {
		t.Errorf("next report = %d first, %d retries; want deltas 0, 0", r.FirstAttempts, r.Retries)
	}
}

// TestTokensWanted: want = ceil(Ratio × first attempts per second × lease
// period) + headroom, capped.
func TestTokensWanted(t *testing.T) {
	f := newFixture(t, func(c *budget.Config) { c.TokensHeadroom = 2; c.MaxTokensWanted = 100 })
	b := f.budget(key)
	for _, tc := range []struct {
		firsts int
		want   uint32
	}{
		// The rate is smoothed (α 0.5) over 1 s refresh intervals; lease 2 s.
		{firsts: 100, want: 20 + 2}, // rate 50/s: ceil(0.2 × 50 × 2) + 2
		{firsts: 100, want: 30 + 2}, // rate 75/s
		{firsts: 10000, want: 100},  // rate 5037.5/s: capped
		{firsts: 0, want: 100},      // rate 2518.75/s: still capped
	} {
		for range tc.firsts {
			b.RecordFirstAttempt()
		}
		f.clock.Advance(time.Second)
		if err := f.c.Refresh(f.ctx); err != nil {
			t.Fatal(err)
		}
		if got := f.lastReport(key).TokensWanted; got != tc.want {
			t.Errorf("after %d first attempts: wanted %d, want %d", tc.firsts, got, tc.want)
		}
	}
}

// TestRefreshSchedule checks the waits the refresher puts on the clock:
// budgetd's refresh_after less up to 10% local jitter, never more than ¾ of
// the lease, and a jittered backoff after failures.
func TestRefreshSchedule(t *testing.T) {
	for _, tc := range []struct {
		name         string
		refreshAfter time.Duration
		validFor     time.Duration
		lo, hi       time.Duration
	}{
		{name: "server's refresh_after", refreshAfter: time.Second, validFor: 2 * time.Second, lo: 900 * time.Millisecond, hi: time.Second},
		{name: "capped at 3/4 of the lease", refreshAfter: 10 * time.Second, validFor: 2 * time.Second, lo: 1350 * time.Millisecond, hi: 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			f := &fixture{t: t, clock: budgettest.NewClock(t0), reg: prometheus.NewRegistry(), ctx: ctx}
			f.startServer(budgettest.Config{ValidFor: tc.validFor, RefreshAfter: tc.refreshAfter})
			f.startClient(f.config())
			seen := map[time.Duration]bool{}
			for i := 1; i <= 20; i++ {
				f.waitRequests(i)
				f.waitParked()
				p := f.clock.Pending()
				if len(p) != 1 || p[0] < tc.lo || p[0] > tc.hi {
					t.Fatalf("refresh %d: pending waits %v, want one in [%v, %v]", i, p, tc.lo, tc.hi)
				}
				seen[p[0]] = true
				f.clock.Advance(p[0])
			}
			if len(seen) < 10 {
				t.Errorf("20 refresh waits took only %d distinct values: not jittered", len(seen))
			}
		})
	}

	t.Run("backoff after failures", func(t *testing.T) {
		f := newFixture(t)
		f.srv.Fail(codes.Unavailable)
		for n := 1; n <= 6; n++ {
			p := f.clock.Pending()
			if len(p) != 1 {
				t.Fatalf("pending waits %v, want one", p)
			}
			calls := f.srv.Calls()
			f.clock.Advance(p[0]) // fires the only waiter: none is left
			f.waitParked()        // until the failed refresh set the next
			if f.srv.Calls() != calls+1 {
				t.Fatalf("Lease calls %d, want %d", f.srv.Calls(), calls+1)
			}
			// Full jitter below a ceiling that doubles from 100 ms up to
			// the refresh interval (1 s).
			d := min(time.Second, 100*time.Millisecond<<(n-1))
			if p := f.clock.Pending(); p[0] <= 0 || p[0] > d {
				t.Errorf("after %d failures: wait %v, want in (0, %v]", n, p[0], d)
			}
		}
	})
}

// TestKeysShareOneRequest: every key of a Client goes in one LeaseRequest;
// a new key triggers a refresh.
func TestKeysShareOneRequest(t *testing.T) {
	f := newFixture(t, func(c *budget.Config) { c.Keys = []string{key, "hash"} })
	if r := f.lastReport("hash"); r.KeysInRequest != 2 || r.Seq != 1 {
		t.Errorf("first request: %+v, want both keys in request 1", r)
	}
	b1, b2 := f.budget(key), f.budget(key)
	if b1 != b2 {
		t.Error("Key returned two Budgets for one key")
	}
	// Held, so that the refresh the new key nudges cannot answer before
	// its status is read.
	release := f.srv.Hold()
	nb := f.budget("verify/tenant-a")
	if st := nb.Status(); st.Mode != budget.Fallback || st.Cause != budget.CauseNoLease {
		t.Errorf("new key: mode %v cause %q; want fallback, no lease yet", st.Mode, st.Cause)
	}
	release()
	f.waitRequests(2) // nudged, without advancing the clock
	if r := f.lastReport("verify/tenant-a"); r.KeysInRequest != 3 || r.Seq != 2 {
		t.Errorf("after Key: %+v, want 3 keys in request 2", r)
	}

	if _, err := f.c.Key("bad key"); !errors.Is(err, budget.ErrInvalidKey) {
		t.Errorf("Key(\"bad key\") = %v, want ErrInvalidKey", err)
	}
	for i := 0; ; i++ {
		_, err := f.c.Key("k" + strconv.Itoa(i))
		if err != nil {
			if !errors.Is(err, budget.ErrTooManyKeys) || i+3 != budget.MaxKeys {
				t.Errorf("key %d: %v, want ErrTooManyKeys at key %d", i+3, err, budget.MaxKeys)
			}
			break
		}
	}
}

// TestMissingLease: budgetd answers but leaves a key out. That key goes to
// fallback; the others are renewed; the counts of all were delivered.
func TestMissingLease(t *testing.T) {
	f := newFixture(t, func(c *budget.Config) { c.Keys = []string{key, "hash"} })
	f.srv.Omit("hash", true)
	b, h := f.budget(key), f.budget("hash")
	h.RecordFirstAttempt()
	err := f.c.Refresh(f.ctx)
	if err == nil || !strings.Contains(err.Error(), `"hash"`) {
		t.Fatalf("Refresh = %v, want an error naming the key left out", err)
	}
	if st := h.Status(); st.Mode != budget.Fallback || st.Cause != budget.CauseMissingLease || st.UnreportedFirst != 0 {
		t.Errorf("key left out: mode %v cause %q unreported %d; want fallback, %q, 0",
			st.Mode, st.Cause, st.UnreportedFirst, budget.CauseMissingLease)
	}
	if st := b.Status(); st.Mode != budget.Shared || st.Granted != 100 {
		t.Errorf("other key: mode %v granted %d, want shared and a second lease", st.Mode, st.Granted)
	}
	f.srv.Omit("hash", false)
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatal(err)
	}
	if st := h.Status(); st.Mode != budget.Shared {
		t.Errorf("key back in the answer: mode %v, want shared", st.Mode)
	}
}

// TestReplicas: a comma list is balanced over both replicas, and losing one
// costs nothing once the channel has noticed.
func TestReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := budgettest.NewClock(t0)
	var srvs [2]*budgettest.Server
	var addrs []string
	for i := range srvs {
		srvs[i] = budgettest.NewServer(budgettest.Config{Now: clock.Now})
		addr, err := srvs[i].Start()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srvs[i].Stop)
		addrs = append(addrs, addr)
	}
	cfg := budget.DefaultConfig()
	cfg.Target = strings.Join(addrs, ",")
	cfg.Keys = []string{key}
	cfg.Clock = clock
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := budget.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// round_robin spreads calls once both subchannels are ready.
	for i := 0; srvs[0].Requests() == 0 || srvs[1].Requests() == 0; i++ {
		if i == 500 {
			t.Fatalf("requests per replica %d, %d: not balanced", srvs[0].Requests(), srvs[1].Requests())
		}
		if err := c.Refresh(ctx); err != nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
	srvs[0].Stop()
	// Only calls racing the connection's close may fail: once the channel
	// has seen it (three successes in a row), every call goes to the other.
	for i, ok := 0, 0; ok < 3; i++ {
		if i == 200 {
			t.Fatal("no three refreshes in a row succeeded with one replica of two up")
		}
		if err := c.Refresh(ctx); err != nil {
			ok = 0
			time.Sleep(5 * time.Millisecond)
			continue
		}
		ok++
	}
	before := srvs[1].Requests()
	for range 20 {
		if err := c.Refresh(ctx); err != nil {
			t.Fatalf("Refresh with one replica of two up: %v", err)
		}
	}
	if got := srvs[1].Requests() - before; got < 20 {
		t.Errorf("the live replica answered %d of 20 refreshes", got)
	}
	if st := c.Status(); st.Mode != budget.Shared {
		t.Errorf("mode %v with one replica up, want shared", st.Mode)
	}
}

func TestCloseStopsRefresher(t *testing.T) {
	f := newFixture(t)
	b := f.budget(key)
	if err := f.c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if _, err := f.c.Key("other"); !errors.Is(err, budget.ErrClosed) {
		t.Errorf("Key after Close = %v, want ErrClosed", err)
	}
	if err := f.c.Refresh(f.ctx); !errors.Is(err, budget.ErrClosed) {
		t.Errorf("Refresh after Close = %v, want ErrClosed", err)
	}
	// The lease can no longer be renewed: it is void, and the key runs on
	// its (empty) local budget.
	if b.Allow() {
		t.Error("a closed client's budget spent a token of its voided lease")
	}
	if st := b.Status(); st.Mode != budget.Fallback || st.Cause != budget.CauseClosed || st.LeaseTokens != 0 || st.Allowed != 0 {
		t.Errorf("after Close: %+v; want fallback, %q, no lease tokens, nothing allowed", st, budget.CauseClosed)
	}
	if timers := f.clock.Timers(); len(timers) != 0 {
		t.Errorf("lease timers still armed after Close: %v", timers)
	}
	// goleak (TestMain) checks that the refresher and the connection are gone.
}

func TestConfigValidate(t *testing.T) {
	valid := budget.DefaultConfig()
	valid.Target = "127.0.0.1:7801"
	if err := valid.Validate(); err != nil {
		t.Fatalf("default config with a target: %v", err)
	}
	for _, tc := range []struct {
		name   string
		modify func(*budget.Config)
		field  string // "" means valid
	}{
		{"dns target", func(c *budget.Config) { c.Target = "dns:///budgetd:7801" }, ""},
		{"address list", func(c *budget.Config) { c.Target = "10.0.0.1:7801, 10.0.0.2:7801" }, ""},
		{"no target", func(c *budget.Config) { c.Target = "" }, "Target"},
		{"target in a list", func(c *budget.Config) { c.Target = "dns:///a:1,b:2" }, "Target"},
		{"empty list entry", func(c *budget.Config) { c.Target = "a:1,,b:2" }, "Target"},
		{"client id with space", func(c *budget.Config) { c.ClientID = "a b" }, "ClientID"},
		{"client id too long", func(c *budget.Config) { c.ClientID = strings.Repeat("a", 129) }, "ClientID"},
		{"bad key", func(c *budget.Config) { c.Keys = []string{"ok", ""} }, "Keys"},
		{"refresh too fast", func(c *budget.Config) { c.RefreshInterval = time.Millisecond }, "RefreshInterval"},
		{"no lease timeout", func(c *budget.Config) { c.LeaseTimeout = 0 }, "LeaseTimeout"},
		{"negative ratio", func(c *budget.Config) { c.DefaultRatio = -0.1 }, "DefaultRatio"},
		{"zero fallback minimum", func(c *budget.Config) { c.FallbackMinPerSecond = 0 }, "FallbackMinPerSecond"},
		{"fallback burst below one", func(c *budget.Config) { c.FallbackBurst = 0.5 }, "FallbackBurst"},
		{"no tokens wanted", func(c *budget.Config) { c.MaxTokensWanted = 0 }, "MaxTokensWanted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid
			tc.modify(&c)
			err := c.Validate()
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.field != "" && (!errors.Is(err, budget.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field)):
				t.Errorf("Validate = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
	if id := budget.DefaultClientID(); budget.ValidateKey(id) != nil {
		t.Errorf("DefaultClientID %q is not a valid name", id)
	}
}

// gauge returns the value of the gauge name{key=key} in reg.
func gauge(t *testing.T, reg *prometheus.Registry, name, key string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "key" && l.GetValue() == key {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{key=%q}", name, key)
	return 0
}

// TestFallbackCountsReportedAsEarnedLocally: first attempts sent while the
// key was in fallback have funded its local budget; the catch-up report
// after the outage says so (fallback_first_attempts), and says how long the
// counts took (span), so that budgetd neither earns on them again nor reads
// them as one busy second. Counts sent in shared mode are reported as such.
func TestFallbackCountsReportedAsEarnedLocally(t *testing.T) {
	f := newFixture(t)
	b := f.budget(key)
	// The refresher runs on its own as the fake clock moves, so the counts
	// of one phase may arrive in more than one report: sum them.
	seen := len(f.srv.Reports())
	phase := func() (first, fallback uint64, span time.Duration) {
		rs := f.srv.Reports()
		for _, r := range rs[seen:] {
			if r.Key == key {
				first += r.FirstAttempts
				fallback += r.FallbackFirstAttempts
				span += r.Span
			}
		}
		seen = len(rs)
		return first, fallback, span
	}
	for range 40 {
		b.RecordFirstAttempt()
	}
	f.clock.Advance(time.Second)
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatal(err)
	}
	if first, fb, span := phase(); first != 40 || fb != 0 || span != time.Second {
		t.Errorf("shared-mode reports: first %d, fallback %d, span %v; want 40, 0, 1s", first, fb, span)
	}

	// A 30 s outage: 1,000 first attempts in fallback.
	f.srv.Fail(codes.Unavailable)
	if err := f.c.Refresh(f.ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("Refresh = %v, want UNAVAILABLE", err)
	}
	for range 1000 {
		b.RecordFirstAttempt()
		if b.Allow() {
			b.RecordRetry()
		}
	}
	f.clock.Advance(30 * time.Second)
	f.srv.Fail(codes.OK)
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatal(err)
	}
	if first, fb, span := phase(); first != 1000 || fb != 1000 || span != 30*time.Second {
		t.Errorf("catch-up reports: first %d, fallback %d, span %v; want 1000, 1000, 30s", first, fb, span)
	}

	// Back in shared mode: nothing is counted as fallback any more.
	for range 10 {
		b.RecordFirstAttempt()
	}
	f.clock.Advance(time.Second)
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatal(err)
	}
	if first, fb, _ := phase(); first != 10 || fb != 0 {
		t.Errorf("after recovery: first %d, fallback %d; want 10, 0", first, fb)
	}
}

// TestFallbackEarnsItsShareOfTheFleetMinimum: once budgetd has sent a lease,
// an idle key in fallback earns this process's share of the fleet's
// min_per_second (here the only client: all of it, 1/s), not the per-process
// FallbackMinPerSecond, so that hundreds of processes in fallback together
// earn what budgetd would.
func TestFallbackEarnsItsShareOfTheFleetMinimum(t *testing.T) {
	f := newFixture(t, func(c *budget.Config) {
		c.FallbackMinPerSecond = 5
		c.FallbackBurst = 100
	})
	f.srv.SetSettings(key, ledger.Settings{Ratio: 0.2, Burst: 1000, MinPerSecond: 1})
	f.clock.Advance(time.Second)
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatal(err)
	}
	b := f.budget(key)
	drain(b)
	f.srv.Fail(codes.Unavailable)
	if err := f.c.Refresh(f.ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("Refresh = %v, want UNAVAILABLE", err)
	}
	f.clock.Advance(20 * time.Second)
	if got := drain(b); got < 19 || got > 21 {
		t.Errorf("20 s idle in fallback allowed %d retries; want 20 (the fleet's 1/s), not 100 (FallbackMinPerSecond 5/s)", got)
	}
}

// A key in fallback earns lazily, when spent from; its Status (and the
// levee_budget_tokens gauge) must still say what Allow could spend now, not
// the 0 of a bucket nobody has drawn on. It read 0 through a whole etcd
// quorum loss in the fault suite while the gateway could retry.
func TestFallbackTokensShowWhatAllowWouldSpend(t *testing.T) {
	clk := budgettest.NewClock(t0)
	cfg := budget.DefaultConfig()
	cfg.Target = "127.0.0.1:1" // nothing there: fallback from the start
	cfg.Keys = []string{key}
	cfg.Clock = clk // standing still: the first attempts alone earn
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	b := openKey(t, cfg, key)
	for range 50 {
		b.RecordFirstAttempt()
	}
	st := b.Status()
	want := 50 * cfg.DefaultRatio // 5 tokens, under the burst of 10
	if st.Mode != budget.Fallback || st.FallbackTokens != want {
		t.Fatalf("after 50 first attempts in fallback: mode %v, fallback tokens %v; want fallback, %v", st.Mode, st.FallbackTokens, want)
	}
	spent := 0
	for b.Allow() {
		spent++
	}
	if float64(spent) != want {
		t.Errorf("Allow spent %d tokens, Status said %v", spent, want)
	}
	if got := b.Status().FallbackTokens; got != 0 {
		t.Errorf("fallback tokens %v after spending them all, want 0", got)
	}
	for range 1000 {
		b.RecordFirstAttempt()
	}
	if got := b.Status().FallbackTokens; got != cfg.FallbackBurst {
		t.Errorf("fallback tokens %v after 1,000 first attempts, want the burst %v", got, cfg.FallbackBurst)
	}
}

// TestFallbackCountsMadeWhileALeaseIsInFlight: first attempts sent in
// fallback after a report left but before its lease landed are still
// reported as earned locally, though the key is shared again by the time
// the next report is built.
func TestFallbackCountsMadeWhileALeaseIsInFlight(t *testing.T) {
	f := newFixture(t)
	b := f.budget(key)
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatal(err)
	}
	seen := len(f.srv.Reports())
	f.srv.Fail(codes.Unavailable)
	if err := f.c.Refresh(f.ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("Refresh = %v, want UNAVAILABLE", err)
	}
	for range 100 {
		b.RecordFirstAttempt()
	}

	// The next report leaves with those 100 and waits at budgetd.
	f.srv.Fail(codes.OK)
	release := f.srv.Hold()
	defer release()
	calls := f.srv.Calls()
	done := make(chan error, 1)
	go func() { done <- f.c.Refresh(f.ctx) }()
	for f.srv.Calls() == calls {
		select {
		case <-f.ctx.Done():
			t.Fatal("the held report never reached budgetd")
		case <-time.After(time.Millisecond):
		}
	}
	for range 50 { // still in fallback: its lease has not landed
		b.RecordFirstAttempt()
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-f.ctx.Done():
		t.Fatal("the held Refresh never returned")
	}
	if st := b.Status(); st.Mode != budget.Shared {
		t.Fatalf("after the lease landed: mode %v, want shared", st.Mode)
	}
	if err := f.c.Refresh(f.ctx); err != nil {
		t.Fatal(err)
	}
	var first, fallback uint64
	for _, r := range f.srv.Reports()[seen:] {
		if r.Key == key {
			first += r.FirstAttempts
			fallback += r.FallbackFirstAttempts
		}
	}
	if first != 150 || fallback != 150 {
		t.Errorf("reported first %d, earned locally %d; want 150, 150", first, fallback)
	}
}

// openKey starts a Client from cfg, closed (and its Close checked) when the
// test ends, and returns its Budget for key.
func openKey(t *testing.T, cfg budget.Config, key string) *budget.Budget {
	t.Helper()
	c, err := budget.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	b, err := c.Key(key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
