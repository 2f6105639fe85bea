package admission

import (
	"errors"
	"fmt"
	"time"
)

// MaxCeiling bounds Config.Ceiling and SetCeiling: far beyond any fleet, and
// small enough that no arithmetic on a limit can overflow.
const MaxCeiling = 1 << 20

// ErrInvalidConfig is wrapped by every error Config.Validate and
// Limiter.SetShares return.
var ErrInvalidConfig = errors.New("admission: invalid config")

// Clock tells time. Durations are taken between its readings, so it must be
// monotonic (the system clock's readings are). Tests inject a fake.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Config configures a Limiter. Start from DefaultConfig.
type Config struct {
	// InitialLimit is the adaptive limit before the first window. Zero
	// starts it at the ceiling, and keeps it there, following the ceiling as
	// it moves, until a window first observes a queue (see slow start in the
	// package doc): for a limiter whose ceiling is the capacity it guards,
	// as a gateway's is (its verifiers' slots).
	InitialLimit int
	// MinLimit is the floor of the adaptive limit: however high the queue
	// wait, this many requests stay admissible, so the limiter keeps
	// receiving the samples it needs to recover.
	MinLimit int
	// Ceiling is the most the limit can ever be, adaptively or not. It can
	// be changed at run time with SetCeiling.
	Ceiling int

	// TargetQueueWait is the verifier queue wait the limit aims for: a
	// window whose observed queue wait is above it shrinks the limit, one at
	// or below it may grow it.
	TargetQueueWait time.Duration
	// Backoff is the smallest factor one window can scale the limit by: a
	// window observing queue wait w > target scales it by
	// max(Backoff, target/w).
	Backoff float64
	// Window is the shortest time between two recomputations of the limit.
	Window time.Duration
	// MinSamples is the fewest samples a window is evaluated on; a window
	// with fewer carries over into the next, unless it holds an Overloaded
	// outcome.
	MinSamples int

	// CriticalReserve is the share of the limit that only critical requests
	// may use: interactive and batch requests may use at most
	// 1 − CriticalReserve of it.
	CriticalReserve float64
	// BatchShare is the share of the limit batch requests may use.
	BatchShare float64
	// RetryShare scales the share of a retry: a retry may use at most
	// RetryShare × the share of a first attempt of its priority, so retries
	// are shed before first attempts of the same priority.
	RetryShare float64

	// Clock tells time; nil means the system clock.
	Clock Clock
}

// DefaultConfig returns the defaults: a limit starting at 8 that adapts
// between 2 and 1,000 towards a 50 ms queue wait, at most once per 250 ms
// window of at least 10 samples and by at most ×0.7 per window; 20% of the
// limit reserved for critical requests, half of it usable by batch, and
// retries allowed 90% of their priority's share.
func DefaultConfig() Config {
	return Config{
		InitialLimit:    8,
		MinLimit:        2,
		Ceiling:         1000,
		TargetQueueWait: 50 * time.Millisecond,
		Backoff:         0.7,
		Window:          250 * time.Millisecond,
		MinSamples:      10,
		CriticalReserve: 0.2,
		BatchShare:      0.5,
		RetryShare:      0.9,
	}
}

// Validate reports every invalid field; each problem wraps ErrInvalidConfig
// and names the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.MinLimit < 1 {
		bad("MinLimit must be at least 1, got %d", c.MinLimit)
	}
	if c.Ceiling < 1 || c.Ceiling > MaxCeiling {
		bad("Ceiling must be in [1, %d], got %d", MaxCeiling, c.Ceiling)
	} else if c.Ceiling < c.MinLimit {
		bad("Ceiling %d is below MinLimit %d", c.Ceiling, c.MinLimit)
	}
	if c.InitialLimit != 0 && (c.InitialLimit < c.MinLimit || c.InitialLimit > c.Ceiling || c.InitialLimit < 1) {
		bad("InitialLimit must be 0 (the ceiling) or in [MinLimit, Ceiling] = [%d, %d], got %d", c.MinLimit, c.Ceiling, c.InitialLimit)
	}
	if c.TargetQueueWait <= 0 {
		bad("TargetQueueWait must be positive, got %v", c.TargetQueueWait)
	}
	if !(c.Backoff > 0 && c.Backoff < 1) {
		bad("Backoff must be in (0, 1), got %g", c.Backoff)
	}
	if c.Window <= 0 {
		bad("Window must be positive, got %v", c.Window)
	}
	if c.MinSamples < 1 {
		bad("MinSamples must be at least 1, got %d", c.MinSamples)
	}
	errs = append(errs, checkShares(c.CriticalReserve, c.BatchShare, c.RetryShare)...)
	return errors.Join(errs...)
}

// checkShares returns one error per problem with the shares: each in range,
// and together in the shedding order (see the package documentation).
func checkShares(criticalReserve, batchShare, retryShare float64) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	inRange := true
	if !(criticalReserve >= 0 && criticalReserve < 1) {
		bad("CriticalReserve must be in [0, 1), got %g", criticalReserve)
		inRange = false
	}
	if !(batchShare >= 0 && batchShare <= 1) {
		bad("BatchShare must be in [0, 1], got %g", batchShare)
		inRange = false
	}
	if !(retryShare >= 0 && retryShare <= 1) {
		bad("RetryShare must be in [0, 1], got %g", retryShare)
		inRange = false
	}
	if !inRange {
		return errs
	}
	// The comparisons allow for rounding: 0.9 × 0.8 is not exactly 0.72.
	const slack = 1e-9
	interactive := 1 - criticalReserve
	if retryShare < interactive-slack {
		bad("RetryShare %g is below 1 − CriticalReserve = %g: critical retries would be shed before interactive first attempts",
			retryShare, interactive)
	}
	if batchShare > retryShare*interactive+slack {
		bad("BatchShare %g is above RetryShare × (1 − CriticalReserve) = %g: batch would be shed after interactive retries",
			batchShare, retryShare*interactive)
	}
	return errs
}
