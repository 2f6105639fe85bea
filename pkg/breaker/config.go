package breaker

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidConfig is wrapped by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("breaker: invalid config")

// maxDuration bounds every duration in a Config, so that a jittered
// duration (at most twice the configured one) added to the breaker's
// internal clock cannot overflow. A breaker that waits a day is a
// misconfiguration anyway.
const maxDuration = 24 * time.Hour

// minWindow keeps each of the window's buckets at least 100µs wide.
const minWindow = time.Millisecond

// Config configures a Breaker. Start from DefaultConfig.
type Config struct {
	// Window is the span of the rolling window over which the closed
	// breaker measures the failure rate. It is kept in 10 buckets of
	// Window/10, so the rate covers between 9/10 Window and Window of
	// history; outcomes older than that are forgotten.
	Window time.Duration
	// MinRequests is the fewest outcomes in the window that may trip the
	// breaker: below it, not even 100% failures trip.
	MinRequests int
	// FailureRate, in (0, 1], trips the closed breaker when
	// failures/(failures+successes) over the window reaches it, and re-opens
	// a half-open breaker when a ramp step's failure rate reaches it (see
	// the package doc for the half-open rule).
	FailureRate float64

	// OpenFor is the base time a breaker stays open. Each opening lasts
	// OpenFor × (1 + Jitter × U) with U drawn from Rand in [0, 1).
	OpenFor time.Duration
	// Jitter, in [0, 1], spreads open times and ramp step durations so that
	// breakers tripped together (every gateway losing the same node) do not
	// probe it together. 0 disables it.
	Jitter float64

	// Ramp lists the fractions of requests a half-open breaker admits, one
	// step after another: strictly increasing, each in (0, 1], the last
	// exactly 1. Completing the final step closes the breaker.
	Ramp []float64
	// StepFor is the base duration of a ramp step, jittered like OpenFor.
	StepFor time.Duration
	// StepMinRequests (at least 1) is the fewest outcomes a step must see
	// before it may advance: a step advances once it has lasted its
	// jittered StepFor AND seen StepMinRequests outcomes without reaching
	// FailureRate. Closing is earned by evidence, never by time alone.
	StepMinRequests int
	// ProbeEvery makes a half-open breaker admit a request, whatever the
	// step's fraction, when none has been admitted for this long, so that a
	// 1% step on a quiet gateway still gets probes. The first Allow after
	// the open time ends is always admitted.
	ProbeEvery time.Duration

	// OnStateChange, when set, is told of every state change, in order, one
	// at a time, outside the breaker's lock: it may call the Breaker's
	// methods. It runs on the goroutine of the call that caused the change
	// (or, while another goroutine is already delivering changes, on that
	// one), so it delays that call: keep it short (set a gauge, log a line).
	// If it panics, the panic reaches that call; later changes are still
	// delivered.
	OnStateChange func(from, to State)

	// Clock tells time; nil means the system clock. Durations are measured
	// with Time.Sub, so the system clock's monotonic reading is used.
	Clock Clock
	// Rand returns numbers in [0, 1) for the jitter and for half-open
	// admission; nil means math/rand/v2's Float64. It is only called with
	// the breaker's lock held, so it need not be safe for concurrent use.
	// Values outside [0, 1) are clamped into it.
	Rand func() float64
}

// DefaultConfig returns the defaults: trip at 50% failures over a 10 s
// window once it holds 20 outcomes; stay open 5 s to 7.5 s; then ramp
// through 1%, 5%, 20% and 100% of requests, each step lasting 1 s to 1.5 s
// and needing at least one outcome; probe at least every 200 ms while
// half-open.
func DefaultConfig() Config {
	return Config{
		Window:          10 * time.Second,
		MinRequests:     20,
		FailureRate:     0.5,
		OpenFor:         5 * time.Second,
		Jitter:          0.5,
		Ramp:            []float64{0.01, 0.05, 0.2, 1},
		StepFor:         time.Second,
		StepMinRequests: 1,
		ProbeEvery:      200 * time.Millisecond,
	}
}

// Validate reports every invalid field; each problem wraps ErrInvalidConfig
// and names the field and its value.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.Window < minWindow || c.Window > maxDuration {
		bad("Window must be in [%v, %v], got %v", minWindow, maxDuration, c.Window)
	}
	if c.MinRequests < 1 {
		bad("MinRequests must be at least 1, got %d", c.MinRequests)
	}
	if math.IsNaN(c.FailureRate) || c.FailureRate <= 0 || c.FailureRate > 1 {
		bad("FailureRate must be in (0, 1], got %g", c.FailureRate)
	}
	if c.OpenFor <= 0 || c.OpenFor > maxDuration {
		bad("OpenFor must be in (0, %v], got %v", maxDuration, c.OpenFor)
	}
	if math.IsNaN(c.Jitter) || c.Jitter < 0 || c.Jitter > 1 {
		bad("Jitter must be in [0, 1], got %g", c.Jitter)
	}
	if err := checkRamp(c.Ramp); err != nil {
		bad("Ramp %v: %v", c.Ramp, err)
	}
	if c.StepFor <= 0 || c.StepFor > maxDuration {
		bad("StepFor must be in (0, %v], got %v", maxDuration, c.StepFor)
	}
	if c.StepMinRequests < 1 {
		bad("StepMinRequests must be at least 1, got %d", c.StepMinRequests)
	}
	if c.ProbeEvery <= 0 || c.ProbeEvery > maxDuration {
		bad("ProbeEvery must be in (0, %v], got %v", maxDuration, c.ProbeEvery)
	}
	return errors.Join(errs...)
}

func checkRamp(ramp []float64) error {
	if len(ramp) == 0 {
		return errors.New("empty")
	}
	for i, f := range ramp {
		if math.IsNaN(f) || f <= 0 || f > 1 {
			return fmt.Errorf("step %d is %g, not in (0, 1]", i, f)
		}
		if i > 0 && f <= ramp[i-1] {
			return fmt.Errorf("step %d (%g) does not exceed step %d (%g)", i, f, i-1, ramp[i-1])
		}
	}
	if last := ramp[len(ramp)-1]; last != 1 {
		return fmt.Errorf("last step is %g, must be 1", last)
	}
	return nil
}
