package ledger

import (
	"math"
	"sort"
	"time"

	"github.com/leveehq/levee/internal/window"
)

// shareFloor keeps a client with no reported traffic from a zero share, so
// that a fleet of quiet clients splits the minimum rate evenly.
const shareFloor = 0.01 // first attempts per second

// rateAlpha weighs a client's newest first-attempt rate in its average.
const rateAlpha = 0.3

// Ledger is the accounting of one budget key on the leader. It is not safe
// for concurrent use; the Server serialises access.
//
// Tokens are earned fleet-wide: Ratio × every reported first attempt that
// the client's local budget has not already earned on (Counts.Fallback),
// plus MinPerSecond × elapsed time. Each earning is split at once among the
// clients in proportion to their first-attempt rates (a small floor keeps a
// quiet client from a zero share) and put in each client's own account; a
// lease grants whole tokens from the client's account, so under scarcity
// each client gets its proportional share whatever the order in which clients
// report, and a noisy client cannot drain the budget for the rest. A client's
// account holds at most its share of the cap; what overflows (clients that
// are not retrying) goes to a shared pool that any client may draw on once
// its own account is empty, so tokens are not wasted when they are
// plentiful. Fractions stay in the accounts, so hundreds of small clients are
// not starved by rounding. Granted tokens never come back: a lease replaces
// the previous one and unused tokens expire with it.
//
// During its first round (one lease period from its creation, in which every
// live client reports at least once) a ledger does not know the clients'
// rates yet: each report's earning goes to the reporting client alone, and
// the time allowance to the pool, so no client's first grant depends on the
// order in which the fleet reported to a new leader.
//
// The cap on tokens held (accounts and pool together) is Burst plus what the
// fleet earns in one lease period, so a busy fleet whose grants trail its
// reports loses nothing. Hence over any interval: tokens granted ≤ cap +
// Ratio × first attempts reported in it and not earned on locally +
// MinPerSecond × its length. A new ledger (a new leader) starts with nothing
// saved.
//
// Rates are counted over a window of monotonic seconds since the ledger's
// creation (a wall-clock step moves nothing); a report's counts are spread
// over the span they took to accumulate, so a catch-up report after an
// outage reads as the rate it was, not as one busy second.
//
// The split is computed lazily: a global index accumulates earnings per unit
// of weight, and a client's account is settled against it when the client
// reports. Report is O(1); Forget and Status are O(clients).
type Ledger struct {
	settings Settings
	lease    time.Duration
	born     time.Time // creation; the first round lasts one lease from it
	last     time.Time
	clients  map[string]*clientState
	// index is the cumulative earnings per unit of client weight.
	index float64
	// weight is the sum of the clients' weights (rate + shareFloor).
	weight float64
	// pool holds overflow from full accounts; accounts is the sum of the
	// settled accounts.
	pool, accounts float64
	window         rateWindow

	firstTotal, retriesTotal, grantedTotal, deniedTotal uint64
}

type clientState struct {
	rate       float64 // first attempts per second, averaged
	account    float64 // tokens earned for this client, not yet granted
	index      float64 // the ledger index the account was settled at
	lastReport time.Time
	has, wants uint32
}

func (c *clientState) weight() float64 { return c.rate + shareFloor }

// NewLedger returns an empty ledger; lease is how long granted tokens stay
// valid (it sizes the cap).
func NewLedger(s Settings, lease time.Duration, now time.Time) *Ledger {
	return &Ledger{settings: s, lease: lease, born: now, last: now, clients: map[string]*clientState{}, window: newRateWindow(now)}
}

// Settings returns the settings in force.
func (l *Ledger) Settings() Settings { return l.settings }

// SetSettings changes the settings from now on; the pool is clamped to the
// new cap (accounts on their next settlement).
func (l *Ledger) SetSettings(s Settings, now time.Time) {
	l.earn(now, 0)
	l.settings = s
	l.pool = min(l.pool, max(l.capacity()-l.accounts, 0))
}

// capacity is the most tokens held unspent.
func (l *Ledger) capacity() float64 {
	return l.settings.Burst + l.settings.Ratio*l.window.rate(firstCount)*l.lease.Seconds()
}

// earn adds the time allowance since the last call plus Ratio × first, split
// among the clients by weight (into the pool when there are none).
func (l *Ledger) earn(now time.Time, first uint64) {
	amount := l.settings.Ratio * float64(first)
	if dt := now.Sub(l.last); dt > 0 {
		amount += l.settings.MinPerSecond * dt.Seconds()
		l.last = now
	}
	if amount <= 0 {
		return
	}
	if l.weight > 0 && !l.firstRound(now) {
		l.index += amount / l.weight
		return
	}
	l.pool = min(l.pool+amount, max(l.capacity()-l.accounts, 0))
}

