package admission

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveehq/levee/pkg/callmeta"
)

// Class is what admission knows about a request: how urgent it is and
// whether it is a retry. A PriorityUnspecified request is treated as
// Interactive (callmeta's default); a value outside callmeta's enumeration as
// Batch, the first to be shed.
type Class struct {
	Priority callmeta.Priority
	Retry    bool
}

// The classes by rank, in shedding order: rank 0 is shed first.
const (
	rankBatchRetry = iota
	rankBatch
	rankInteractiveRetry
	rankInteractive
	rankCriticalRetry
	rankCritical
	numRanks
)

func (c Class) rank() int {
	var r int
	switch c.Priority {
	case callmeta.Critical:
		r = rankCriticalRetry
	case callmeta.Interactive, callmeta.PriorityUnspecified:
		r = rankInteractiveRetry
	default:
		r = rankBatchRetry
	}
	if !c.Retry {
		r++
	}
	return r
}

// Reason is Acquire's answer: an admission or why not.
type Reason uint8

// The reasons.
const (
	// ReasonAdmitted: the request may go; Release must follow.
	ReasonAdmitted Reason = iota
	// ReasonLimit: the whole limit is in use.
	ReasonLimit
	// ReasonPriority: some of the limit is free, but not for this class: it
	// is over its share.
	ReasonPriority
)

// String returns "admitted", "limit", "priority", or "unknown" for values
// outside the enumeration: a bounded set, usable as a metric label.
func (r Reason) String() string {
	switch r {
	case ReasonAdmitted:
		return "admitted"
	case ReasonLimit:
		return "limit"
	case ReasonPriority:
		return "priority"
	}
	return "unknown"
}

// Outcome says what a released request's sample means.
type Outcome uint8

// The outcomes. The zero value is OutcomeIgnore, so that a Sample nobody
// filled in cannot pass for a low queue wait and grow the limit.
const (
	// OutcomeIgnore: the request says nothing about the verifiers' load (the
	// caller cancelled, the input was bad, the verifier was unreachable or
	// draining); only the in-flight count changes.
	OutcomeIgnore Outcome = iota
	// OutcomeOK: a verifier ran the request, and QueueWait is how long it
	// waited for a worker there.
	OutcomeOK
	// OutcomeOverloaded: a verifier refused the request for load
	// (RESOURCE_EXHAUSTED, "do not retry"): its queue is full, the strongest
	// signal to shrink the limit.
	OutcomeOverloaded
)

// String returns "ignore", "ok", "overloaded", or "unknown".
func (o Outcome) String() string {
	switch o {
	case OutcomeIgnore:
		return "ignore"
	case OutcomeOK:
		return "ok"
	case OutcomeOverloaded:
		return "overloaded"
	}
	return "unknown"
}

// Sample is what a finished request tells the limiter.
type Sample struct {
	// QueueWait is the verifier's queue wait; read only for OutcomeOK.
	QueueWait time.Duration
	Outcome   Outcome
	// Critical must be true exactly when the call was admitted as a critical
	// first attempt: the critical reserve counts those in flight.
	Critical bool
}

// maxSampleWait caps one sample's queue wait, so that a nonsensical value
// from a verifier cannot overflow a window's sum (nor dominate it more than
// an hour's wait would).
const maxSampleWait = time.Hour

// noWait is waitMin with no sample in the window.
const noWait = math.MaxInt64

// demandFraction of the adaptive limit in flight means the limit is in use.
const demandFraction = 0.9

// limits is what Acquire reads: everything derived from the limit, published
// together so that a reader never mixes two versions.
type limits struct {
	limit     int64           // effective limit
	threshold [numRanks]int64 // a class is admitted while in flight < its threshold
	// demandAt: an admission that brings in flight to this is demand.
	demandAt int64
	// refusalIsDemand: the adaptive limit is the binding one, so a refusal
	// shows it is in use (and not a clamp's).
	refusalIsDemand bool
	// reserve is how many critical first attempts are admitted whatever
	// else is in flight: the slots no other class may take. Others admitted
	// before the limit shrank can hold more than their new share for a
	// while; critical first attempts keep their reserve meanwhile, so the
	// total may exceed the limit by at most reserve.
	reserve int64
}

