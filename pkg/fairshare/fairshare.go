// Package fairshare shares a concurrency limit among tenants, so that one
// tenant's storm cannot take the others' calls, without a queue and without
// leaving the limit idle.
//
// The gateway admits a call against its limit of L calls in flight
// (package admission) and then asks Shares whether the call's tenant may
// have it. A Shares promises:
//
//   - Each active tenant (one that has a call in flight, or asked within
//     Window, admitted or not) has a share: the limit × its weight ÷ the
//     active tenants' weights.
//   - A tenant over its share on average (at least underFraction of it
//     over Window: a flood) is admitted only into room that leaves the
//     others what they need: each other flood up to its share, and the
//     tenants under their shares, together, their mean use plus two of its
//     standard deviations and one call (they are many small Poisson
//     streams; one pooled reserve holds far less idle room than one per
//     tenant would), or more if one of them bursts higher: its recent peak,
//     one call and √peak, up to 1.5 shares.
//   - A tenant under its share may burst past its share into any room: a
//     tenant that used less than its share has credit, as in deficit round
//     robin, and a flood next to it gives way.
//   - Work-conserving: a tenant alone may use the whole limit, and what no
//     tenant needs goes to whoever asks.
//   - A tenant with nothing in flight is never refused here: its first call
//     goes in whenever the limiter has room, however many tenants share it.
//   - Bounded: at most MaxTenants tenants are tracked at once; calls of any
//     other tenant share one entry, which no tenant name can be. Acquire,
//     Release and Note are O(1); the shares are recomputed every Tick, in
//     O(tenants), with the limit seen last.
//
// A call holds its place for as long as it is in flight. Where the places
// are about as many as the verifiers' workers, equal shares of places are
// equal shares of hashing time, whatever each call costs: a tenant whose
// hashes cost five times the others' gets a fifth as many of them. Places
// beyond the workers are queue, served first come first served by the
// verifiers, and tilt hashing time toward the costlier calls (the tests
// measure how far).
//
// What brings a tenant back: every admitted call is released (answered,
// refused downstream, cut, or expired), so its in-flight cost returns to
// zero; a tenant that asks for nothing for Window is inactive, its weight
// leaves the others' shares and its need leaves the reserve at the next
// Tick, and its entry is dropped after 2 × Window idle. A weight change
// applies at the next call.
package fairshare

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/leveehq/levee/pkg/callmeta"
)

// Other is the entry that calls are accounted to once MaxTenants tenants
// are tracked; no tenant name can be it.
const Other = "(other)"

