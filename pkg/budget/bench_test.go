package budget

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leveehq/levee/pkg/ledger"
)

// benchBudget returns a Budget on the system clock holding a lease of
// tokens that expires in an hour, in shared mode (no refresher: the request
// path is what is measured).
func benchBudget(tokens int64) *Budget {
	cfg := DefaultConfig()
	b := newBudget("bench", &cfg, systemClock{})
	b.mu.Lock()
	b.renew(0, time.Hour, time.Now(), ledger.Settings{Ratio: 0.1}, 0)
	b.mu.Unlock()
	b.lease.Load().tokens.Store(tokens)
	return b
}

// fallbackBudget returns a Budget in fallback with no lease, whose local
// budget earns 0.1 tokens per first attempt.
func fallbackBudget() *Budget {
	cfg := DefaultConfig()
	cfg.FallbackBurst = 1e6
	return newBudget("bench", &cfg, systemClock{})
}

// BenchmarkAllow measures Allow on its three paths, on one goroutine and on
// GOMAXPROCS goroutines sharing one key (the worst case: one cache line).
//
//	go test -run '^$' -bench 'Allow|Record' -benchmem ./pkg/budget/
func BenchmarkAllow(b *testing.B) {
	for _, tc := range []struct {
		name string
		make func() *Budget
		step func(*Budget)
	}{
		{"shared/granted", func() *Budget { return benchBudget(1 << 62) }, func(bu *Budget) { bu.Allow() }},
		{"shared/drained", func() *Budget { return benchBudget(0) }, func(bu *Budget) { bu.Allow() }},
		{"fallback/first+allow", fallbackBudget, func(bu *Budget) { bu.RecordFirstAttempt(); bu.Allow() }},
	} {
		b.Run(tc.name+"/serial", func(b *testing.B) {
			bu := tc.make()
			b.ReportAllocs()
			for b.Loop() {
				tc.step(bu)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			bu := tc.make()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tc.step(bu)
				}
			})
		})
	}
}

func BenchmarkRecordFirstAttempt(b *testing.B) {
	bu := benchBudget(0)
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			bu.RecordFirstAttempt()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bu.RecordFirstAttempt()
			}
		})
	})
}

// BenchmarkAllowLatency times every call and reports percentiles (p50-ns,
// p99-ns, p99.9-ns). Each sample includes one clock read of overhead
// (~20-40 ns): the figures are an upper bound on Allow itself.
func BenchmarkAllowLatency(b *testing.B) {
	const maxSamples = 1 << 20 // per goroutine
	report := func(b *testing.B, s []time.Duration) {
		slices.Sort(s)
		at := func(q float64) float64 { return float64(s[min(int(q*float64(len(s))), len(s)-1)]) }
		b.ReportMetric(at(0.50), "p50-ns")
		b.ReportMetric(at(0.99), "p99-ns")
		b.ReportMetric(at(0.999), "p99.9-ns")
	}
	for _, tc := range []struct {
		name   string
		tokens int64
	}{{"granted", 1 << 62}, {"drained", 0}} {
		b.Run(tc.name+"/serial", func(b *testing.B) {
			bu := benchBudget(tc.tokens)
			samples := make([]time.Duration, 0, maxSamples)
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				bu.Allow()
				d := time.Since(start)
				if len(samples) < maxSamples {
					samples = append(samples, d)
				} else {
					samples[i%maxSamples] = d
				}
			}
			report(b, samples)
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			bu := benchBudget(tc.tokens)
			var mu sync.Mutex
			var all []time.Duration
			b.RunParallel(func(pb *testing.PB) {
				samples := make([]time.Duration, 0, 1<<16)
				for i := 0; pb.Next(); i++ {
					start := time.Now()
					bu.Allow()
					d := time.Since(start)
					if len(samples) < maxSamples {
						samples = append(samples, d)
					} else {
						samples[i%maxSamples] = d
					}
				}
				mu.Lock()
				all = append(all, samples...)
				mu.Unlock()
			})
			report(b, all)
		})
	}
}
