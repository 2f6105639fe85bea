// Package backoff is the one retry backoff of Levee's processes: a ceiling
// that doubles with each consecutive failure up to a cap, and a wait drawn
// uniformly below it ("full jitter"), so that processes that failed together
// — a fleet that lost etcd or budgetd at the same moment — spread their
// retries over the whole interval instead of coming back in step.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Ceiling is the longest wait after n consecutive failures (n ≥ 1):
// base × 2^(n-1), capped at limit. n < 1 counts as 1.
func Ceiling(n int, base, limit time.Duration) time.Duration {
	n = max(n, 1)
	if n > 63 || base > limit>>(n-1) {
		return limit
	}
	return base << (n - 1)
}

// Full is the wait after n consecutive failures: uniform in
// [0, Ceiling(n, base, limit)), and at least 1 ns so that a caller never spins.
func Full(n int, base, limit time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(max(Ceiling(n, base, limit), 1)))) + 1
}

// Sleep waits d; it returns false, at once, if ctx ends first.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Backoff counts consecutive failures for a loop that retries: each Wait
// sleeps Full(failures) and counts one more; Reset starts over after a
// success. It is not safe for concurrent use.
type Backoff struct {
	base, limit time.Duration
	failures    int
}

// New returns a Backoff whose ceilings grow from base to limit.
func New(base, limit time.Duration) *Backoff { return &Backoff{base: base, limit: limit} }

// Reset starts the growth over.
func (b *Backoff) Reset() { b.failures = 0 }

// Wait sleeps the next wait; it returns false if ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	b.failures++
	return Sleep(ctx, Full(b.failures, b.base, b.limit))
}
