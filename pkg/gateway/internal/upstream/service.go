package upstream

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveehq/levee/internal/recent"
)

// serviceWindow is how long a service time counts: a verifier that stops
// answering (it only refuses, or is gone) is credited with no speed once
// its last answers are this old, as its worker count is forgotten.
const serviceWindow = workersTTL

// unweighted is the weight of a service time whose verifier named no
// expected cost (an older verifier): all its samples weigh alike.
const unweighted = time.Millisecond

// serviceTimes keeps a verifier's recent service times, each weighted by
// the cost the verifier expected of the call (callmeta.Served.Expected):
// callers choose the hashes they send, and a flood of cheap ones must not
// make the node look fast (its queue sizes, the gateway's ceiling and the
// capacity behind the bistability margin all follow this figure). The
// weighted median is also robust to the odd hash that spanned a pause.
type serviceTimes struct {
	mu      sync.Mutex
	samples recent.Samples // seconds, weighted by expected seconds
	med     atomic.Int64   // the weighted median, recomputed by observe and refresh; 0 with none
}

func newServiceTimes() serviceTimes { return serviceTimes{samples: recent.New(serviceWindow)} }

// observe adds a service time d of a call the verifier expected to take
// expected (≤ 0: not said) at now, and recomputes the median, so that the
// readers (the queue sizes, the limiter's target, the capacity) read it for
// nothing.
func (s *serviceTimes) observe(d, expected time.Duration, now time.Time) {
	if expected <= 0 {
		expected = unweighted
	}
	s.mu.Lock()
	s.samples.Add(d.Seconds(), expected.Seconds(), now)
	s.recompute(now)
	s.mu.Unlock()
}

// refresh recomputes the median at now, forgetting what is older than the
// window (Set.Tick calls it once a second).
func (s *serviceTimes) refresh(now time.Time) {
	s.mu.Lock()
	s.recompute(now)
	s.mu.Unlock()
}

func (s *serviceTimes) recompute(now time.Time) {
	med, _, _ := s.samples.Median(now)
	s.med.Store(int64(med * float64(time.Second)))
}

// median is the weighted median of the fresh samples, 0 with none.
func (s *serviceTimes) median() time.Duration { return time.Duration(s.med.Load()) }
