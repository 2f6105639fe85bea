package breaker

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveehq/levee/internal/window"
)

// State is the state of a Breaker.
type State uint8

// The states of a Breaker; the zero State is Closed.
const (
	// Closed admits every request and counts outcomes in the window.
	Closed State = iota
	// Open admits nothing until its jittered open time ends.
	Open
	// HalfOpen admits a growing fraction of requests, step by step.
	HalfOpen
)

// String returns "closed", "open" or "half_open", fit for a metric label.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Clock is the time source of a Breaker.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Snapshot describes a Breaker at one instant, for metrics and status pages.
type Snapshot struct {
	State State
	// Fraction is what Fraction returns.
	Fraction float64
	// OpenUntil is when an open breaker turns half-open; zero unless Open.
	OpenUntil time.Time
	// Step is the index in Ramp of the current half-open step; -1 unless
	// HalfOpen.
	Step int
	// StepUntil is the earliest time the current step may advance; zero
	// unless HalfOpen.
	StepUntil time.Time
	// Successes and Failures are the outcomes the next decision rests on:
	// the rolling window's when Closed, the current step's when HalfOpen,
	// zero when Open.
	Successes, Failures uint64
	// Trips counts the times the breaker opened since New (a Trip while
	// already open does not count).
	Trips uint64
}

type transition struct{ from, to State }

// Breaker is a circuit breaker for one backend. Create it with New; see the
// package doc for its behaviour and costs.
type Breaker struct {
	// Read by Allow without the lock; written only with mu held, openUntil
	// before state.
	state     atomic.Uint32 // State
	openUntil atomic.Int64  // ns since base; meaningful while Open

	cfg   Config // Ramp is a private copy
	clock Clock
	rand  func() float64
	base  time.Time // all internal times are ns since base

	mu    sync.Mutex
	st    State
	last  int64          // latest clock reading: internal time never runs backwards
	win   *window.Window // outcomes while closed: okCount, failCount
	trips uint64

	// Half-open.
	step             int
	stepUntil        int64
	stepOK, stepFail uint64
	lastAdmit        int64

	// State changes not yet handed to OnStateChange, from pending[pendHead].
	pending    []transition
	pendHead   int
	delivering bool
}

// New validates cfg and returns a closed Breaker. Later changes to
// cfg.Ramp's backing array do not affect it.
func New(cfg Config) (*Breaker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Ramp = slices.Clone(cfg.Ramp)
	b := &Breaker{cfg: cfg, clock: cfg.Clock, rand: cfg.Rand}
	if b.clock == nil {
		b.clock = systemClock{}
	}
	if b.rand == nil {
		b.rand = rand.Float64
	}
	b.base = b.clock.Now()
	// Buckets start when the breaker was made, not at the Unix epoch: the
	// window's edges fall where they always have for a given clock.
	b.win = window.New(numBuckets, cfg.Window/numBuckets, 2).AlignTo(b.base)
	return b, nil
}

// Allow reports whether a request may be sent to the backend now: always
// when closed, never while open, and with the current step's probability
// (or as a ProbeEvery probe) when half-open. Every admitted request's
// outcome should be passed to Record, or the request to Cancel if it was
// not sent after all. Allow never allocates; on a closed
// breaker it is one atomic load.
func (b *Breaker) Allow() bool {
	switch State(b.state.Load()) {
	case Closed:
		return true
	case Open:
		if int64(b.clock.Now().Sub(b.base)) < b.openUntil.Load() {
			return false
		}
	}
	return b.allowSlow()
}

func (b *Breaker) allowSlow() bool {
	b.mu.Lock()
	now := b.nowLocked()
	b.advanceLocked(now)
	ok := b.admitLocked(now)
	b.unlock()
	return ok
}

func (b *Breaker) admitLocked(now int64) bool {
	switch b.st {
	case Closed:
		return true
	case Open:
		return false
	}
	f := b.cfg.Ramp[b.step]
	if f < 1 && now-b.lastAdmit < int64(b.cfg.ProbeEvery) && b.uniformLocked() >= f {
		return false
	}
	b.lastAdmit = now
	return true
}

