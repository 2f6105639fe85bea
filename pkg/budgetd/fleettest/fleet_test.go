package fleettest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
	"github.com/leveehq/levee/pkg/ledger"
)

// Replicas, etcd servers and 500 Clients start goroutines; none may outlive
// the tests.
func TestMain(m *testing.M) {
	// These tests measure time: not beside the lab's (see testlock).
	testlock.Shared()
	goleak.VerifyTestMain(m)
}

// key is the budget key every fleet here leases.
const key = "verify"

// settings are budgetd's production defaults, stored in etcd for key.
var settings = ledger.DefaultSettings() // ratio 0.1, burst 100, min_per_second 1

// leaderWait bounds a wait for an election (a re-election after etcd
// returns takes a few 2 s session TTLs at most).
const leaderWait = 15 * time.Second

// Load pacing and sampling. The driver hands out first attempts every tick;
// the sampler reads every client's counters (and the leader's) every
// sampleEvery. Neither period enters any bound: the bounds are checked on
// whatever was counted between two samples, however far apart they were.
const (
	tick        = 10 * time.Millisecond
	sampleEvery = 100 * time.Millisecond
)

func settingsJSON(s ledger.Settings) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// fleetConfig describes n budget Clients.
type fleetConfig struct {
	name   string // client IDs are name-000, name-001, …
	target string // budgetd replicas, as budget.Config.Target
	n      int
	// rate is client i's first attempts per second.
	rate func(i int) float64
	// refresh is the clients' RefreshInterval (budgetd's refresh_after
	// takes over after the first lease).
	refresh time.Duration
	// headroom, when non-zero, replaces budget.Config.TokensHeadroom.
	headroom uint32
}

// fleet is n budget Clients, each its own process as far as budgetd can
// tell (its own client ID, connection and refresher), all in this test
// process.
type fleet struct {
	t       *testing.T
	cfg     fleetConfig
	clients []*budget.Client
	budgets []*budget.Budget
	regs    []*prometheus.Registry
	rates   []float64
	// created is when the first Client was made: every key is in fallback
	// from then until its first lease.
	created time.Time
	// fallbackMin is the clients' FallbackMinPerSecond.
	fallbackMin float64
}

func newFleet(t *testing.T, cfg fleetConfig) *fleet {
	t.Helper()
	f := &fleet{t: t, cfg: cfg, created: time.Now()}
	t.Cleanup(f.close)
	quiet := slog.New(slog.DiscardHandler) // 500 clients announcing each fallback would drown the log
	for i := range cfg.n {
		c := budget.DefaultConfig()
		c.Target = cfg.target
		c.ClientID = fmt.Sprintf("%s-%03d", cfg.name, i)
		c.Keys = []string{key}
		c.RefreshInterval = cfg.refresh
		c.DefaultRatio = settings.Ratio
		if cfg.headroom > 0 {
			c.TokensHeadroom = cfg.headroom
		}
		c.Logger = quiet
		reg := prometheus.NewRegistry()
		c.Registry = reg
		cl, err := budget.New(c)
		if err != nil {
			t.Fatalf("budget.New(%s): %v", c.ClientID, err)
		}
		b, err := cl.Key(key)
		if err != nil {
			t.Fatalf("Key: %v", err)
		}
		f.clients = append(f.clients, cl)
		f.budgets = append(f.budgets, b)
		f.regs = append(f.regs, reg)
		f.rates = append(f.rates, cfg.rate(i))
		f.fallbackMin = c.FallbackMinPerSecond
	}
	return f
}

func (f *fleet) close() {
	var wg sync.WaitGroup
	for _, c := range f.clients {
		wg.Go(func() { _ = c.Close() })
	}
	wg.Wait()
}

