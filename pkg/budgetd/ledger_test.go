package budgetd

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

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
		g := l.Report(fmt.Sprintf("c%03d", c), pending[c], 0, 1000, now)
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
			got[id] += uint64(l.Report(id, first, first, 10_000, now.Add(time.Duration(c)*time.Millisecond)))
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
		l.Report(fmt.Sprintf("c%d", c), 1000, 0, 0, now) // fill the bucket
	}
	now = now.Add(time.Second)
	for c := range 3 {
		if g := l.Report(fmt.Sprintf("c%d", c), 1000, 0, 5, now); g != 5 {
			t.Errorf("client %d granted %d, want 5", c, g)
		}
	}
}

// TestLedgerStartsEmpty: a new ledger (a new leader) grants nothing until
// reports have earned tokens.
func TestLedgerStartsEmpty(t *testing.T) {
	l := NewLedger(Settings{Ratio: 0.1, Burst: 1000, MinPerSecond: 0}, time.Second, t0)
	if g := l.Report("a", 0, 0, 100, t0); g != 0 {
		t.Errorf("fresh ledger granted %d, want 0", g)
	}
	if g := l.Report("a", 100, 0, 100, t0.Add(time.Second)); g == 0 || g > 10 {
		t.Errorf("after 100 first attempts at ratio 0.1 granted %d, want 1..10", g)
	}
}

func TestLedgerSetSettingsAndForget(t *testing.T) {
	l := NewLedger(Settings{Ratio: 1, Burst: 1000, MinPerSecond: 0}, time.Second, t0)
	l.Report("a", 500, 0, 0, t0)
	if tok := l.Status(t0).Tokens; tok != 500 {
		t.Fatalf("tokens = %v, want 500", tok)
	}
	l.SetSettings(Settings{Ratio: 1, Burst: 10, MinPerSecond: 0}, t0)
	st := l.Status(t0)
	if st.Tokens > 10+500*1 { // cap = burst + ratio × rate × lease
		t.Errorf("tokens after lowering the burst = %v", st.Tokens)
	}
	l.Report("b", 0, 0, 1, t0.Add(time.Second))
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
