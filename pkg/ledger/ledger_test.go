package ledger

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// report is one plain report (nothing earned locally, span measured by the
// ledger) and the tokens it was granted.
func report(l *Ledger, id string, first, retries uint64, want uint32, now time.Time) uint32 {
	return l.Report(id, Counts{First: first, Retries: retries}, want, now).Tokens
}

// TestLedgerFleetBound drives 500 clients that all see 100% failures and
// want every retry, and checks by counting that the tokens granted never
// exceed what the fleet earned: Ratio × first attempts + MinPerSecond × time
// (the bucket starts empty), at every report and over every 1 s window.
func TestLedgerFleetBound(t *testing.T) {
	s := Settings{Ratio: 0.1, Burst: 50, MinPerSecond: 2}
	lease := time.Second
	l := NewLedger(s, lease, t0)
	rng := rand.New(rand.NewPCG(1, 2))

	const clients = 500
	now := t0
	var first, granted uint64
	type sample struct {
		at             time.Time
		first, granted uint64
	}
	var samples []sample
	pending := make([]uint64, clients) // first attempts since last report
	for step := range 20_000 {
		now = now.Add(time.Duration(rng.IntN(4)) * time.Millisecond)
		c := step % clients
		n := uint64(rng.IntN(20)) // this client's first attempts since its report
		pending[c] += n
		g := report(l, fmt.Sprintf("c%03d", c), pending[c], 0, 1000, now)
		first += pending[c]
		pending[c] = 0
		granted += uint64(g)
		earned := s.Ratio*float64(first) + s.MinPerSecond*now.Sub(t0).Seconds()
		if float64(granted) > earned+1e-6 {
			t.Fatalf("step %d: granted %d > earned %.2f (first %d)", step, granted, earned, first)
		}
		samples = append(samples, sample{now, first, granted})
	}
	// Every window [a, b]: granted ≤ cap at a + Ratio × first + Min × length.
	// The cap is at most Burst + Ratio × (fleet rate) × lease; bound the rate
	// by the highest per-second first attempts seen.
	maxRate := 0.0
	for i, j := 0, 0; i < len(samples); i++ {
		for samples[i].at.Sub(samples[j].at) > time.Second {
			j++
		}
		maxRate = max(maxRate, float64(samples[i].first-samples[j].first))
	}
	capMax := s.Burst + s.Ratio*maxRate*lease.Seconds()
	for i := 0; i < len(samples); i += 97 {
		for j := i + 1; j < len(samples); j += 89 {
			a, b := samples[i], samples[j]
			allowed := capMax + s.Ratio*float64(b.first-a.first) + s.MinPerSecond*b.at.Sub(a.at).Seconds()
			if got := float64(b.granted - a.granted); got > allowed+1e-6 {
				t.Fatalf("window %v..%v: granted %v > allowed %.2f", a.at.Sub(t0), b.at.Sub(t0), got, allowed)
			}
		}
	}
	if granted == 0 {
		t.Fatal("no token was ever granted: the bound holds vacuously")
	}
	t.Logf("500 clients: first attempts %d, retries granted %d (%.3f per first attempt)", first, granted, float64(granted)/float64(first))
}

// TestLedgerFairness: one client with 10× the traffic of each of 49 others
// gets no more than its proportional share of scarce tokens, and the quiet
// ones are not starved.
func TestLedgerFairness(t *testing.T) {
	s := Settings{Ratio: 0.1, Burst: 10, MinPerSecond: 0}
	l := NewLedger(s, time.Second, t0)
	now := t0
	got := map[string]uint64{}
	for range 200 {
		now = now.Add(time.Second)
		for c := range 50 {
			id := fmt.Sprintf("c%02d", c)
			first := uint64(10)
			if c == 0 {
				first = 100
			}
			// Everyone wants far more than exists.
			got[id] += uint64(report(l, id, first, first, 10_000, now.Add(time.Duration(c)*time.Millisecond)))
		}
	}
	var total uint64
	for _, v := range got {
		total += v
	}
	noisyShare := float64(got["c00"]) / float64(total)
	want := 100.0 / (100 + 49*10) // its share of first attempts
	if noisyShare > want*1.05 {
		t.Errorf("noisy client took %.3f of the tokens, its traffic share is %.3f", noisyShare, want)
	}
	for c := 1; c < 50; c++ {
		id := fmt.Sprintf("c%02d", c)
		if got[id] == 0 {
			t.Errorf("quiet client %s was starved", id)
		}
	}
	t.Logf("noisy client: %d of %d tokens (%.3f; traffic share %.3f)", got["c00"], total, noisyShare, want)
}