// Cancel reports that a request Allow admitted was not sent after all: it
// was refused before it reached the backend, so it has no outcome to
// Record. A half-open breaker then admits the next request as a probe, as
// if none had been admitted for ProbeEvery: a probe spent on a request that
// never reached the backend tests nothing, and a breaker whose probes were
// all spent so would stay half-open, admitting nothing else, for want of
// outcomes. Call it at most once per admitted request, and only for one
// that was not sent; while closed or open it does nothing.
func (b *Breaker) Cancel() {
	if State(b.state.Load()) == Closed {
		return
	}
	b.mu.Lock()
	now := b.nowLocked()
	b.advanceLocked(now)
	if b.st == HalfOpen {
		b.lastAdmit = min(b.lastAdmit, now-int64(b.cfg.ProbeEvery))
	}
	b.unlock()
}

// Record reports the outcome of a request Allow admitted. While closed it
// counts in the window and may open the breaker; while half-open it counts
// in the current step and may re-open it (see the package doc for the
// rule); while open it is ignored.
func (b *Breaker) Record(success bool) {
	b.mu.Lock()
	now := b.nowLocked()
	b.advanceLocked(now)
	switch b.st {
	case Closed:
		b.addOutcomeLocked(now, success)
		ok, fail := b.countsLocked(now)
		if n := ok + fail; n >= uint64(b.cfg.MinRequests) && float64(fail)/float64(n) >= b.cfg.FailureRate {
			b.openLocked(now)
		}
	case HalfOpen:
		if success {
			b.stepOK++
			break
		}
		b.stepFail++
		n := max(b.stepOK+b.stepFail, uint64(b.cfg.StepMinRequests))
		if float64(b.stepFail)/float64(n) >= b.cfg.FailureRate {
			b.openLocked(now)
		}
	}
	b.unlock()
}

// Trip opens the breaker now, whatever its state, for a fresh jittered open
// time: for when the backend is known to be gone (its connection was lost).
// On an open breaker it may lengthen the open time, never shorten it.
func (b *Breaker) Trip() {
	b.mu.Lock()
	now := b.nowLocked()
	b.advanceLocked(now)
	b.openLocked(now)
	b.unlock()
}

// State returns the current state.
func (b *Breaker) State() State {
	if State(b.state.Load()) == Closed {
		return Closed // nothing time-based leaves Closed
	}
	b.mu.Lock()
	b.advanceLocked(b.nowLocked())
	st := b.st
	b.unlock()
	return st
}

// Fraction returns the fraction of requests Allow admits now: 1 when
// closed, 0 when open, the current Ramp step when half-open (ProbeEvery
// probes come on top).
func (b *Breaker) Fraction() float64 {
	if State(b.state.Load()) == Closed {
		return 1
	}
	b.mu.Lock()
	b.advanceLocked(b.nowLocked())
	f := b.fractionLocked()
	b.unlock()
	return f
}

func (b *Breaker) fractionLocked() float64 {
	switch b.st {
	case Open:
		return 0
	case HalfOpen:
		return b.cfg.Ramp[b.step]
	}
	return 1
}

// Snapshot returns the breaker's state and counts.
func (b *Breaker) Snapshot() Snapshot {
	b.mu.Lock()
	now := b.nowLocked()
	b.advanceLocked(now)
	s := Snapshot{State: b.st, Fraction: b.fractionLocked(), Step: -1, Trips: b.trips}
	switch b.st {
	case Closed:
		s.Successes, s.Failures = b.countsLocked(now)
	case Open:
		s.OpenUntil = b.at(b.openUntil.Load())
	case HalfOpen:
		s.Step, s.StepUntil = b.step, b.at(b.stepUntil)
		s.Successes, s.Failures = b.stepOK, b.stepFail
	}
	b.unlock()
	return s
}

// nowLocked reads the clock as ns since base, never earlier than a
// previous reading.
func (b *Breaker) nowLocked() int64 {
	t := max(int64(b.clock.Now().Sub(b.base)), b.last)
	b.last = t
	return t
}

func (b *Breaker) at(t int64) time.Time { return b.base.Add(time.Duration(t)) }

// numBuckets is how many buckets hold the rolling window: ten keeps the
// window's edge within a tenth of Window and summing it trivially cheap.
const numBuckets = 10