// firstRound reports whether now is within one lease period of the
// ledger's creation.
func (l *Ledger) firstRound(now time.Time) bool { return now.Sub(l.born) < l.lease }

// settle brings c's account up to the index, overflowing into the pool.
//
// An account holds at most the client's current share of the cap, and the
// accounts together at most the cap: shares move (traffic shifts from one
// client to another, the cap falls with the traffic or the settings), and
// an account filled under an old share must not add to others filled under
// the new ones, or the tokens held could exceed the cap and a burst of
// grants the bound.
func (l *Ledger) settle(c *clientState) {
	earned := max((l.index-c.index)*c.weight(), 0)
	c.index = l.index
	l.deposit(c, earned)
}

// deposit puts earned in c's account, up to the client's share of the cap,
// and the rest in the pool, up to the cap.
func (l *Ledger) deposit(c *clientState, earned float64) {
	limit := l.capacity()
	own := limit * c.weight() / l.weight
	excess := max(c.account-own, 0)
	c.account -= excess
	l.accounts = max(l.accounts-excess, 0)
	keep := max(min(earned, own-c.account, limit-l.accounts), 0)
	c.account += keep
	l.accounts += keep
	l.pool = min(l.pool+earned+excess-keep, max(limit-l.accounts, 0))
}

// Counts is one client's report for one key.
type Counts struct {
	// First is the first attempts sent since the previous report.
	First uint64
	// Fallback is the part of First sent while the client's key was in
	// fallback: its local budget already earned on them, so they count in
	// the rates but earn nothing here. Values above First count as First.
	Fallback uint64
	// Retries is the retries sent since the previous report.
	Retries uint64
	// Span is how long the counts took to accumulate, as the client
	// claims it; the ledger reads the rate over no less than the time
	// since the client's previous report (one lease period for its first).
	Span time.Duration
}

// Scaled is c with its counts multiplied by f in [0, 1], rounded down: the
// part of a report that is credited.
func (c Counts) Scaled(f float64) Counts {
	f = min(max(f, 0), 1)
	scale := func(n uint64) uint64 { return uint64(math.Floor(float64(n) * f)) }
	c.First, c.Fallback, c.Retries = scale(c.First), scale(c.Fallback), scale(c.Retries)
	return c
}

// Grant is what one report leases to its client.
type Grant struct {
	// Tokens is the whole tokens of the client's new lease.
	Tokens uint32
	// FallbackMinPerSecond is the client's share of MinPerSecond, in
	// proportion to its weight, for its local budget while it cannot reach
	// the leader.
	FallbackMinPerSecond float64
}

// Report records one client's counts since its previous report and returns
// its new lease (at most want tokens).
func (l *Ledger) Report(clientID string, r Counts, want uint32, now time.Time) Grant {
	r.Fallback = min(r.Fallback, r.First)
	l.firstTotal += r.First
	l.retriesTotal += r.Retries

	// The span a report's rate is read over is the longer of the one it
	// claims and the one the ledger saw: the time since the client's
	// previous report, or one lease period for its first. A client can
	// claim a longer span (a catch-up report after an outage reads as the
	// rate it was) and so lower its own rate and weight, never a shorter
	// one to raise them.
	c := l.clients[clientID]
	seen := l.lease // a first report has no interval yet
	if c != nil {
		seen = now.Sub(c.lastReport)
	}
	span := max(r.Span, seen)
	l.window.add(now, span, r.First, r.Retries)

	// Settle what the client earned at its old weight, then learn its rate
	// (its weight from now on), so that its share of this report's earning
	// is weighed by this report's traffic: a client that joins a busy fleet
	// is not held at the floor for its first round.
	inst := 0.0
	if s := span.Seconds(); s > 0 {
		inst = float64(r.First) / s
	}
	if c == nil {
		c = &clientState{index: l.index, rate: inst}
		l.clients[clientID] = c
		l.weight += c.weight()
	} else {
		l.earn(now, 0)
		l.settle(c)
		l.weight -= c.weight()
		c.rate = max(c.rate+rateAlpha*(inst-c.rate), 0)
		l.weight += c.weight()
	}
	c.lastReport = now
	c.wants = want

	earned := r.First - r.Fallback
	if l.firstRound(now) {
		l.earn(now, 0)
		l.deposit(c, l.settings.Ratio*float64(earned))
	} else {
		l.earn(now, earned)
		l.settle(c)
	}

	// Grant from the client's own account, then from the shared pool.
	g := min(math.Floor(c.account+1e-9), float64(want))
	c.account = max(c.account-g, 0)
	l.accounts = max(l.accounts-g, 0)
	if rest := float64(want) - g; rest > 0 {
		p := min(math.Floor(l.pool+1e-9), rest)
		l.pool = max(l.pool-p, 0)
		g += p
	}
	granted := uint32(g)
	c.has = granted
	l.grantedTotal += uint64(granted)
	l.deniedTotal += uint64(want - granted)
	return Grant{Tokens: granted, FallbackMinPerSecond: l.settings.MinPerSecond * c.weight() / l.weight}
}

