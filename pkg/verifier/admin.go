package verifier

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/workpool"
)

// maxKnobDuration bounds how long one SetCapacity may last: an experiment
// that forgets to restore a node still ends.
const maxKnobDuration = time.Hour

// adminServer implements the capacity knob. Every change that has a duration
// restores full capacity by itself when it elapses.
type adminServer struct {
	verifyv1.UnimplementedVerifierAdminServiceServer

	pool    *workpool.Pool
	workers int
	enabled bool
	log     *slog.Logger

	mu       sync.Mutex
	timer    *time.Timer // restores full capacity; nil when none pending
	until    time.Time
	fraction float64
	slowdown float64
	closed   bool

	// faults is the injected error fraction's float64 bits: read on every
	// call without the lock.
	faults atomic.Uint64
}

// errInjected answers a call refused by fault injection.
var errInjected = status.Error(codes.Unavailable, "injected fault (capacity knob): not hashed")

// injectFault reports whether this call is to be refused as an injected
// fault.
func (a *adminServer) injectFault() bool {
	f := math.Float64frombits(a.faults.Load())
	return f > 0 && rand.Float64() < f
}

func newAdminServer(pool *workpool.Pool, workers int, enabled bool, log *slog.Logger) *adminServer {
	return &adminServer{pool: pool, workers: workers, enabled: enabled, log: log, fraction: 1, slowdown: 1}
}

var errKnobDisabled = status.Error(codes.FailedPrecondition,
	"capacity knob disabled: start the verifier with -enable-capacity-knob to allow experiments")

func (a *adminServer) SetCapacity(_ context.Context, req *verifyv1.SetCapacityRequest) (*verifyv1.SetCapacityResponse, error) {
	if !a.enabled {
		return nil, errKnobDisabled
	}
	fraction, slowdown, ms, faults := req.GetWorkerFraction(), req.GetSlowdown(), req.GetDurationMs(), req.GetErrorFraction()
	if fraction == 0 {
		fraction = 1
	}
	if slowdown == 0 {
		slowdown = 1
	}
	switch {
	case math.IsNaN(fraction) || fraction <= 0 || fraction > 1:
		return nil, status.Errorf(codes.InvalidArgument, "worker_fraction must be in (0, 1], got %v", req.GetWorkerFraction())
	case math.IsNaN(slowdown) || slowdown < 1 || slowdown > 100:
		return nil, status.Errorf(codes.InvalidArgument, "slowdown must be in [1, 100], got %v", req.GetSlowdown())
	case math.IsNaN(faults) || faults < 0 || faults > 1:
		return nil, status.Errorf(codes.InvalidArgument, "error_fraction must be in [0, 1], got %v", faults)
	case ms < 0 || ms > maxKnobDuration.Milliseconds(): // in ms: ms×1e6 ns may overflow
		return nil, status.Errorf(codes.InvalidArgument, "duration_ms must be in [0, %d], got %d", maxKnobDuration.Milliseconds(), ms)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errDraining
	}
	a.applyLocked(fraction, slowdown, faults)
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.until = time.Time{}
	if ms > 0 {
		d := time.Duration(ms) * time.Millisecond
		a.until = time.Now().Add(d)
		var t *time.Timer
		t = time.AfterFunc(d, func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.timer == t && !a.closed { // not superseded by a later call
				a.applyLocked(1, 1, 0)
				a.timer = nil
				a.until = time.Time{}
			}
		})
		a.timer = t
	}
	a.log.Warn("capacity changed by the admin knob", "worker_fraction", fraction, "slowdown", slowdown,
		"error_fraction", faults, "duration", time.Duration(ms)*time.Millisecond)
	return &verifyv1.SetCapacityResponse{Capacity: a.capacityLocked()}, nil
}

func (a *adminServer) GetCapacity(context.Context, *verifyv1.GetCapacityRequest) (*verifyv1.GetCapacityResponse, error) {
	if !a.enabled {
		return nil, errKnobDisabled
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return &verifyv1.GetCapacityResponse{Capacity: a.capacityLocked()}, nil
}

func (a *adminServer) applyLocked(fraction, slowdown, faults float64) {
	a.fraction, a.slowdown = fraction, slowdown
	a.faults.Store(math.Float64bits(faults))
	a.pool.SetCapacity(activeWorkers(a.workers, fraction), slowdown)
	if fraction == 1 && slowdown == 1 && faults == 0 {
		a.log.Info("full capacity restored")
	}
}

// activeWorkers is the number of workers a fraction keeps: at least one.
func activeWorkers(workers int, fraction float64) int {
	return max(1, int(math.Ceil(float64(workers)*fraction-1e-9)))
}

func (a *adminServer) capacityLocked() *verifyv1.Capacity {
	c := &verifyv1.Capacity{
		WorkerFraction: a.fraction,
		Slowdown:       a.slowdown,
		ActiveWorkers:  uint32(activeWorkers(a.workers, a.fraction)),
		ErrorFraction:  math.Float64frombits(a.faults.Load()),
	}
	if !a.until.IsZero() {
		c.RemainingMs = max(0, time.Until(a.until).Milliseconds())
	}
	return c
}

// close cancels a pending restore so that no timer outlives the server.
func (a *adminServer) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}
