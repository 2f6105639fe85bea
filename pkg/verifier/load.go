package verifier

import (
	"sync"
	"time"

	"google.golang.org/grpc/orca"

	"github.com/leveehq/levee/pkg/workpool"
)

// loadReporter provides ORCA load reports, per call (in response trailers)
// and out of band, for balancers that weigh verifiers by load:
//
//   - application_utilization: (running + queued) / active workers; above 1
//     means requests wait.
//   - utilization["queue"]: queued / queue capacity.
//   - named metrics queue_length and active_workers.
//   - qps: hashes completed per second over the last second or so.
//   - mem_utilization: Argon2 memory held by running hashes / the memory
//     budget (the permits, not RSS).
type loadReporter struct {
	pool     *workpool.Pool
	capacity int

	mu       sync.Mutex
	lastAt   time.Time
	lastDone uint64
	qps      float64
}

var _ orca.ServerMetricsProvider = (*loadReporter)(nil)

func newLoadReporter(pool *workpool.Pool, queueCapacity int) *loadReporter {
	return &loadReporter{pool: pool, capacity: queueCapacity, lastAt: time.Now()}
}

// ServerMetrics implements orca.ServerMetricsProvider.
func (l *loadReporter) ServerMetrics() *orca.ServerMetrics {
	st := l.pool.Stats()
	queueUtil := 1.0
	if l.capacity > 0 {
		queueUtil = min(1, float64(st.Queued)/float64(l.capacity))
	}
	memUtil := -1.0 // unknown: no budget
	if st.MemoryBudget > 0 {
		memUtil = float64(st.MemoryInUse) / float64(st.MemoryBudget)
	}
	return &orca.ServerMetrics{
		CPUUtilization: -1,
		MemUtilization: memUtil,
		AppUtilization: float64(st.Busy+st.Queued) / float64(max(st.Active, 1)),
		QPS:            l.rate(st.Completed),
		EPS:            -1,
		Utilization:    map[string]float64{"queue": queueUtil},
		NamedMetrics: map[string]float64{
			"queue_length":   float64(st.Queued),
			"active_workers": float64(st.Active),
		},
	}
}

// rate updates the completion rate at most once a second.
func (l *loadReporter) rate(completed uint64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.lastAt) >= time.Second {
		l.qps = float64(completed-l.lastDone) / now.Sub(l.lastAt).Seconds()
		l.lastAt, l.lastDone = now, completed
	}
	return l.qps
}
