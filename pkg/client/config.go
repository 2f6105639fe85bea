package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/deadline"
)

// Budget is the retry budget a Client spends. *budget.Budget (package
// github.com/leveehq/levee/pkg/budget) implements it; so can a test double.
type Budget interface {
	// RecordFirstAttempt counts a first attempt, just before it is sent.
	RecordFirstAttempt()
	// Allow spends a retry token if there is one; false means "do not
	// retry". It must not block.
	Allow() bool
	// RecordRetry counts a retry, just before it is sent.
	RecordRetry()
}

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("client: invalid config")

// Config configures a Client. Start from DefaultConfig and set Budget.
type Config struct {
	// Budget funds retries: one token per retry. nil means no retries at
	// all (every retryable failure is returned as if the budget were empty).
	Budget Budget
	// MaxAttempts bounds the attempts of one call, the first included
	// (1 disables retries), at most callmeta.MaxAttempt.
	MaxAttempts int

	// Deadline is the deadline policy: a call whose context has no deadline
	// gets Deadline.Default, a longer one is clamped to Deadline.Max, and
	// each attempt carries the remaining time less Deadline.Margin (the
	// reply's way back).
	Deadline deadline.Config
	// MinAttemptTime is the least time an attempt must have (after the
	// margin) to be worth starting; with less left, the call ends without
	// another attempt. It should exceed one round trip plus the server's
	// cheapest answer. Zero only refuses attempts with no time at all.
	MinAttemptTime time.Duration

	// BackoffBase and BackoffCap shape the full-jitter backoff: before
	// retry n (1 for the first) the client sleeps a uniformly random
	// duration in [0, min(BackoffCap, BackoffBase × 2^(n-1))), on top of
	// the server's pushback if it sent one.
	BackoffBase time.Duration
	BackoffCap  time.Duration

	// Priority and Tenant are stamped on every call unless a CallOption
	// overrides them. Priority must be set (Critical, Interactive or
	// Batch); Tenant may be empty.
	Priority callmeta.Priority
	Tenant   string

	// Sleep waits d or until ctx ends, returning ctx's error then; nil
	// means a timer. Tests inject one to observe backoffs without waiting.
	Sleep func(ctx context.Context, d time.Duration) error
	// Registry receives the metrics; nil means a new private registry.
	// Several Clients may share one registry: they share the series.
	Registry prometheus.Registerer
}

// DefaultConfig returns the defaults: no budget (set one), 3 attempts, a
// 2 s default deadline (30 s max, 5 ms margin), 10 ms least attempt time,
// backoff base 50 ms capped at 1 s, priority Interactive.
func DefaultConfig() Config {
	d := deadline.DefaultConfig()
	d.Default = 2 * time.Second
	return Config{
		MaxAttempts:    3,
		Deadline:       d,
		MinAttemptTime: 10 * time.Millisecond,
		BackoffBase:    50 * time.Millisecond,
		BackoffCap:     time.Second,
		Priority:       callmeta.Interactive,
	}
}

// Validate reports every invalid field; each problem wraps ErrInvalidConfig
// and names the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > callmeta.MaxAttempt {
		bad("MaxAttempts must be in [1, %d], got %d", callmeta.MaxAttempt, c.MaxAttempts)
	}
	if err := c.Deadline.Validate(); err != nil {
		bad("Deadline: %v", err)
	}
	if c.MinAttemptTime < 0 {
		bad("MinAttemptTime must not be negative, got %v", c.MinAttemptTime)
	} else if c.Deadline.Default > 0 && c.MinAttemptTime+c.Deadline.Margin >= c.Deadline.Default {
		bad("MinAttemptTime %v plus Deadline.Margin %v leaves nothing of Deadline.Default %v",
			c.MinAttemptTime, c.Deadline.Margin, c.Deadline.Default)
	}
	if c.BackoffBase <= 0 {
		bad("BackoffBase must be positive, got %v", c.BackoffBase)
	}
	if c.BackoffCap < c.BackoffBase {
		bad("BackoffCap %v must be at least BackoffBase %v", c.BackoffCap, c.BackoffBase)
	}
	if c.Priority == callmeta.PriorityUnspecified || c.Priority > callmeta.Batch {
		bad("Priority must be critical, interactive or batch, got %v", c.Priority)
	}
	if err := (callmeta.Facts{Tenant: c.Tenant}).Validate(); err != nil {
		bad("Tenant: %v", err)
	}
	return errors.Join(errs...)
}