// drive starts the load: every tick each client sends its share of first
// attempts; every one fails, and the client asks to retry it (Allow), and
// retries only if allowed. Retries fail too and are not retried again. The
// returned function stops the load and waits for the driver.
func (f *fleet) drive() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		acc := make([]float64, len(f.budgets))
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
			}
			for i, b := range f.budgets {
				acc[i] += f.rates[i] * tick.Seconds()
				for ; acc[i] >= 1; acc[i]-- {
					b.RecordFirstAttempt() // … and it fails
					if b.Allow() {
						b.RecordRetry() // … and it fails too
					}
				}
			}
		}
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			wg.Wait()
		})
	}
	f.t.Cleanup(stop)
	return stop
}

// waitFor polls cond every 20 ms until it holds, failing the test after
// timeout; it returns how long that took.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("after %v: still waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// modes counts the clients in shared mode and in fallback now.
func (f *fleet) modes() (shared, fallback int) {
	for _, b := range f.budgets {
		if b.Status().Mode == budget.Shared {
			shared++
		} else {
			fallback++
		}
	}
	return shared, fallback
}

func (f *fleet) allShared() bool {
	shared, _ := f.modes()
	return shared == len(f.budgets)
}

// firstAttempts is what the fleet has sent so far.
func (f *fleet) firstAttempts() uint64 {
	var n uint64
	for _, b := range f.budgets {
		n += b.Status().FirstAttempts
	}
	return n
}

// refreshErrors sums the clients' failed refreshes
// (levee_budget_refreshes_total{result="error"}).
func (f *fleet) refreshErrors() float64 {
	var n float64
	for _, reg := range f.regs {
		n += metricValue(f.t, reg, "levee_budget_refreshes_total", "result", "error")
	}
	return n
}

// logRefreshErrors logs the clients' latest refresh errors, counted by
// message (a failed refresh moves a client to fallback; a client keeps its
// latest error after it recovers, so these include the start-up's).
func (f *fleet) logRefreshErrors(t *testing.T) {
	t.Helper()
	seen := map[string]int{}
	for _, c := range f.clients {
		if err := c.Status().LastError; err != nil {
			seen[err.Error()]++
		}
	}
	for msg, n := range seen {
		t.Logf("latest refresh error (kept after recovery) of %d clients: %s", n, msg)
	}
}

// clientSample is one client's counters at one instant (budget.KeyStatus).
type clientSample struct {
	mode                     budget.Mode
	leader                   string
	first, retries, allowed  uint64
	allowedFallback, granted uint64
	entries                  uint64
	leaseTokens              int64
	fallbackTokens           float64
}

// leaderSample is the leader's view of key (Status), read under its lock
// at one instant between before and after.
type leaderSample struct {
	before, after time.Time
	leader        string
	first         uint64 // first attempts reported since this leader took over
	retries       uint64 // retries reported since then
	granted       uint64 // tokens granted since then
	firstPerSec   float64
	retryRatio    float64
	clients       int
}

// sample is every client's counters, read one after the other between
// before and after, and, when asked for, the leader's view.
type sample struct {
	before, after time.Time
	clients       []clientSample
	leader        *leaderSample // nil if not asked for or no answer
}

// sampler reads the fleet (and the leader) every sampleEvery until stopped.
type sampler struct {
	f      *fleet
	status func(context.Context) (*budgetv1.StatusResponse, error)
	done   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	samples []sample
}

// sample starts sampling; status, when not nil, asks a replica for the
// leader's view of key.
func (f *fleet) sample(status func(context.Context) (*budgetv1.StatusResponse, error)) *sampler {
	s := &sampler{f: f, status: status, done: make(chan struct{})}
	s.take() // a baseline before anything else happens
	s.wg.Go(func() {
		tk := time.NewTicker(sampleEvery)
		defer tk.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-tk.C:
			}
			s.take()
		}
	})
	f.t.Cleanup(func() { s.stop() })
	return s
}