// Config configures a Shares.
type Config struct {
	// Window is how long a tenant's demand is remembered, and how long a
	// tenant that asks for nothing stays active.
	Window time.Duration
	// Tick is how often the shares and the reserve are recomputed.
	Tick time.Duration
	// MaxTenants bounds the tenants tracked at once.
	MaxTenants int
	// DefaultWeight is the weight of a tenant without one of its own.
	DefaultWeight float64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// DefaultConfig: demand remembered for 1 s, shares recomputed every 100 ms,
// 4,096 tenants tracked, weight 1.
func DefaultConfig() Config {
	return Config{Window: time.Second, Tick: 100 * time.Millisecond, MaxTenants: 4096, DefaultWeight: 1}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.Window <= 0 {
		errs = append(errs, fmt.Errorf("fairshare: Window must be positive, got %v", c.Window))
	}
	if c.Tick <= 0 || c.Tick > c.Window {
		errs = append(errs, fmt.Errorf("fairshare: Tick must be in (0, Window], got %v", c.Tick))
	}
	if c.MaxTenants < 1 {
		errs = append(errs, fmt.Errorf("fairshare: MaxTenants must be at least 1, got %d", c.MaxTenants))
	}
	if err := checkWeight(c.DefaultWeight); err != nil {
		errs = append(errs, fmt.Errorf("fairshare: DefaultWeight: %w", err))
	}
	return errors.Join(errs...)
}

func checkWeight(w float64) error {
	if !(w > 0) || math.IsInf(w, 0) || w > callmeta.MaxWeight {
		return fmt.Errorf("a weight must be in (0, %g], got %v", callmeta.MaxWeight, w)
	}
	return nil
}

// Shares is safe for concurrent use.
type Shares struct {
	cfg Config
	now func() time.Time

	mu      sync.Mutex
	weights map[string]float64 // configured weights; others get DefaultWeight
	caps    map[string]float64 // configured caps on calls in flight; others none
	tenants map[string]*tenant
	active  float64 // Σ weight of the active tenants
	// floods is Σ over the active tenants over their share of max(0,
	// min(share, peak + 1) − inflight): what the floods need and do not
	// hold.
	floods float64
	// pool is what the tenants under their share need together (their
	// mean use + 2 √ of it + 1 call), and pooled their calls in flight.
	pool, pooled float64
	total        float64 // the calls in flight, every tenant's
	limit        int64   // the limit the shares were last computed for
	seenLimit    int64   // the limit the last caller saw: the next tick's
	nextTick     time.Time
	lastTick     time.Time
	half         time.Time // when the current demand bucket started
}

type tenant struct {
	name     string
	weight   float64
	inflight float64 // its calls in flight
	// demand is the most calls held or asked for at once, in the current
	// and the previous half Window.
	demandCur, demandPrev float64
	lastAsk               time.Time
	isActive              bool
	share                 float64 // limit × weight ÷ active weight, at the last tick
	deficit               float64 // over its share: max(0, need − inflight), counted in Shares.floods
	// usage is the calls in flight averaged over time (an exponential
	// average with time constant Window), from area, the in-flight
	// call-seconds since the last tick, accrued at every change.
	usage, area float64
	lastChange  time.Time
	// asks and refused count its asks, and those refused here, in the
	// current and the previous half Window.
	asksCur, asksPrev, refusedCur, refusedPrev float64
	// under is, at the last tick, usage below underFraction of its share
	// and at most refusedFraction of its asks refused here: the tenant
	// takes less than its share and is not held back from more. It may
	// burst past its share into any room.
	under bool
}

// New returns Shares for cfg, or cfg's validation error.
func New(cfg Config) (*Shares, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	t := now()
	return &Shares{cfg: cfg, now: now, weights: map[string]float64{}, tenants: map[string]*tenant{},
		nextTick: t, lastTick: t, half: t}, nil
}

// SetWeights replaces the configured weights (tenant → weight); tenants not
// named get DefaultWeight. They apply from the next Tick.
func (s *Shares) SetWeights(w map[string]float64) error {
	for name, v := range w {
		if err := checkWeight(v); err != nil {
			return fmt.Errorf("fairshare: tenant %q: %w", name, err)
		}
	}
	c := make(map[string]float64, len(w))
	for k, v := range w {
		c[k] = v
	}
	s.mu.Lock()
	s.weights = c
	s.nextTick = time.Time{} // recompute at the next call
	s.mu.Unlock()
	return nil
}

// SetCaps replaces the caps (tenant → most calls in flight); tenants not
// named have none. A cap applies from the next call: Acquire refuses a call
// that would take its tenant past it, whatever room there is. Calls of a
// tenant counted in Other's entry are not capped.
func (s *Shares) SetCaps(caps map[string]int64) error {
	for name, v := range caps {
		if v < 1 {
			return fmt.Errorf("fairshare: tenant %q: a cap must be at least 1, got %d", name, v)
		}
	}
	c := make(map[string]float64, len(caps))
	for k, v := range caps {
		c[k] = float64(v)
	}
	s.mu.Lock()
	s.caps = c
	s.mu.Unlock()
	return nil
}

// Ticket is an admitted call's hold on its tenant's share; Release it once.
type Ticket struct {
	t      *tenant
	weight float64
}

// Weight is the weight the call's tenant had when the call was admitted
// (its entry's: Other's for a tenant counted there); zero for no ticket.
func (tk Ticket) Weight() float64 { return tk.weight }

// Acquire reports whether tenant may have one more call in flight under a
// limiter that holds at most limit calls (and admitted this one). On true
// the caller owes Release(ticket).
func (s *Shares) Acquire(name string, limit int64) (Ticket, bool) {
	return s.acquire(name, limit, false)
}

// AcquireAnyway counts one more call of tenant in flight without asking:
// for a call the limiter admits whatever the shares (a critical first
// attempt, from its reserve). The caller owes Release(ticket).
func (s *Shares) AcquireAnyway(name string, limit int64) Ticket {
	tk, _ := s.acquire(name, limit, true)
	return tk
}

func (s *Shares) acquire(name string, limit int64, anyway bool) (Ticket, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.askLocked(name, limit)
	t.asksCur++
	if c, capped := s.caps[t.name]; capped && !anyway && t.inflight+1 > c {
		t.refusedCur++
		return Ticket{}, false
	}
	// A tenant under its share may burst into any room but the floods';
	// a flood only into room that leaves the others what they need.
	others := s.floods
	if t.under {
		if t.inflight < t.share {
			return s.admitLocked(t), true
		}
	} else {
		others = s.floods - t.deficit + max(s.pool-s.pooled, 0)
	}
	const epsilon = 1e-9 // sums of floats: the last free place is free
	if anyway || t.inflight == 0 || s.total+1 <= float64(s.limit)-others+epsilon {
		return s.admitLocked(t), true
	}
	t.refusedCur++
	return Ticket{}, false
}

// Note records that tenant asked for a call the limiter refused: it is
// active, and its share is held for it, though it holds no call.
func (s *Shares) Note(name string, limit int64) {
	s.mu.Lock()
	s.askLocked(name, limit)
	s.mu.Unlock()
}

// askLocked records an ask of tenant name: the tick if one is due, its
// entry, its activity and its demand.
func (s *Shares) askLocked(name string, limit int64) *tenant {
	now := s.now()
	s.seenLimit = limit
	s.tickLocked(now)
	t := s.tenantLocked(name, now)
	t.lastAsk = now
	t.accrue(now)
	if !t.isActive {
		s.activateLocked(t)
	}
	if ask := t.inflight + 1; ask > t.demandCur {
		t.demandCur = ask
		s.setDeficitLocked(t)
		if t.under {
			s.pool = math.Max(s.pool, burstNeed(t))
		}
	}
	return t
}

func (s *Shares) admitLocked(t *tenant) Ticket {
	t.inflight++
	s.total++
	if t.under {
		s.pooled++
	}
	s.setDeficitLocked(t)
	return Ticket{t: t, weight: t.weight}
}

// Release ends an admitted call's hold.
func (s *Shares) Release(tk Ticket) {
	if tk.t == nil {
		return
	}
	now := s.now()
	s.mu.Lock()
	tk.t.accrue(now)
	tk.t.inflight--
	s.total--
	if tk.t.isActive && tk.t.under {
		s.pooled--
	}
	if tk.t.isActive {
		s.setDeficitLocked(tk.t)
	}
	s.mu.Unlock()
}

// tenantLocked returns name's entry, making it if there is room, else
// Other's.
func (s *Shares) tenantLocked(name string, now time.Time) *tenant {
	if t := s.tenants[name]; t != nil {
		return t
	}
	if len(s.tenants) >= s.cfg.MaxTenants-1 { // the last entry is Other's
		name = Other
		if t := s.tenants[name]; t != nil {
			return t
		}
	}
	t := &tenant{name: name, weight: s.weightOf(name), lastAsk: now, lastChange: now, under: true}
	s.tenants[name] = t
	return t
}

func (s *Shares) weightOf(name string) float64 {
	if w, ok := s.weights[name]; ok {
		return w
	}
	return s.cfg.DefaultWeight
}

// activateLocked counts t among the active tenants until the next tick:
// its share is what it would get with the others' as they stand.
func (s *Shares) activateLocked(t *tenant) {
	t.isActive, t.under, t.deficit = true, true, 0
	s.active += t.weight
	t.share = float64(s.limit) * t.weight / s.active
	s.pool += poolHeadroom(0) // its next call; its use joins the pool at the tick
	s.pooled += t.inflight
}

// accrue adds t's in-flight call-seconds since its last change.
func (t *tenant) accrue(now time.Time) {
	if dt := now.Sub(t.lastChange); dt > 0 {
		t.area += t.inflight * dt.Seconds()
		t.lastChange = now
	}
}

// setDeficitLocked brings t's part of the floods' reserve up to date: a
// tenant over its share needs its recent peak and one call more, at most
// its share. A tenant under its share has none of its own; the pool holds
// room for the under tenants together.
func (s *Shares) setDeficitLocked(t *tenant) {
	if !t.isActive || t.under {
		return
	}
	peak := max(t.demandCur, t.demandPrev)
	d := math.Max(math.Min(t.share, peak+1)-t.inflight, 0)
	s.floods += d - t.deficit
	t.deficit = d
}

// poolHeadroom is the room the tenants under their share need beyond
// their mean use together: two standard deviations of a Poisson count of
// that mean, and one call.
func poolHeadroom(mean float64) float64 { return 2*math.Sqrt(mean) + 1 }

// tickLocked recomputes the active set, the shares, the floods' reserve
// and the pool, at most once per Tick, with the limit the last caller saw;
// it rolls the demand buckets every half Window.
func (s *Shares) tickLocked(now time.Time) {
	if now.Before(s.nextTick) {
		return
	}
	dt := now.Sub(s.lastTick).Seconds()
	s.nextTick, s.lastTick, s.limit = now.Add(s.cfg.Tick), now, s.seenLimit
	roll := now.Sub(s.half) >= s.cfg.Window/2
	if roll {
		s.half = now
	}
	s.active, s.floods, s.pool, s.pooled = 0, 0, 0, 0
	for name, t := range s.tenants {
		if roll {
			t.demandPrev, t.demandCur = t.demandCur, t.inflight
			t.asksPrev, t.asksCur = t.asksCur, 0
			t.refusedPrev, t.refusedCur = t.refusedCur, 0
		}
		t.weight = s.weightOf(name)
		t.accrue(now)
		if dt > 0 {
			alpha := math.Min(dt/s.cfg.Window.Seconds(), 1)
			t.usage += alpha * (t.area/dt - t.usage)
		}
		t.area = 0
		idle := now.Sub(t.lastAsk)
		t.isActive = t.inflight > 0 || idle < s.cfg.Window
		t.deficit = 0
		if t.isActive {
			s.active += t.weight
		} else if idle >= 2*s.cfg.Window {
			delete(s.tenants, name)
		}
	}
	mean, bound, burst := 0.0, 0.0, 0.0
	for _, t := range s.tenants {
		if !t.isActive {
			continue
		}
		t.share = float64(s.limit) * t.weight / s.active
		refused := t.refusedCur + t.refusedPrev
		t.under = t.usage < underFraction*t.share && refused <= refusedFraction*(t.asksCur+t.asksPrev)
		if t.under {
			mean += t.usage
			bound += burstShare * t.share
			burst = math.Max(burst, burstNeed(t))
			s.pooled += t.inflight
		} else {
			s.setDeficitLocked(t)
		}
	}
	s.pool = math.Max(math.Min(mean+poolHeadroom(mean), bound), burst)
}

// burstNeed is the room an under tenant's own burst needs: its recent peak,
// one call and √peak more, up to burstShare times its share. The pool holds
// at least the largest: many small tenants share their headroom, one
// bursty tenant's is its own.
func burstNeed(t *tenant) float64 {
	peak := max(t.demandCur, t.demandPrev)
	return math.Min(peak+1+math.Sqrt(peak), burstShare*t.share)
}

// Snapshot is the state of one tenant, for status pages, metrics and tests.
type Snapshot struct {
	Tenant   string
	Weight   float64
	InFlight int64
	Share    float64
	Active   bool
}

// Snapshot returns every tracked tenant's state.
func (s *Shares) Snapshot() []Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Snapshot, 0, len(s.tenants))
	for _, t := range s.tenants {
		out = append(out, Snapshot{Tenant: t.name, Weight: t.weight, InFlight: int64(t.inflight), Share: t.share, Active: t.isActive})
	}
	return out
}

// Tracked is how many tenants have an entry now.
func (s *Shares) Tracked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tenants)
}

// underFraction: a tenant whose average use is below this fraction of its
// share counts as under it, and may burst past it. One that uses its whole
// share on average (a flood held at it) does not.
const underFraction = 0.75

// refusedFraction: a tenant that had more than this fraction of its asks
// refused here wants more than it gets, however little it uses: it is not
// under its share, so that squeezing a flood does not make it look quiet.
const refusedFraction = 0.1

// burstShare bounds the pool: the tenants under their share together hold
// room for at most this multiple of their shares.
const burstShare = 1.5
