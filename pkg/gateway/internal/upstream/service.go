package upstream

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// serviceSamples is the number of recent service times a node keeps.
const serviceSamples = 16

// serviceTimes keeps a verifier's recent service times; its median is
// robust to the odd hash that spanned a pause.
type serviceTimes struct {
	mu   sync.Mutex
	ring [serviceSamples]time.Duration
	n    int
	med  atomic.Int64 // the samples' median, recomputed by observe; 0 with none
}

// observe adds a sample and recomputes the median, once per sample, so
// that the readers (the queue sizes, the limiter's target, the capacity)
// read it for nothing.
func (s *serviceTimes) observe(d time.Duration) {
	s.mu.Lock()
	s.ring[s.n%serviceSamples] = d
	s.n++
	var xs [serviceSamples]time.Duration
	k := min(s.n, serviceSamples)
	copy(xs[:], s.ring[:k])
	slices.Sort(xs[:k])
	s.med.Store(int64(xs[k/2]))
	s.mu.Unlock()
}

// median is the median of the samples, 0 with none.
func (s *serviceTimes) median() time.Duration { return time.Duration(s.med.Load()) }
