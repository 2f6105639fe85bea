package budgettest

import (
	"context"
	"sort"
	"sync"
	"time"
)

// Clock is a fake clock for budget.Config.Clock and Config.Now: time stands
// still until Advance moves it. Advance fires what came due in time order:
// After channels receive, AfterFunc functions run on Advance's goroutine
// (after the clock's lock is released, so they may read the clock). It is
// safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	seq     int
	waiters []*waiter
	changed chan struct{} // closed and replaced whenever waiters change
}

type waiter struct {
	at  time.Time
	seq int            // creation order, to break ties
	ch  chan time.Time // After
	fn  func()         // AfterFunc
}

// NewClock returns a Clock reading start.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the clock's time once Advance has
// moved it d or more past now (at once when d ≤ 0).
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.add(&waiter{at: c.now.Add(d), ch: ch})
	return ch
}

// AfterFunc arranges for f to run once Advance has moved the clock d or
// more past now. stop disarms it and reports whether it was still armed.
// With d ≤ 0, f runs at the next Advance.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &waiter{at: c.now.Add(max(d, 0)), fn: f}
	c.add(w)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, x := range c.waiters {
			if x == w {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				c.signal()
				return true
			}
		}
		return false
	}
}

func (c *Clock) add(w *waiter) {
	c.seq++
	w.seq = c.seq
	c.waiters = append(c.waiters, w)
	c.signal()
}

// Advance moves the clock d forward, firing what came due on the way in
// time order, each at its own instant.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		w := c.nextDue(end)
		if w == nil {
			break
		}
		c.now = w.at
		if w.ch != nil {
			w.ch <- w.at
			continue
		}
		c.mu.Unlock()
		w.fn()
		c.mu.Lock()
	}
	c.now = end
	c.signal()
	c.mu.Unlock()
}

// nextDue removes and returns the earliest waiter due by end, or nil.
func (c *Clock) nextDue(end time.Time) *waiter {
	best := -1
	for i, w := range c.waiters {
		if w.at.After(end) {
			continue
		}
		if best < 0 || w.at.Before(c.waiters[best].at) || w.at.Equal(c.waiters[best].at) && w.seq < c.waiters[best].seq {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	w := c.waiters[best]
	c.waiters = append(c.waiters[:best], c.waiters[best+1:]...)
	c.signal()
	return w
}

// Pending returns how far in the future each unfired After channel fires,
// soonest first (AfterFunc timers are not included; see Timers).
func (c *Clock) Pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pendingLocked(false)
}

// Timers returns how far in the future each armed AfterFunc fires, soonest
// first.
func (c *Clock) Timers() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pendingLocked(true)
}

func (c *Clock) pendingLocked(funcs bool) []time.Duration {
	var out []time.Duration
	for _, w := range c.waiters {
		if (w.fn != nil) == funcs {
			out = append(out, w.at.Sub(c.now))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// WaitForWaiters blocks until at least n After channels are pending (ones
// whose receivers gave up included), or ctx ends: a test's way to know a
// goroutine is parked on the clock.
func (c *Clock) WaitForWaiters(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		got, changed := len(c.pendingLocked(false)), c.changed
		c.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *Clock) signal() {
	close(c.changed)
	c.changed = make(chan struct{})
}