// TestLedgerAbundant: when tokens are plentiful every client gets what it
// asks for.
func TestLedgerAbundant(t *testing.T) {
	l := NewLedger(Settings{Ratio: 0.5, Burst: 1000, MinPerSecond: 0}, time.Second, t0)
	now := t0
	for c := range 3 {
		report(l, fmt.Sprintf("c%d", c), 1000, 0, 0, now) // fill the bucket
	}
	now = now.Add(time.Second)
	for c := range 3 {
		if g := report(l, fmt.Sprintf("c%d", c), 1000, 0, 5, now); g != 5 {
			t.Errorf("client %d granted %d, want 5", c, g)
		}
	}
}

// TestLedgerStartsEmpty: a new ledger (a new leader) grants nothing until
// reports have earned tokens.
func TestLedgerStartsEmpty(t *testing.T) {
	l := NewLedger(Settings{Ratio: 0.1, Burst: 1000, MinPerSecond: 0}, time.Second, t0)
	if g := report(l, "a", 0, 0, 100, t0); g != 0 {
		t.Errorf("fresh ledger granted %d, want 0", g)
	}
	if g := report(l, "a", 100, 0, 100, t0.Add(time.Second)); g == 0 || g > 10 {
		t.Errorf("after 100 first attempts at ratio 0.1 granted %d, want 1..10", g)
	}
}

func TestLedgerSetSettingsAndForget(t *testing.T) {
	l := NewLedger(Settings{Ratio: 1, Burst: 1000, MinPerSecond: 0}, time.Second, t0)
	report(l, "a", 500, 0, 0, t0)
	if tok := l.Status(t0).Tokens; tok != 500 {
		t.Fatalf("tokens = %v, want 500", tok)
	}
	l.SetSettings(Settings{Ratio: 1, Burst: 10, MinPerSecond: 0}, t0)
	st := l.Status(t0)
	// The cap is the new burst plus ratio × rate × lease: the 500 saved
	// tokens above it are gone.
	if limit := 10 + 1*st.FirstPerSecond*1; st.Tokens > limit+1e-9 || st.Tokens >= 500 {
		t.Errorf("tokens after lowering the burst = %v, want ≤ %v (burst 10 + ratio × %v/s × 1 s)", st.Tokens, limit, st.FirstPerSecond)
	}
	report(l, "b", 0, 0, 1, t0.Add(time.Second))
	l.Forget(t0.Add(time.Minute), 30*time.Second)
	if n := len(l.Status(t0.Add(time.Minute)).Clients); n != 0 {
		t.Errorf("%d clients remain after Forget, want 0", n)
	}
}

func TestSettingsValidate(t *testing.T) {
	if err := DefaultSettings().Validate(); err != nil {
		t.Fatal(err)
	}
	err := Settings{Ratio: -1, Burst: 2e9, MinPerSecond: -3}.Validate()
	for _, field := range []string{"ratio", "burst", "min_per_second"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate() = %v, want it to name %s", err, field)
		}
	}
}

// TestLedgerDoesNotEarnOnFallbackCounts: first attempts a client sent while
// in fallback were earned on by its local budget; reported after an outage
// they count in the rates and totals but earn the fleet nothing, so the
// catch-up report cannot fund the same retries twice.
func TestLedgerDoesNotEarnOnFallbackCounts(t *testing.T) {
	s := Settings{Ratio: 0.1, Burst: 1000, MinPerSecond: 0}
	l := NewLedger(s, time.Second, t0)
	now := t0.Add(5 * time.Second) // past the first round
	// 30 s of an outage: 3,000 first attempts, all in fallback.
	g := l.Report("a", Counts{First: 3000, Fallback: 3000, Span: 30 * time.Second}, 1000, now)
	if g.Tokens != 0 {
		t.Errorf("a catch-up report of fallback counts was granted %d tokens, want 0", g.Tokens)
	}
	if st := l.Status(now); st.FirstTotal != 3000 || st.Tokens != 0 {
		t.Errorf("first_total %d, tokens %v; want 3000 and 0", st.FirstTotal, st.Tokens)
	}
	// Counts sent in shared mode still earn.
	now = now.Add(time.Second)
	if g := l.Report("a", Counts{First: 100, Fallback: 0, Span: time.Second}, 1000, now); g.Tokens != 10 {
		t.Errorf("100 shared-mode first attempts at ratio 0.1 granted %d, want 10", g.Tokens)
	}
	// A Fallback above First counts as First.
	now = now.Add(time.Second)
	if g := l.Report("a", Counts{First: 100, Fallback: 500, Span: time.Second}, 1000, now); g.Tokens != 0 {
		t.Errorf("fallback > first granted %d, want 0", g.Tokens)
	}
}

