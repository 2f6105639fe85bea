// Package breakertest holds test doubles for package breaker.
package breakertest

import (
	"sync"
	"time"

	"github.com/leveehq/levee/pkg/breaker"
)

var _ breaker.Clock = (*Clock)(nil)

// Clock is a fake breaker.Clock: time stands still until Advance moves
// it. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward and returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}