func (s *sampler) take() {
	var smp sample
	if s.status != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		before := time.Now()
		resp, err := s.status(ctx)
		after := time.Now()
		cancel()
		if err == nil && resp.GetLeader() != "" && len(resp.GetBudgets()) == 1 {
			b := resp.GetBudgets()[0]
			smp.leader = &leaderSample{
				before: before, after: after, leader: resp.GetLeader(),
				first: b.GetFirstAttemptsTotal(), retries: b.GetRetriesTotal(), granted: b.GetTokensGrantedTotal(),
				firstPerSec: b.GetFirstAttemptsPerSecond(), retryRatio: b.GetRetryRatio(), clients: len(b.GetClients()),
			}
		}
	}
	smp.before = time.Now()
	smp.clients = make([]clientSample, len(s.f.clients))
	for i, c := range s.f.clients {
		st := c.Status()
		k := st.Keys[0]
		smp.clients[i] = clientSample{
			mode: k.Mode, leader: st.Leader,
			first: k.FirstAttempts, retries: k.Retries, allowed: k.Allowed,
			allowedFallback: k.AllowedFallback, granted: k.Granted, entries: k.FallbackEntries,
			leaseTokens: k.LeaseTokens, fallbackTokens: k.FallbackTokens,
		}
	}
	smp.after = time.Now()
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
}

// stop ends the sampling with one last sample and returns them all.
func (s *sampler) stop() []sample {
	select {
	case <-s.done:
	default:
		close(s.done)
		s.wg.Wait()
		s.take()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...)
}

// latest returns the newest sample.
func (s *sampler) latest() sample {
	_, smp := s.latestIndexed()
	return smp
}

// latestIndexed returns the newest sample and its index.
func (s *sampler) latestIndexed() (int, sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.samples) - 1, s.samples[len(s.samples)-1]
}

// totals adds up a sample's clients.
type totals struct {
	first, retries, allowed, allowedFallback, granted, entries uint64
	leaseTokens                                                int64
	shared, fallback                                           int
}

func (s sample) totals() totals {
	var t totals
	for _, c := range s.clients {
		t.first += c.first
		t.retries += c.retries
		t.allowed += c.allowed
		t.allowedFallback += c.allowedFallback
		t.granted += c.granted
		t.entries += c.entries
		t.leaseTokens += c.leaseTokens
		if c.mode == budget.Shared {
			t.shared++
		} else {
			t.fallback++
		}
	}
	return t
}

// fallbackAllowance is, per client, the most its local fallback budget can
// have allowed over the samples, by the documented rule (package budget):
// a key entering fallback starts an empty local budget that earns Ratio per
// first attempt sent from then on plus FallbackMinPerSecond per second;
// nothing else funds it. Every interval between two samples in which the
// client may have been in fallback (in fallback at either end, or it
// entered fallback in between), and the intervals next to it (the counters
// of one sample are read a few instructions apart), earns Ratio × its first
// attempts plus the minimum × its length (measured from the earlier
// sample's start to the later's end, so overstated). Before the first
// sample the client was in fallback from its creation (no lease yet).
func (f *fleet) fallbackAllowance(samples []sample) []float64 {
	out := make([]float64, len(f.clients))
	for c := range f.clients {
		// Before the first sample: in fallback since creation.
		out[c] = settings.Ratio*float64(samples[0].clients[c].first) +
			f.fallbackMin*samples[0].after.Sub(f.created).Seconds()
		flagged := make([]bool, len(samples))
		for k := 1; k < len(samples); k++ {
			a, b := samples[k-1].clients[c], samples[k].clients[c]
			flagged[k] = a.mode == budget.Fallback || b.mode == budget.Fallback || b.entries != a.entries
		}
		for k := 1; k < len(samples); k++ {
			if !flagged[k] && !flagged[k-1] && (k+1 >= len(samples) || !flagged[k+1]) {
				continue
			}
			a, b := samples[k-1], samples[k]
			out[c] += settings.Ratio*float64(b.clients[c].first-a.clients[c].first) +
				f.fallbackMin*b.after.Sub(a.before).Seconds()
		}
	}
	return out
}

// checkFallback asserts that no client's local budget allowed more than its
// fallback allowance, and returns the fleet's allowance and use.
func (f *fleet) checkFallback(t *testing.T, samples []sample) (allowance float64, used uint64) {
	t.Helper()
	per := f.fallbackAllowance(samples)
	last := samples[len(samples)-1]
	for c, a := range per {
		got := last.clients[c].allowedFallback
		if float64(got) > a+1e-9 {
			t.Errorf("client %d: its local fallback budget allowed %d retries; its rule allows at most %.3f", c, got, a)
		}
		allowance += a
		used += got
	}
	return allowance, used
}