// The numbers of the window's buckets.
const (
	okCount = iota
	failCount
)

func (b *Breaker) addOutcomeLocked(now int64, success bool) {
	i := okCount
	if !success {
		i = failCount
	}
	b.win.Add(b.at(now), i, 1)
}

// countsLocked sums the outcomes in the window ending now.
func (b *Breaker) countsLocked(now int64) (ok, fail uint64) {
	return uint64(b.win.Sum(b.at(now), okCount)), uint64(b.win.Sum(b.at(now), failCount))
}

// advanceLocked applies the time-based transitions due at now. At most one
// is ever due: entering half-open or a new step empties the step's counts,
// and a step needs outcomes to advance.
func (b *Breaker) advanceLocked(now int64) {
	switch b.st {
	case Open:
		if now >= b.openUntil.Load() {
			b.startStepLocked(0, now)
			b.lastAdmit = now - int64(b.cfg.ProbeEvery) // a probe is due at once
			b.setLocked(HalfOpen)
		}
	case HalfOpen:
		if now < b.stepUntil || b.stepOK+b.stepFail < uint64(b.cfg.StepMinRequests) {
			return
		}
		if b.step < len(b.cfg.Ramp)-1 {
			b.startStepLocked(b.step+1, now)
			return
		}
		b.win.Reset()
		b.setLocked(Closed)
	}
}

func (b *Breaker) startStepLocked(step int, now int64) {
	b.step = step
	b.stepUntil = now + b.jitterLocked(b.cfg.StepFor)
	b.stepOK, b.stepFail = 0, 0
}

func (b *Breaker) openLocked(now int64) {
	until := now + b.jitterLocked(b.cfg.OpenFor)
	if b.st == Open {
		if until > b.openUntil.Load() {
			b.openUntil.Store(until)
		}
		return
	}
	b.openUntil.Store(until)
	b.trips++
	b.setLocked(Open)
}

// jitterLocked returns d × (1 + Jitter × U) in ns, in [d, d × (1 + Jitter))
// when Jitter > 0 (computed in integers, so rounding cannot reach the open
// end) and exactly d when Jitter is 0.
func (b *Breaker) jitterLocked(d time.Duration) int64 {
	span := int64(float64(d) * b.cfg.Jitter)
	if span <= 0 {
		return int64(d)
	}
	extra := int64(float64(span) * b.uniformLocked())
	return int64(d) + min(extra, span-1)
}

// uniformLocked returns Rand's next value clamped into [0, 1).
func (b *Breaker) uniformLocked() float64 {
	u := b.rand()
	switch {
	case !(u > 0): // also NaN
		return 0
	case u >= 1:
		return math.Nextafter(1, 0)
	}
	return u
}

func (b *Breaker) setLocked(to State) {
	from := b.st
	b.st = to
	b.state.Store(uint32(to))
	if b.cfg.OnStateChange != nil && from != to {
		b.pending = append(b.pending, transition{from, to})
	}
}

// unlock releases mu, first handing any queued state changes to
// OnStateChange unless another call is already doing so.
func (b *Breaker) unlock() {
	if b.delivering || b.pendHead == len(b.pending) {
		b.mu.Unlock()
		return
	}
	b.deliverLocked()
}

// deliverLocked hands queued state changes to OnStateChange in order, one
// at a time, releasing mu around each call; changes queued meanwhile (by
// other goroutines, or by the callback itself) are delivered by this same
// loop, so delivery never recurses. It is entered with mu held and returns
// with it released.
func (b *Breaker) deliverLocked() {
	b.delivering = true
	done := false
	defer func() {
		if !done { // OnStateChange panicked: let a later call deliver the rest.
			b.mu.Lock()
			b.delivering = false
			b.mu.Unlock()
		}
	}()
	for b.pendHead < len(b.pending) {
		t := b.pending[b.pendHead]
		b.pendHead++
		b.mu.Unlock()
		b.cfg.OnStateChange(t.from, t.to)
		b.mu.Lock()
	}
	b.pending, b.pendHead = b.pending[:0], 0
	b.delivering = false
	done = true
	b.mu.Unlock()
}