// TestLedgerSpreadsCatchUpOverItsSpan: a report covering 30 s of traffic at
// 100/s reads as 100/s, not as 3,000 in one second; the cap (which follows
// the rate) and the client's weight stay what the traffic was.
func TestLedgerSpreadsCatchUpOverItsSpan(t *testing.T) {
	l := NewLedger(Settings{Ratio: 0.1, Burst: 10, MinPerSecond: 0}, time.Second, t0)
	now := t0.Add(30 * time.Second)
	l.Report("a", Counts{First: 3000, Fallback: 3000, Span: 30 * time.Second}, 0, now)
	st := l.Status(now)
	if got := st.FirstPerSecond; got < 90 || got > 110 {
		t.Errorf("fleet rate after a 30 s catch-up of 3,000 = %.1f/s, want about 100", got)
	}
	if got := st.Clients[0].FirstPerSecond; got < 90 || got > 110 {
		t.Errorf("client rate after a 30 s catch-up of 3,000 = %.1f/s, want about 100", got)
	}
	// Without a span the ledger uses its own measure (one lease period for a
	// first report).
	l2 := NewLedger(Settings{Ratio: 0.1, Burst: 10, MinPerSecond: 0}, time.Second, t0)
	l2.Report("a", Counts{First: 100}, 0, now)
	if got := l2.Status(now).FirstPerSecond; got < 45 || got > 105 {
		t.Errorf("fleet rate after one report of 100 with no span = %.1f/s, want 50..100", got)
	}
}

// TestLedgerFairFirstRound: a new leader that hears from 20 equal clients
// one after the other in its first round grants each the same tokens, not
// everything to whoever reported first.
func TestLedgerFairFirstRound(t *testing.T) {
	l := NewLedger(Settings{Ratio: 0.1, Burst: 1000, MinPerSecond: 0}, time.Second, t0)
	var grants []uint32
	for c := range 20 {
		now := t0.Add(time.Duration(c) * 40 * time.Millisecond)
		grants = append(grants, l.Report(fmt.Sprintf("c%02d", c), Counts{First: 100, Span: time.Second}, 1000, now).Tokens)
	}
	for c, g := range grants {
		if g != 10 {
			t.Errorf("first round: client %d of 20 (100 first attempts each, ratio 0.1) granted %d, want 10; all: %v", c, g, grants)
			break
		}
	}
	// After the first round the weighted split takes over. A client that
	// joins then is weighed by its first report's traffic at once, not held
	// at the floor: over its first two rounds it gets about what it earned.
	var late uint32
	for round := range 2 {
		now := t0.Add(time.Duration(2+round) * time.Second)
		for c := range 20 {
			l.Report(fmt.Sprintf("c%02d", c), Counts{First: 100, Span: time.Second}, 1000, now)
		}
		late += l.Report("late", Counts{First: 100, Span: time.Second}, 1000, now).Tokens
	}
	if late < 8 {
		t.Errorf("a client joining a busy fleet was granted %d over two rounds of 100 first attempts, want about 10+", late)
	}
}

