package budget

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leveehq/levee/pkg/ledger"
)

// Mode says where a key's retry tokens come from.
type Mode uint8

// The modes.
const (
	// Shared: the key holds an unexpired lease from budgetd and the latest
	// refresh succeeded.
	Shared Mode = iota + 1
	// Fallback: no lease yet, the latest refresh failed, or the lease
	// expired unrenewed; retries are funded by the local budget (and by what
	// is left of a still-valid lease).
	Fallback
)

// String returns "shared" or "fallback": a bounded metric label.
func (m Mode) String() string {
	switch m {
	case Shared:
		return "shared"
	case Fallback:
		return "fallback"
	}
	return "unknown"
}

// Why a key is in fallback (a bounded set, for Status and logs).
const (
	CauseNoLease      = "no lease yet"
	CauseExpired      = "lease expired without renewal"
	CauseRefresh      = "refresh failed"
	CauseMissingLease = "budgetd answered without a lease for the key"
	CauseClosed       = "client closed"
)

const microsPerToken = 1_000_000

// lease is one grant from budgetd. tokens only goes down, and is zeroed
// when the lease expires or a newer one replaces it: the request path never
// reads the clock to know whether a lease is still good.
type lease struct {
	tokens   atomic.Int64
	granted  uint32
	arrived  time.Time
	expires  time.Time
	validFor time.Duration
	stop     func() bool // disarms the expiry timer
	spent    uint64      // set when retired: granted less what was left
	retired  bool
}

// retire zeroes l and accounts for what was spent from it. Callers hold the
// Budget's mu.
func (l *lease) retire() uint64 {
	if l.retired {
		return 0
	}
	l.retired = true
	l.stop()
	l.spent = uint64(int64(l.granted) - max(l.tokens.Swap(0), 0))
	return l.spent
}