// Forget drops clients that have not reported for idle; what they had
// earned returns to the pool.
func (l *Ledger) Forget(now time.Time, idle time.Duration) {
	for id, c := range l.clients {
		if now.Sub(c.lastReport) > idle {
			l.settle(c)
			l.weight = max(l.weight-c.weight(), 0)
			l.accounts = max(l.accounts-c.account, 0)
			l.pool = min(l.pool+c.account, max(l.capacity()-l.accounts, 0))
			delete(l.clients, id)
		}
	}
	if len(l.clients) == 0 {
		l.weight, l.accounts = 0, 0
	}
}

// LedgerStatus is a snapshot of a ledger.
type LedgerStatus struct {
	Settings                         Settings
	Tokens                           float64
	FirstPerSecond, RetriesPerSecond float64
	FirstTotal, RetriesTotal         uint64
	GrantedTotal, DeniedTotal        uint64
	Clients                          []ClientSnapshot
}

// ClientSnapshot is one client's state in a ledger.
type ClientSnapshot struct {
	ID             string
	Has, Wants     uint32
	FirstPerSecond float64
	SinceReport    time.Duration
}

// Status returns a snapshot, clients sorted by ID.
func (l *Ledger) Status(now time.Time) LedgerStatus {
	l.earn(now, 0)
	l.window.advance(now)
	for _, c := range l.clients {
		l.settle(c)
	}
	st := LedgerStatus{
		Settings:         l.settings,
		Tokens:           l.pool + l.accounts,
		FirstPerSecond:   l.window.rate(firstCount),
		RetriesPerSecond: l.window.rate(retryCount),
		FirstTotal:       l.firstTotal,
		RetriesTotal:     l.retriesTotal,
		GrantedTotal:     l.grantedTotal,
		DeniedTotal:      l.deniedTotal,
		Clients:          make([]ClientSnapshot, 0, len(l.clients)),
	}
	for id, c := range l.clients {
		st.Clients = append(st.Clients, ClientSnapshot{ID: id, Has: c.has, Wants: c.wants, FirstPerSecond: c.rate, SinceReport: now.Sub(c.lastReport)})
	}
	sort.Slice(st.Clients, func(i, j int) bool { return st.Clients[i].ID < st.Clients[j].ID })
	return st
}

// rateWindow counts first attempts and retries in one-second buckets over
// the last windowLen seconds, counted on the monotonic clock from origin.
const windowLen = 10

const (
	firstCount = iota
	retryCount
)

type rateWindow struct {
	origin  time.Time
	w       *window.Window
	begun   bool
	sec     int64 // the newest second seen
	started int64 // the earliest second any count covers
}

func newRateWindow(origin time.Time) rateWindow {
	return rateWindow{origin: origin, w: window.New(windowLen, time.Second, 2).AlignTo(origin)}
}

func (w *rateWindow) second(t time.Time) int64 {
	return int64(math.Floor(t.Sub(w.origin).Seconds()))
}

// at is the start of second s.
func (w *rateWindow) at(s int64) time.Time { return w.origin.Add(time.Duration(s) * time.Second) }

func (w *rateWindow) advance(now time.Time) {
	s := w.second(now)
	if !w.begun {
		w.begun, w.started, w.sec = true, s, s
		return
	}
	w.sec = max(w.sec, s)
}

// add counts first and retries spread evenly over the span ending at now
// (what falls before the window is dropped).
func (w *rateWindow) add(now time.Time, span time.Duration, first, retries uint64) {
	w.advance(now)
	if span < time.Second {
		w.w.Add(w.at(w.sec), firstCount, float64(first))
		w.w.Add(w.at(w.sec), retryCount, float64(retries))
		return
	}
	end := now.Sub(w.origin).Seconds()
	start := end - span.Seconds()
	from := int64(math.Floor(start))
	w.started = min(w.started, from)
	for s := max(from, w.sec-windowLen+1); s <= w.sec; s++ {
		share := (min(float64(s+1), end) - max(float64(s), start)) / span.Seconds()
		if share <= 0 {
			continue
		}
		w.w.Add(w.at(s), firstCount, share*float64(first))
		w.w.Add(w.at(s), retryCount, share*float64(retries))
	}
}

// rate is count i per second over the window (or since the earliest count,
// if that is shorter). It does not advance the window.
func (w *rateWindow) rate(i int) float64 {
	if !w.begun {
		return 0
	}
	span := min(float64(w.sec-w.started+1), windowLen)
	return w.w.Sum(w.at(w.sec), i) / span
}