// Limiter is an adaptive concurrency limiter. Create it with New. It is safe
// for concurrent use.
type Limiter struct {
	// The request path: in flight is written by every Acquire and Release;
	// state is read by every Acquire and written a few times a second. They
	// live on separate cache lines.
	inflight atomic.Int64
	critical atomic.Int64 // critical first attempts in flight
	_        [56]byte
	state    atomic.Pointer[limits]
	demand   atomic.Bool // in the current window
	_        [48]byte

	// The current window, written by Release.
	okCount     atomic.Int64
	waitMin     atomic.Int64 // nanoseconds, the least over the window's OK samples (noWait: none)
	overloaded  atomic.Int64
	windowStart atomic.Int64 // nanoseconds since epoch

	clock Clock
	epoch time.Time
	// Fixed at New.
	minLimit   float64
	target     time.Duration
	backoff    float64
	window     time.Duration
	minSamples int64

	mu        sync.Mutex // serialises recomputation and the setters
	adaptive  float64    // in [min(minLimit, ceiling), ceiling]
	ceiling   int
	clamp     int // 0: none
	emergency int // 0: none
	shares    [numRanks]float64
	lastWait  time.Duration // the last evaluated window's observed queue wait
	// grown: a window has seen a queue form (observed above half the
	// target); until then the limit grows by doubling (slow start), or
	// stands at the ceiling when fromCeiling (Config.InitialLimit 0).
	grown       bool
	fromCeiling bool
}

// New returns a Limiter configured by cfg, or cfg.Validate's error.
func New(cfg Config) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clk := cfg.Clock
	if clk == nil {
		clk = systemClock{}
	}
	l := &Limiter{
		clock:       clk,
		epoch:       clk.Now(),
		minLimit:    float64(cfg.MinLimit),
		target:      cfg.TargetQueueWait,
		backoff:     cfg.Backoff,
		window:      cfg.Window,
		minSamples:  int64(cfg.MinSamples),
		adaptive:    float64(cfg.InitialLimit),
		ceiling:     cfg.Ceiling,
		fromCeiling: cfg.InitialLimit == 0,
	}
	l.shares = shareTable(cfg.CriticalReserve, cfg.BatchShare, cfg.RetryShare)
	l.waitMin.Store(noWait)
	l.mu.Lock()
	l.publish()
	l.mu.Unlock()
	return l, nil
}

// shareTable returns each rank's share of the limit from valid shares.
func shareTable(criticalReserve, batchShare, retryShare float64) [numRanks]float64 {
	interactive := 1 - criticalReserve
	return [numRanks]float64{
		rankBatchRetry:       retryShare * batchShare,
		rankBatch:            batchShare,
		rankInteractiveRetry: retryShare * interactive,
		rankInteractive:      interactive,
		rankCriticalRetry:    retryShare,
		rankCritical:         1,
	}
}

// Acquire asks to send one request of class c. ReasonAdmitted counts it in
// flight, and Release must be called exactly once when it is done; any other
// answer counts nothing and needs no Release.
func (l *Limiter) Acquire(c Class) Reason {
	s := l.state.Load()
	rank := c.rank()
	threshold := s.threshold[rank]
	critical := rank == rankCritical
	for {
		n := l.inflight.Load()
		if n >= threshold {
			if critical && l.acquireReserve(s.reserve) {
				return ReasonAdmitted
			}
			if s.refusalIsDemand {
				l.markDemand()
			}
			if n >= s.limit {
				return ReasonLimit
			}
			return ReasonPriority
		}
		if l.inflight.CompareAndSwap(n, n+1) {
			if critical {
				l.critical.Add(1)
			}
			if n+1 >= s.demandAt {
				l.markDemand()
			}
			return ReasonAdmitted
		}
	}
}

// acquireReserve admits a critical first attempt from the critical reserve:
// while fewer than reserve of them are in flight, whatever else is.
func (l *Limiter) acquireReserve(reserve int64) bool {
	for {
		c := l.critical.Load()
		if c >= reserve {
			return false
		}
		if l.critical.CompareAndSwap(c, c+1) {
			l.inflight.Add(1)
			return true
		}
	}
}