// TestLedgerSplitsTheMinimum: each client's fallback share of MinPerSecond
// follows its traffic, and the shares add up to MinPerSecond.
func TestLedgerSplitsTheMinimum(t *testing.T) {
	l := NewLedger(Settings{Ratio: 0.1, Burst: 10, MinPerSecond: 2}, time.Second, t0)
	now := t0.Add(3 * time.Second)
	var last map[string]float64
	for round := range 20 {
		now = now.Add(time.Second)
		last = map[string]float64{}
		for c := range 4 {
			first := uint64(10)
			if c == 0 {
				first = 70
			}
			last[fmt.Sprint(c)] = l.Report(fmt.Sprint(c), Counts{First: first, Span: time.Second}, 5, now).FallbackMinPerSecond
		}
		_ = round
	}
	sum := 0.0
	for _, v := range last {
		sum += v
	}
	if sum < 1.9 || sum > 2.1 {
		t.Errorf("shares of min_per_second add up to %.3f, want 2: %v", sum, last)
	}
	if r := last["0"] / last["1"]; r < 5 || r > 8 {
		t.Errorf("share of a client with 7× the traffic is %.2f× a quiet one's, want about 7: %v", r, last)
	}
}

// TestLedgerHoldsNoMoreThanItsCap: a fleet that earns tokens but never
// leases them saves up to the cap (Burst + Ratio × first-attempt rate ×
// lease) and no further, however long it runs; what it saves below the cap
// is not lost.
func TestLedgerHoldsNoMoreThanItsCap(t *testing.T) {
	l := NewLedger(Settings{Ratio: 0.1, Burst: 50, MinPerSecond: 5}, time.Second, t0)
	now := t0
	for range 100 { // 100 s at 100 first attempts a second: 1,500 tokens earned
		now = now.Add(time.Second)
		report(l, "a", 100, 0, 0, now)
	}
	st := l.Status(now)
	limit := 50 + 0.1*st.FirstPerSecond*1
	if st.FirstPerSecond < 90 || st.FirstPerSecond > 110 {
		t.Fatalf("first attempts per second = %v, want about 100", st.FirstPerSecond)
	}
	if st.Tokens > limit+1e-9 || st.Tokens < 50 {
		t.Errorf("tokens held = %v, want between the burst (50) and the cap %v", st.Tokens, limit)
	}
}

// A client's claimed span can lower its own rate, never raise it: two
// clients sending the same first attempts every second, one of which
// claims each report took a millisecond, read the same rate and get the
// same tokens.
func TestLedgerShortSpanDoesNotRaiseAClientsShare(t *testing.T) {
	l := NewLedger(Settings{Ratio: 0.1, Burst: 10, MinPerSecond: 0}, time.Second, t0)
	now := t0
	got := map[string]uint64{}
	for range 60 {
		now = now.Add(time.Second)
		got["honest"] += uint64(l.Report("honest", Counts{First: 100, Span: time.Second}, 1000, now).Tokens)
		got["short"] += uint64(l.Report("short", Counts{First: 100, Span: time.Millisecond}, 1000, now.Add(time.Millisecond)).Tokens)
	}
	rates := map[string]float64{}
	for _, c := range l.Status(now).Clients {
		rates[c.ID] = c.FirstPerSecond
	}
	if r := rates["short"]; r > rates["honest"]*1.05 {
		t.Errorf("a client claiming 1 ms spans reads %.0f/s, an honest one %.0f/s: the claim raised its rate", r, rates["honest"])
	}
	if g := float64(got["short"]); g > float64(got["honest"])*1.05 {
		t.Errorf("a client claiming 1 ms spans got %d tokens, an honest one %d", got["short"], got["honest"])
	}
	// A longer span than the ledger saw is taken: it lowers the rate.
	l.Report("slow", Counts{First: 100, Span: 10 * time.Second}, 0, now)
	now = now.Add(time.Second)
	l.Report("slow", Counts{First: 100, Span: 10 * time.Second}, 0, now)
	for _, c := range l.Status(now).Clients {
		if c.ID == "slow" && c.FirstPerSecond > 20 {
			t.Errorf("a client claiming 10 s spans for 100 first attempts reads %.0f/s, want about 10", c.FirstPerSecond)
		}
	}
}

func TestCountsScaled(t *testing.T) {
	c := Counts{First: 1000, Fallback: 300, Retries: 99, Span: time.Second}
	if got, want := c.Scaled(0.5), (Counts{First: 500, Fallback: 150, Retries: 49, Span: time.Second}); got != want {
		t.Errorf("Scaled(0.5) = %+v, want %+v", got, want)
	}
	if got := c.Scaled(2); got != c {
		t.Errorf("Scaled(2) = %+v, want it unchanged (clamped to 1)", got)
	}
	if got := c.Scaled(-1); got.First != 0 || got.Retries != 0 {
		t.Errorf("Scaled(-1) = %+v, want no counts", got)
	}
}
