// Package deadline carries a caller's time budget across gRPC hops as a
// remaining duration, never as a wall-clock timestamp.
//
// gRPC already transmits deadlines that way: the grpc-timeout request header
// holds the time left, and grpc-go turns it into the server context's
// deadline on arrival. This package adds the policy around it:
//
//   - no work is unbounded: a call that arrives without a deadline gets
//     Config.Default, and one that arrives with a longer deadline than
//     Config.Max is clamped to Max;
//   - a call that arrives with no time left is refused before its handler
//     runs;
//   - every downstream call is derived from the incoming context and carries
//     the remaining time minus Config.Margin, the hop's own overhead, so the
//     answer can still travel back before the caller gives up;
//   - a downstream call with nothing left after the margin is not made at
//     all: it fails at once with ErrNoTimeLeft (codes.DeadlineExceeded in the
//     interceptors), without a network round trip.
//
// Only deadlines are touched; metadata passes through unchanged.
package deadline

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNoTimeLeft is returned by Config.Outgoing when the context's deadline,
// less the per-hop margin, has already passed: a downstream call could not
// be answered in time and must not be made.
var ErrNoTimeLeft = errors.New("deadline: no time left for a downstream call")

// Errors returned (wrapped) by Config.Validate, one per field.
var (
	ErrInvalidDefault = errors.New("deadline: invalid Default")
	ErrInvalidMax     = errors.New("deadline: invalid Max")
	ErrInvalidMargin  = errors.New("deadline: invalid Margin")
)

// Config is the deadline policy of one process. The zero Config is not
// valid; start from DefaultConfig. Methods assume the Config is valid
// (Validate returns nil); the interceptor constructors panic otherwise.
type Config struct {
	// Default is the deadline applied to work whose caller sent none, both
	// for incoming calls (Ensure) and for downstream calls made from a
	// context without a deadline (Outgoing). It must be positive and at most
	// Max.
	Default time.Duration

	// Max bounds how long an incoming call may run: a longer incoming
	// deadline is clamped to Max. It must be positive; there is no way to
	// switch the clamp off, because a caller asking for an hour is not a
	// reason to hold a worker for an hour. A Config that means "no clamp"
	// must say so with a large Max.
	Max time.Duration

	// Margin is subtracted from the remaining time forwarded downstream: it
	// reserves this hop's own overhead (the reply's way back, marshalling,
	// scheduling). It must be at least zero and smaller than Default, so
	// that a call running on the Default deadline can still forward.
	Margin time.Duration
}

// DefaultConfig returns the fleet's default policy: Default 5s, Max 30s,
// Margin 5ms.
func DefaultConfig() Config {
	return Config{
		Default: 5 * time.Second,
		Max:     30 * time.Second,
		Margin:  5 * time.Millisecond,
	}
}

// Validate reports every invalid field of c. Each problem wraps the sentinel
// of its field (ErrInvalidDefault, ErrInvalidMax, ErrInvalidMargin), so
// callers can test with errors.Is; several problems are joined.
func (c Config) Validate() error {
	var errs []error
	if c.Default <= 0 {
		errs = append(errs, fmt.Errorf("%w: %v is not positive", ErrInvalidDefault, c.Default))
	}
	if c.Max <= 0 {
		errs = append(errs, fmt.Errorf("%w: %v is not positive", ErrInvalidMax, c.Max))
	} else if c.Default > c.Max {
		errs = append(errs, fmt.Errorf("%w: %v exceeds Max %v", ErrInvalidDefault, c.Default, c.Max))
	}
	switch {
	case c.Margin < 0:
		errs = append(errs, fmt.Errorf("%w: %v is negative", ErrInvalidMargin, c.Margin))
	case c.Default > 0 && c.Margin >= c.Default:
		errs = append(errs, fmt.Errorf("%w: %v leaves nothing of Default %v", ErrInvalidMargin, c.Margin, c.Default))
	}
	return errors.Join(errs...)
}

// mustBeValid panics when c is invalid. The interceptor constructors call it
// at wiring time: an invalid policy (say, the zero Config) would otherwise
// refuse or starve every call at run time, far from the mistake.
func (c Config) mustBeValid() {
	if err := c.Validate(); err != nil {
		panic(err)
	}
}