// markDemand writes the flag only when it is not set yet, so that a window
// of refusals does not bounce its cache line between cores.
func (l *Limiter) markDemand() {
	if !l.demand.Load() {
		l.demand.Store(true)
	}
}

// Release ends one admitted request and records what it says about the
// verifiers' load. Calling it more often than Acquire admitted panics, as
// sync.WaitGroup's Done does: an in-flight count gone negative would admit
// over the limit from then on.
func (l *Limiter) Release(s Sample) {
	if l.inflight.Add(-1) < 0 {
		panic("admission: Release without a matching admitted Acquire")
	}
	if s.Critical && l.critical.Add(-1) < 0 {
		panic("admission: Release with Critical for a call not admitted as critical")
	}
	var samples int64
	switch s.Outcome {
	case OutcomeOK:
		w := int64(min(max(s.QueueWait, 0), maxSampleWait))
		for {
			m := l.waitMin.Load()
			if w >= m || l.waitMin.CompareAndSwap(m, w) {
				break
			}
		}
		samples = l.okCount.Add(1) + l.overloaded.Load()
	case OutcomeOverloaded:
		l.overloaded.Add(1)
		samples = l.minSamples // evaluated without waiting for MinSamples
	default:
		return
	}
	if samples < l.minSamples {
		return // the window carries over whatever the time: no need to read it
	}
	now := l.clock.Now().Sub(l.epoch)
	if now-time.Duration(l.windowStart.Load()) < l.window {
		return
	}
	// One releaser evaluates the window; the others carry on (the window is
	// still due on their next Release if this one loses to a setter).
	if !l.mu.TryLock() {
		return
	}
	defer l.mu.Unlock()
	if now-time.Duration(l.windowStart.Load()) < l.window {
		return // evaluated while we were getting here
	}
	l.endWindow(now)
}

// endWindow evaluates the current window and starts the next. l.mu is held.
func (l *Limiter) endWindow(now time.Duration) {
	ok := l.okCount.Swap(0)
	least := l.waitMin.Swap(noWait)
	overloaded := l.overloaded.Swap(0)
	demand := l.demand.Swap(false)
	l.windowStart.Store(int64(now))

	var observed time.Duration
	if ok > 0 && least != noWait {
		observed = time.Duration(least)
	}
	if overloaded > 0 {
		observed = max(observed, 2*l.target)
	}
	l.lastWait = observed
	if observed > l.target/2 {
		l.grown = true
	}

	// The adaptive limit may stand above the ceiling (it was learnt before
	// the ceiling fell, say while verifiers were missing): it then grows no
	// further, and a shrink starts from the ceiling, so that it bites at
	// once. When the ceiling rises again the limit is back where it was,
	// without having to regrow under demand.
	ceiling := float64(l.ceiling)
	switch {
	case observed > l.target:
		factor := max(l.backoff, float64(l.target)/float64(observed))
		l.adaptive = max(min(l.adaptive, ceiling)*factor, l.minLimit)
	case demand && l.adaptive < ceiling:
		step := math.Sqrt(l.adaptive) * (1 - float64(observed)/float64(l.target))
		if !l.grown {
			step = l.adaptive
		}
		l.adaptive = min(l.adaptive+max(1, step), ceiling)
	}
	l.publish()

	// A window that starts with the limit in use has demand from its start,
	// even if nothing is admitted in it.
	if l.inflight.Load() >= l.state.Load().demandAt {
		l.markDemand()
	}
}