// take spends one token, never taking the count below zero (so a drained
// lease costs its readers nothing but a load).
func (l *lease) take() bool {
	for {
		n := l.tokens.Load()
		if n <= 0 {
			return false
		}
		if l.tokens.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// bucket is the local budget of a key in fallback, in millionths of a token.
// It earns ratio per first attempt recorded since it was made and minPerNs
// per nanosecond, lazily when spent from, and holds at most capMicro.
type bucket struct {
	since      time.Time
	cause      string
	fromFirst  uint64 // the key's first attempts when the bucket was made
	ratioMicro int64
	minPerNs   float64 // micro-tokens per nanosecond
	capMicro   int64

	micro     atomic.Int64
	seenFirst atomic.Uint64 // first attempts already earned on
	lastNs    atomic.Int64  // time already earned on, since `since`
}

// refillEvery is the finest grain of the time allowance: at most one
// compare-and-swap per millisecond per key goes to it.
const refillEvery = int64(time.Millisecond)

// take spends one token if it can. It earns on the first attempts recorded
// since the last call first, and reads the clock for the time allowance only
// when that leaves it empty.
func (f *bucket) take(clock Clock, first uint64) bool {
	if seen := f.seenFirst.Load(); first > seen && f.seenFirst.CompareAndSwap(seen, first) {
		n := min(first-seen, uint64(f.capMicro/max(f.ratioMicro, 1))+1)
		f.add(int64(n) * f.ratioMicro)
	}
	if f.spend() {
		return true
	}
	if el, last := int64(clock.Now().Sub(f.since)), f.lastNs.Load(); el-last >= refillEvery && f.lastNs.CompareAndSwap(last, el) {
		f.add(int64(min(float64(el-last)*f.minPerNs, float64(f.capMicro))))
		return f.spend()
	}
	return false
}

// available is what take could spend now, in tokens: the balance plus
// what it has yet to earn on the first attempts recorded and the time
// passed, capped, without earning or spending anything. (The bucket earns
// lazily, when spent from: its balance alone reads 0 in a key nobody has
// retried on, whose next Allow would succeed.)
func (f *bucket) available(now time.Time, first uint64) float64 {
	v := f.micro.Load()
	if seen := f.seenFirst.Load(); first > seen {
		v += int64(min(first-seen, uint64(f.capMicro/max(f.ratioMicro, 1))+1)) * f.ratioMicro
	}
	if el := int64(now.Sub(f.since)) - f.lastNs.Load(); el > 0 {
		v += int64(min(float64(el)*f.minPerNs, float64(f.capMicro)))
	}
	return float64(min(v, f.capMicro)) / microsPerToken
}

func (f *bucket) spend() bool {
	for {
		v := f.micro.Load()
		if v < microsPerToken {
			return false
		}
		if f.micro.CompareAndSwap(v, v-microsPerToken) {
			return true
		}
	}
}

func (f *bucket) add(x int64) {
	if x <= 0 {
		return
	}
	for v := f.micro.Add(x); v > f.capMicro; v = f.micro.Load() {
		if f.micro.CompareAndSwap(v, f.capMicro) {
			return
		}
	}
}

// pad keeps the counters every request writes on cache lines of their own.
type pad [64]byte

// Budget is the retry budget of one key in one process. Get it from
// Client.Key; it is safe for concurrent use, and its request-path methods
// (Allow, RecordFirstAttempt, RecordRetry) never block, allocate or do I/O.
type Budget struct {
	key   string
	clock Clock
	cfg   *Config

	_       pad
	first   atomic.Uint64
	_       pad
	retries atomic.Uint64
	_       pad
	denied  atomic.Uint64
	_       pad
	// fallbackAllowed counts tokens spent from fallback buckets (the
	// lease's are counted by difference, to keep its path to one CAS).
	fallbackAllowed atomic.Uint64
	_               pad

	lease    atomic.Pointer[lease]
	fallback atomic.Pointer[bucket]

	// Written under mu by the refresher and the expiry timers; read
	// atomically by Status and the metrics.
	mu              sync.Mutex
	settings        atomic.Pointer[ledger.Settings]
	leaseSpent      atomic.Uint64 // tokens spent from leases since replaced
	granted         atomic.Uint64
	fallbackEntries atomic.Uint64
	ackFirst        atomic.Uint64 // first attempts budgetd has acknowledged
	ackRetries      atomic.Uint64
	// fallbackFirsts counts the first attempts sent in fallback periods
	// that have ended; with the open period's count it is what reports
	// carry as earned locally. A count belongs to the period it was made
	// in, not to the mode when it is reported: a lease that lands between
	// a report and the next must not turn its fallback counts into shared
	// ones.
	fallbackFirsts uint64
	ackFallback    uint64 // of those, budgetd has acknowledged; refresher-owned

	// fallbackMin is what a new fallback bucket earns per second: this
	// process's share of the fleet's MinPerSecond as budgetd last sent it,
	// or nil for Config.FallbackMinPerSecond until it has.
	fallbackMin atomic.Pointer[float64]

	// Owned by the refresher (Client.refreshMu).
	rate      float64 // first attempts per second, smoothed
	rateFirst uint64
	rateAt    time.Time
	validFor  time.Duration // of the latest lease
	ackAt     time.Time     // when the counts budgetd last took were read
}

func newBudget(key string, cfg *Config, clock Clock) *Budget {
	now := clock.Now()
	b := &Budget{key: key, cfg: cfg, clock: clock, ackAt: now}
	b.fallback.Store(b.newBucket(now, CauseNoLease))
	return b
}

// Key returns the budget key.
func (b *Budget) Key() string { return b.key }

// RecordFirstAttempt counts one first attempt sent (one atomic add). It is
// reported to budgetd, which earns the fleet Ratio tokens for it, and it
// earns this key's local budget Ratio tokens while in fallback.
func (b *Budget) RecordFirstAttempt() { b.first.Add(1) }

// RecordRetry counts one retry sent (one atomic add), for budgetd's retry
// ratio. Allow does not count: a token may be spent on a retry that is then
// not sent (its caller left during the backoff).
func (b *Budget) RecordRetry() { b.retries.Add(1) }

// Allow reports whether one more retry may be sent now, and if so spends a
// token for it. It spends the current lease's tokens first; a key in
// fallback then spends its local budget. A key in shared mode whose lease is
// drained answers false: the fleet's budget is spent, and the caller must
// return its failure instead of retrying.
//
// In shared mode Allow is one atomic load and one compare-and-swap: it takes
// no lock and does not even read the clock (a timer voids the lease at
// expiry). In fallback it reads the clock only when the local budget is
// empty, for its time allowance.
func (b *Budget) Allow() bool {
	l := b.lease.Load()
	if l != nil && l.take() {
		return true
	}
	fb := b.fallback.Load()
	if fb == nil {
		// Shared mode and the lease is drained, or it was replaced just now.
		if l2 := b.lease.Load(); l2 != nil && l2 != l && l2.take() {
			return true
		}
		if fb = b.fallback.Load(); fb == nil {
			b.denied.Add(1)
			return false
		}
	}
	if fb.take(b.clock, b.first.Load()) {
		b.fallbackAllowed.Add(1)
		return true
	}
	b.denied.Add(1)
	return false
}

// expire is l's expiry timer: if l is still the key's lease, the key moves
// to fallback.
func (b *Budget) expire(l *lease) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lease.Load() != l || l.retired {
		return
	}
	b.leaseSpent.Add(l.retire())
	b.enterFallback(b.clock.Now(), CauseExpired)
}

// close voids the lease and moves the key to fallback for good (the
// Client's Close).
func (b *Budget) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if l := b.lease.Load(); l != nil {
		b.leaseSpent.Add(l.retire())
	}
	old := b.fallback.Swap(b.newBucket(b.clock.Now(), CauseClosed))
	if old == nil {
		b.fallbackEntries.Add(1)
	}
}