// Remaining returns how long is left before ctx's deadline, measured now,
// and whether ctx has a deadline at all. The duration is zero or negative
// once the deadline has passed. Without a deadline it returns 0, false.
func Remaining(ctx context.Context) (time.Duration, bool) {
	return RemainingAt(ctx, time.Now())
}

// RemainingAt is Remaining measured at now, for callers that inject a clock.
func RemainingAt(ctx context.Context, now time.Time) (time.Duration, bool) {
	d, ok := ctx.Deadline()
	if !ok {
		return 0, false
	}
	return d.Sub(now), true
}

// CanFinish reports whether work expected to take cost, started now, would
// end strictly before ctx's deadline. It is false when ctx is already done
// (deadline passed or cancelled: nobody is waiting for the result any more)
// and true when ctx has no deadline and is not done. A negative cost counts
// as zero.
func CanFinish(ctx context.Context, cost time.Duration) bool {
	return CanFinishAt(ctx, time.Now(), cost)
}

// CanFinishAt is CanFinish measured at now, for callers that inject a clock
// (a queue deciding at dequeue, say). It still reports false when ctx is
// done, whatever now says.
func CanFinishAt(ctx context.Context, now time.Time, cost time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	left, ok := RemainingAt(ctx, now)
	if !ok {
		return true
	}
	return left > max(cost, 0)
}

// Passed reports whether ctx ended because its deadline passed, as opposed
// to its caller leaving: ctx.Err() is DeadlineExceeded, or ctx was
// cancelled no more than margin before its deadline. A gRPC client resets
// the stream as its deadline passes, and the reset can reach the server
// before the server's own copy of the deadline fires (the copy is later by
// the request's transit), so a cancel that close to the deadline is the
// deadline. False while ctx is not done.
func Passed(ctx context.Context, margin time.Duration) bool {
	switch err := ctx.Err(); {
	case err == nil:
		return false
	case errors.Is(err, context.DeadlineExceeded):
		return true
	}
	left, ok := Remaining(ctx)
	return ok && left <= margin
}

// Ensure returns a context derived from ctx whose deadline is bounded: the
// Default from now when ctx has none, Max from now when ctx's deadline is
// further away than that, and ctx's own deadline otherwise. The returned
// context keeps ctx's values and cancellation; cancel releases it and must be
// called when the work is done.
func (c Config) Ensure(ctx context.Context) (context.Context, context.CancelFunc) {
	now := time.Now()
	d, ok := ctx.Deadline()
	switch {
	case !ok:
		return context.WithDeadline(ctx, now.Add(c.Default))
	case d.Sub(now) > c.Max:
		return context.WithDeadline(ctx, now.Add(c.Max))
	default:
		return context.WithCancel(ctx)
	}
}

// Outgoing derives the context for one downstream call from ctx: same
// values, same cancellation, and a deadline of ctx's deadline minus Margin
// (Default from now when ctx has none: with no caller budget to protect,
// there is nothing to reserve a margin against). Outgoing does not clamp to
// Max; incoming calls were clamped by Ensure already.
//
// It returns ErrNoTimeLeft when ctx's deadline minus Margin is not in the
// future, and ctx's error when ctx is already cancelled: in both cases no call
// should be made. On error the returned context is ctx itself and cancel is a
// no-op, so deferring cancel before checking the error is safe. On success,
// cancel releases the derived context and must be called when the call ends.
func (c Config) Outgoing(ctx context.Context) (context.Context, context.CancelFunc, error) {
	now := time.Now()
	d, ok := ctx.Deadline()
	if ok && !d.Add(-c.Margin).After(now) {
		return ctx, noop, ErrNoTimeLeft
	}
	if err := ctx.Err(); err != nil {
		return ctx, noop, err
	}
	if !ok {
		out, cancel := context.WithDeadline(ctx, now.Add(c.Default))
		return out, cancel, nil
	}
	out, cancel := context.WithDeadline(ctx, d.Add(-c.Margin))
	return out, cancel, nil
}

func noop() {}
