// Package calibratetest holds test doubles for package calibrate.
package calibratetest

import (
	"context"
	"sync"
	"time"

	"github.com/leveehq/levee/pkg/calibrate"
	"github.com/leveehq/levee/pkg/verify"
)

var _ calibrate.Bench = (*Model)(nil).Bench

// Model is a fake machine whose hash latency is a known function of the
// parameters and the concurrency, so that a search can be checked against
// arithmetic instead of a clock:
//
//	latency = Base + PerKiBPass × m × t × max(1, p × concurrency / Cores)
//
// Sample i of n is that latency stretched by Spread × i/(n-1), so that p50
// and p95 differ. Its Bench never sleeps. It is safe for concurrent use.
type Model struct {
	Base       time.Duration
	PerKiBPass time.Duration
	Cores      int
	Spread     float64

	mu     sync.Mutex
	points []verify.Params
}

// Latency is the unstretched latency of one hash.
func (m *Model) Latency(p verify.Params, concurrency int) time.Duration {
	slow := 1.0
	if cores := max(m.Cores, 1); int(p.Parallelism)*concurrency > cores {
		slow = float64(int(p.Parallelism)*concurrency) / float64(cores)
	}
	work := float64(m.PerKiBPass) * float64(p.Memory) * float64(p.Iterations) * slow
	return m.Base + time.Duration(work)
}

// Bench implements calibrate.Bench.
func (m *Model) Bench(ctx context.Context, p verify.Params, concurrency, warmup, n int) (calibrate.Sample, error) {
	if err := ctx.Err(); err != nil {
		return calibrate.Sample{}, err
	}
	m.mu.Lock()
	m.points = append(m.points, p)
	m.mu.Unlock()
	base := m.Latency(p, concurrency)
	var s calibrate.Sample
	var sum time.Duration
	for i := range n {
		d := base
		if n > 1 {
			d += time.Duration(m.Spread * float64(base) * float64(i) / float64(n-1))
		}
		s.Latencies = append(s.Latencies, d)
		sum += d
	}
	s.Elapsed = sum / time.Duration(concurrency)
	return s, nil
}

// Points returns the parameters measured so far, in order.
func (m *Model) Points() []verify.Params {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]verify.Params(nil), m.points...)
}