// maxReportedPerSecond bounds from above the first attempts reported to
// the leader within any one calendar second: the ledger's rate window
// (Status first_attempts_per_second, which sizes its cap) never exceeds
// that. For each second, the reports in it are at most the difference
// between the last snapshot taken before it began and the first taken after
// it ended (snapshots before the leader took over count as zero).
func maxReportedPerSecond(ls []leaderSample) float64 {
	if len(ls) == 0 {
		return 0
	}
	best := 0.0
	for sec := ls[0].before.Unix(); sec <= ls[len(ls)-1].after.Unix(); sec++ {
		start, end := time.Unix(sec, 0), time.Unix(sec+1, 0)
		lo, hi := uint64(0), ls[len(ls)-1].first
		for _, x := range ls {
			if !x.after.After(start) {
				lo = x.first
			}
		}
		for _, x := range ls {
			if !x.before.Before(end) {
				hi = x.first
				break
			}
		}
		best = max(best, float64(hi-lo))
	}
	return best
}

// checkLedgerWindows checks the ledger's documented bound over every pair
// of the leader's snapshots a < b (one leader, one term):
//
//	granted(a, b) ≤ cap + Ratio × reported(a, b) + MinPerSecond × (b − a)
//
// where cap = Burst + Ratio × (most first attempts reported in a second) ×
// LeaseValidity bounds the tokens the ledger held at a. It returns the cap
// and the number of windows checked.
func checkLedgerWindows(t *testing.T, ls []leaderSample, leaseValidity time.Duration) (capMax float64, windows int) {
	t.Helper()
	capMax = settings.Burst + settings.Ratio*maxReportedPerSecond(ls)*leaseValidity.Seconds()
	worst, worstAt, broken := math.Inf(-1), "", 0
	for i := range ls {
		for j := i + 1; j < len(ls); j++ {
			a, b := ls[i], ls[j]
			if a.leader != b.leader {
				t.Fatalf("leader changed from %s to %s between two snapshots of one term", a.leader, b.leader)
			}
			granted := float64(b.granted - a.granted)
			allowed := capMax + settings.Ratio*float64(b.first-a.first) + settings.MinPerSecond*b.after.Sub(a.before).Seconds()
			windows++
			if granted > allowed+1e-6 {
				if broken++; broken > 5 {
					continue
				}
				t.Errorf("window %d..%d (%v): granted %.0f > allowed %.1f (cap %.1f + %g × %d reported + min × %v)",
					i, j, b.after.Sub(a.before).Round(time.Millisecond), granted, allowed, capMax, settings.Ratio, b.first-a.first, b.after.Sub(a.before).Round(time.Millisecond))
			}
			if m := granted - allowed; m > worst {
				worst, worstAt = m, fmt.Sprintf("%d..%d", i, j)
			}
		}
	}
	if broken > 5 {
		t.Errorf("… and %d more windows over the bound", broken-5)
	}
	t.Logf("ledger bound: %d windows checked, cap %.1f, tightest window %s at %.1f tokens from the bound", windows, capMax, worstAt, -worst)
	return capMax, windows
}

// leaderSamples returns the samples' leader snapshots, in order.
func leaderSamples(samples []sample) []leaderSample {
	var out []leaderSample
	for _, s := range samples {
		if s.leader != nil {
			out = append(out, *s.leader)
		}
	}
	return out
}

// statusOf asks replica r for the leader's view of key.
func statusOf(r *budgetdtest.Replica) func(context.Context) (*budgetv1.StatusResponse, error) {
	return func(ctx context.Context) (*budgetv1.StatusResponse, error) {
		return r.Client().Status(ctx, &budgetv1.StatusRequest{Key: key})
	}
}

// metricValue returns the value of the sample of name with the given
// label pairs in reg (0 if absent).
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}
