package storm

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
)

// CapacityConfig says how the lab measures a fleet's capacity C, the
// goodput at saturation that loads are fractions of.
type CapacityConfig struct {
	// Fixed, when positive, is C itself: nothing is measured.
	Fixed float64
	// Callers closed-loop callers keep the fleet saturated for Measure,
	// after Warmup; each sends one attempt at a time with Deadline, and
	// waits Pause after a refusal (so that refusals do not take the CPU the
	// fleet needs).
	Callers         int
	Warmup, Measure time.Duration
	Deadline, Pause time.Duration
}

// DefaultCapacity: 16 callers, 1 s of warm-up, 5 s measured, 5 s deadlines,
// 2 ms after a refusal.
func DefaultCapacity() CapacityConfig {
	return CapacityConfig{Callers: 16, Warmup: time.Second, Measure: 5 * time.Second, Deadline: 5 * time.Second, Pause: 2 * time.Millisecond}
}

// Validate reports every invalid field.
func (c CapacityConfig) Validate() error {
	if c.Fixed > 0 {
		return nil
	}
	if c.Callers < 1 || c.Callers > 4096 || c.Warmup < 0 || c.Measure < time.Second || c.Deadline <= 0 || c.Pause < 0 {
		return fmt.Errorf("storm: capacity: want 1–4096 callers, warm-up ≥ 0, measure ≥ 1s, deadline > 0, pause ≥ 0; got %d, %v, %v, %v, %v",
			c.Callers, c.Warmup, c.Measure, c.Deadline, c.Pause)
	}
	return nil
}

// measureCapacity saturates the fleet at target with closed-loop callers
// and returns its goodput in successful verifications per second: C. A
// closed loop is right here, and only here: it measures what the fleet can
// do when it always has work, which an open loop at an unknown rate cannot.
func measureCapacity(parent context.Context, target string, q request, c CapacityConfig) (float64, error) {
	if c.Fixed > 0 {
		return c.Fixed, nil
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
	if err != nil {
		return 0, fmt.Errorf("storm: capacity: %w", err)
	}
	defer cc.Close()
	rpc := verifyv1.NewVerifyServiceClient(cc)

	var counting atomic.Bool
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(parent)
	var wg sync.WaitGroup
	for range c.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				actx, acancel := context.WithTimeout(ctx, c.Deadline)
				_, err := rpc.Verify(actx, q.verify())
				acancel()
				switch {
				case err == nil:
					if counting.Load() {
						ok.Add(1)
					}
				case ctx.Err() != nil:
					return
				default:
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
					if status.Code(err) == codes.ResourceExhausted || status.Code(err) == codes.Unavailable {
						t := time.NewTimer(c.Pause)
						select {
						case <-ctx.Done():
						case <-t.C:
						}
						t.Stop()
					}
				}
			}
		}()
	}
	sleep := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	sleep(c.Warmup)
	counting.Store(true)
	began := time.Now()
	sleep(c.Measure)
	counting.Store(false)
	took := time.Since(began)
	cancel()
	wg.Wait()
	if err := parent.Err(); err != nil {
		return 0, err
	}
	if ok.Load() == 0 {
		e, _ := firstErr.Load().(error)
		return 0, fmt.Errorf("storm: capacity: no verification succeeded in %v (%d failed; first: %v)", took.Round(time.Millisecond), failed.Load(), e)
	}
	return float64(ok.Load()) / took.Seconds(), nil
}