// enterFallback moves the key to fallback (if it is not there already)
// because of cause. Callers hold b.mu.
// earnedInFallback is the first attempts counted in fallback so far, given
// first, a count read under mu. Callers hold b.mu.
func (b *Budget) earnedInFallback(first uint64) uint64 {
	n := b.fallbackFirsts
	if fb := b.fallback.Load(); fb != nil && first > fb.fromFirst {
		n += first - fb.fromFirst
	}
	return n
}

func (b *Budget) enterFallback(now time.Time, cause string) {
	if b.fallback.Load() != nil {
		return
	}
	b.fallback.Store(b.newBucket(now, cause))
	b.fallbackEntries.Add(1)
}

func (b *Budget) newBucket(now time.Time, cause string) *bucket {
	ratio := b.cfg.DefaultRatio
	if s := b.settings.Load(); s != nil {
		ratio = s.Ratio
	}
	minPerSecond := b.cfg.FallbackMinPerSecond
	if m := b.fallbackMin.Load(); m != nil {
		minPerSecond = *m
	}
	first := b.first.Load()
	fb := &bucket{
		since:      now,
		cause:      cause,
		fromFirst:  first,
		ratioMicro: int64(math.Round(ratio * microsPerToken)),
		minPerNs:   minPerSecond * microsPerToken / float64(time.Second),
		capMicro:   int64(b.cfg.FallbackBurst * microsPerToken),
	}
	fb.seenFirst.Store(first)
	return fb
}

// renew installs a new lease and returns the key to shared mode.
// fallbackShare is this process's share of s.MinPerSecond, for its next
// fallback; zero from a budgetd that sends none while s.MinPerSecond is not
// zero keeps Config.FallbackMinPerSecond. Callers hold b.mu.
func (b *Budget) renew(granted uint32, validFor time.Duration, arrived time.Time, s ledger.Settings, fallbackShare float64) {
	nl := &lease{granted: granted, arrived: arrived, expires: arrived.Add(validFor), validFor: validFor}
	nl.tokens.Store(int64(granted))
	b.settings.Store(&s)
	if fallbackShare > 0 || s.MinPerSecond == 0 {
		m := min(max(fallbackShare, 0), s.MinPerSecond)
		b.fallbackMin.Store(&m)
	}
	if old := b.lease.Swap(nl); old != nil {
		b.leaseSpent.Add(old.retire())
	}
	nl.stop = b.clock.AfterFunc(validFor, func() { b.expire(nl) })
	if fb := b.fallback.Swap(nil); fb != nil {
		b.fallbackFirsts += b.first.Load() - fb.fromFirst
	}
	b.granted.Add(uint64(granted))
	b.validFor = validFor
}
