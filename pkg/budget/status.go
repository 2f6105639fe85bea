package budget

import (
	"time"

	"github.com/leveehq/levee/pkg/ledger"
)

// KeyStatus describes one key at one instant.
type KeyStatus struct {
	Key  string
	Mode Mode
	// Cause says why a key in fallback is there (one of the Cause*
	// constants); empty in shared mode.
	Cause string
	// FallbackFor is how long the key has been in fallback.
	FallbackFor time.Duration

	// Tokens is what Allow can spend now: LeaseTokens + FallbackTokens.
	Tokens float64
	// LeaseTokens is what is left of the lease (0 once it expired or the
	// Client closed).
	LeaseTokens int64
	// FallbackTokens is the local budget, in fallback only.
	FallbackTokens float64

	// HasLease says whether a lease ever arrived; LeaseAge is the time since
	// the latest did, LeaseLeft the time until it expires (≤ 0 once
	// expired), both on the local monotonic clock.
	HasLease  bool
	LeaseAge  time.Duration
	LeaseLeft time.Duration
	// Settings are budgetd's latest for the key (SettingsFromServer), or the
	// configured default ratio.
	Settings           ledger.Settings
	SettingsFromServer bool

	// Totals since the Client started.
	FirstAttempts, Retries uint64
	// Counts not yet acknowledged by budgetd (carried to the next refresh).
	UnreportedFirst, UnreportedRetries uint64
	// Allowed counts tokens Allow spent (AllowedFallback of them from the
	// local budget); Denied counts Allow's refusals; Granted sums budgetd's
	// grants.
	Allowed, AllowedFallback, Denied, Granted uint64
	// FallbackEntries counts moves from shared mode to fallback (a new key
	// starts in fallback without counting one).
	FallbackEntries uint64
}

// Status describes a Client at one instant.
type Status struct {
	ClientID string
	// Mode is Fallback when any key is in fallback.
	Mode Mode
	// Leader is the budgetd leader named by the latest lease.
	Leader string
	// LastError is the latest refresh failure (nil if none ever), from
	// LastErrorAge ago; it is kept after recovery, for diagnosis.
	LastError    error
	LastErrorAge time.Duration
	// ConsecutiveFailures counts refreshes failed since the last success.
	ConsecutiveFailures int
	// HasLease says whether any lease ever arrived; LastLeaseAge is the
	// time since the latest did.
	HasLease     bool
	LastLeaseAge time.Duration
	Keys         []KeyStatus
}

// Status returns a snapshot of the key. It takes the key's lock briefly
// (never held across I/O), not any lock of the request path.
func (b *Budget) Status() KeyStatus {
	now := b.clock.Now()
	st := KeyStatus{
		Key:             b.key,
		Mode:            Shared,
		FirstAttempts:   b.first.Load(),
		Retries:         b.retries.Load(),
		Denied:          b.denied.Load(),
		Granted:         b.granted.Load(),
		AllowedFallback: b.fallbackAllowed.Load(),
		FallbackEntries: b.fallbackEntries.Load(),
		Settings:        ledger.Settings{Ratio: b.cfg.DefaultRatio},
	}
	st.UnreportedFirst = st.FirstAttempts - min(b.ackFirst.Load(), st.FirstAttempts)
	st.UnreportedRetries = st.Retries - min(b.ackRetries.Load(), st.Retries)
	if s := b.settings.Load(); s != nil {
		st.Settings, st.SettingsFromServer = *s, true
	}

	b.mu.Lock()
	st.Allowed = b.leaseSpent.Load() + st.AllowedFallback
	if l := b.lease.Load(); l != nil {
		st.HasLease, st.LeaseAge, st.LeaseLeft = true, now.Sub(l.arrived), l.expires.Sub(now)
		if !l.retired {
			left := max(l.tokens.Load(), 0)
			st.LeaseTokens = left
			st.Allowed += uint64(int64(l.granted) - left)
		}
	}
	fb := b.fallback.Load()
	b.mu.Unlock()

	if fb != nil {
		st.Mode, st.Cause, st.FallbackFor = Fallback, fb.cause, now.Sub(fb.since)
		st.FallbackTokens = fb.available(now, b.first.Load())
	}
	st.Tokens = float64(st.LeaseTokens) + st.FallbackTokens
	return st
}

// Status returns a snapshot of the client and every key.
func (c *Client) Status() Status {
	now := c.now()
	st := Status{ClientID: c.cfg.ClientID, Mode: Shared, ConsecutiveFailures: int(c.failures.Load())}
	if l := c.leader.Load(); l != nil {
		st.Leader = *l
	}
	if e := c.lastErr.Load(); e != nil {
		st.LastError, st.LastErrorAge = e.err, now.Sub(e.at)
	}
	if t := c.lastLease.Load(); t != nil {
		st.HasLease, st.LastLeaseAge = true, now.Sub(*t)
	}
	for _, b := range *c.keys.Load() {
		ks := b.Status()
		if ks.Mode == Fallback {
			st.Mode = Fallback
		}
		st.Keys = append(st.Keys, ks)
	}
	return st
}