// publish recomputes what Acquire reads. l.mu is held.
func (l *Limiter) publish() {
	if l.fromCeiling && !l.grown {
		// The highest ceiling so far: a ceiling that dips (a verifier
		// missing) and rises again gives the limit back, as SetCeiling
		// promises, even if a queue formed during the dip.
		l.adaptive = max(l.adaptive, float64(l.ceiling))
	}
	adaptive := int64(l.adaptive)
	limit := min(adaptive, int64(l.ceiling))
	if l.clamp > 0 {
		limit = min(limit, int64(l.clamp))
	}
	if l.emergency > 0 {
		limit = min(limit, int64(l.emergency))
	}
	limit = max(limit, 1)

	s := &limits{
		limit:           limit,
		demandAt:        max(1, int64(math.Ceil(demandFraction*float64(adaptive)))),
		refusalIsDemand: limit >= adaptive,
	}
	for r, share := range l.shares {
		// The epsilon keeps 100 × 0.45 at 45 when the product comes out as
		// 44.99…; shares are validated in shedding order, and flooring
		// keeps that order.
		s.threshold[r] = min(int64(math.Floor(float64(limit)*share+1e-9)), limit)
	}
	s.threshold[rankCritical] = limit
	s.reserve = limit - s.threshold[rankInteractive]
	l.state.Store(s)
}

// Limit returns the effective limit: min(adaptive, ceiling, clamp,
// emergency), at least 1.
func (l *Limiter) Limit() int { return int(l.state.Load().limit) }

// Adaptive returns the adaptive limit, which the clamps do not change.
func (l *Limiter) Adaptive() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.adaptive)
}

// InFlight returns the number of admitted requests not yet released.
func (l *Limiter) InFlight() int { return int(l.inflight.Load()) }

// Threshold returns the in-flight count below which a request of class c is
// admitted: floor(Limit × c's share).
func (l *Limiter) Threshold(c Class) int { return int(l.state.Load().threshold[c.rank()]) }

// SetCeiling sets the most the limit can be; n < 1 means 1, n > MaxCeiling
// MaxCeiling. It caps the limit at once and leaves the adaptive limit alone:
// a ceiling that falls and rises again (verifiers lost and back) gives the
// limit back as it was, with no need to regrow it under demand.
func (l *Limiter) SetCeiling(n int) {
	n = min(max(n, 1), MaxCeiling)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ceiling = n
	l.publish()
}

// SetTarget changes the queue wait the limit aims for (Config.TargetQueueWait)
// from the next window on; d ≤ 0 changes nothing.
func (l *Limiter) SetTarget(d time.Duration) {
	if d <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.target = d
}

// Target returns the queue wait the limit aims for.
func (l *Limiter) Target() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.target
}

// SetClamp sets the operator clamp, a cap on the limit that the adaptive
// limit cannot lift; n ≤ 0 removes it.
func (l *Limiter) SetClamp(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clamp = max(n, 0)
	l.publish()
}

// SetEmergency sets the emergency clamp, the gateway's own (autopilot) cap
// during recovery; n ≤ 0 removes it. It is separate from the operator clamp
// so that neither overwrites the other: the lower one wins.
func (l *Limiter) SetEmergency(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.emergency = max(n, 0)
	l.publish()
}

// SetShares changes the shares (see Config). Invalid shares change nothing;
// the error wraps ErrInvalidConfig and names each problem.
func (l *Limiter) SetShares(criticalReserve, batchShare, retryShare float64) error {
	if errs := checkShares(criticalReserve, batchShare, retryShare); len(errs) > 0 {
		return errors.Join(errs...)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shares = shareTable(criticalReserve, batchShare, retryShare)
	l.publish()
	return nil
}

// Snapshot is the limiter's state at one moment, for metrics and status.
type Snapshot struct {
	Limit     int // effective
	Adaptive  int
	Ceiling   int
	Clamp     int // 0: none
	Emergency int // 0: none
	InFlight  int
	// QueueWait is the observed queue wait of the last evaluated window (the
	// mean over its OK samples, at least 2 × TargetQueueWait if it held an
	// Overloaded outcome); 0 before the first.
	QueueWait time.Duration
}

// Snapshot returns the current state.
func (l *Limiter) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Snapshot{
		Limit:     int(l.state.Load().limit),
		Adaptive:  int(l.adaptive),
		Ceiling:   l.ceiling,
		Clamp:     l.clamp,
		Emergency: l.emergency,
		InFlight:  int(l.inflight.Load()),
		QueueWait: l.lastWait,
	}
}
