package verifier

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
)

// The capacity knob is refused unless the server was started with it.
func TestCapacityKnobDisabledByDefault(t *testing.T) {
	h := start(t, testConfig())
	ctx := context.Background()
	_, err := h.admin.SetCapacity(ctx, &verifyv1.SetCapacityRequest{WorkerFraction: 0.5})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = h.admin.GetCapacity(ctx, &verifyv1.GetCapacityRequest{})
	wantCode(t, err, codes.FailedPrecondition)
	if got := h.metric("levee_verifier_workers_active", nil); got != 1 {
		t.Errorf("levee_verifier_workers_active = %v, want 1", got)
	}
}

// Enabled, SetCapacity takes workers out of service (fewer hashes run at
// once), refuses invalid values without changing anything, and a change
// with a duration undoes itself.
func TestCapacityKnob(t *testing.T) {
	cfg := testConfig()
	cfg.Workers = 2
	cfg.EnableCapacityKnob = true
	h := start(t, cfg)
	ctx := context.Background()
	active := func() float64 { return h.metric("levee_verifier_workers_active", nil) }

	half := &verifyv1.Capacity{WorkerFraction: 0.5, Slowdown: 1, ActiveWorkers: 1}
	resp, err := h.admin.SetCapacity(ctx, &verifyv1.SetCapacityRequest{WorkerFraction: 0.5})
	wantOK(t, "SetCapacity", err)
	if diff := cmp.Diff(half, resp.GetCapacity(), protocmp.Transform()); diff != "" {
		t.Errorf("SetCapacity(0.5) (-want +got):\n%s", diff)
	}
	if got := active(); got != 1 {
		t.Errorf("levee_verifier_workers_active = %v, want 1", got)
	}

	// With one worker active, a second request waits even though the
	// second worker is idle.
	release, wait := h.occupy("hold")
	waitSecond := h.goHash(ctx, "second")
	h.waitQueued(1)
	if got := h.metric("levee_verifier_inflight", nil); got != 1 {
		t.Errorf("levee_verifier_inflight = %v with one active worker, want 1", got)
	}

	invalid := []struct {
		name    string
		req     *verifyv1.SetCapacityRequest
		wantMsg string
	}{
		{"fraction above 1", &verifyv1.SetCapacityRequest{WorkerFraction: 1.5}, "worker_fraction"},
		{"negative fraction", &verifyv1.SetCapacityRequest{WorkerFraction: -0.1}, "worker_fraction"},
		{"NaN fraction", &verifyv1.SetCapacityRequest{WorkerFraction: math.NaN()}, "worker_fraction"},
		{"slowdown below 1", &verifyv1.SetCapacityRequest{Slowdown: 0.5}, "slowdown"},
		{"slowdown above 100", &verifyv1.SetCapacityRequest{Slowdown: 101}, "slowdown"},
		{"infinite slowdown", &verifyv1.SetCapacityRequest{Slowdown: math.Inf(1)}, "slowdown"},
		{"negative duration", &verifyv1.SetCapacityRequest{WorkerFraction: 0.5, DurationMs: -1}, "duration_ms"},
		{"duration over an hour", &verifyv1.SetCapacityRequest{WorkerFraction: 0.5, DurationMs: 3600001}, "duration_ms"},
		{"duration overflowing nanoseconds", &verifyv1.SetCapacityRequest{WorkerFraction: 0.5, DurationMs: math.MaxInt64}, "duration_ms"},
		{"duration wrapping to zero", &verifyv1.SetCapacityRequest{WorkerFraction: 0.5, DurationMs: 1 << 62}, "duration_ms"},
	}
	for _, tt := range invalid {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.admin.SetCapacity(ctx, tt.req)
			st := wantCode(t, err, codes.InvalidArgument)
			if !strings.Contains(st.Message(), tt.wantMsg) {
				t.Errorf("message %q does not name %s", st.Message(), tt.wantMsg)
			}
			got, err := h.admin.GetCapacity(ctx, &verifyv1.GetCapacityRequest{})
			wantOK(t, "GetCapacity", err)
			if diff := cmp.Diff(half, got.GetCapacity(), protocmp.Transform()); diff != "" {
				t.Errorf("capacity changed by an invalid request (-want +got):\n%s", diff)
			}
		})
	}

	// Full capacity: the idle worker takes the waiting request while the
	// first is still held.
	_, err = h.admin.SetCapacity(ctx, &verifyv1.SetCapacityRequest{WorkerFraction: 1})
	wantOK(t, "SetCapacity(1)", err)
	wantOK(t, "second", waitSecond())
	release()
	wantOK(t, "hold", wait())
	if got := h.hashed(); !slices.Equal(got, []string{"hold", "second"}) {
		t.Errorf("hashed %q, want hold then second", got)
	}

	// A change with a duration restores full capacity by itself.
	resp, err = h.admin.SetCapacity(ctx, &verifyv1.SetCapacityRequest{WorkerFraction: 0.5, DurationMs: 50})
	wantOK(t, "SetCapacity(0.5, 50ms)", err)
	if got := resp.GetCapacity(); got.GetActiveWorkers() != 1 || got.GetRemainingMs() <= 0 || got.GetRemainingMs() > 50 {
		t.Errorf("SetCapacity(0.5, 50ms) = %v, want 1 active worker for at most 50 ms", got)
	}
	h.waitFor("full capacity restored", func() bool { return active() == 2 })
	got, err := h.admin.GetCapacity(ctx, &verifyv1.GetCapacityRequest{})
	wantOK(t, "GetCapacity", err)
	full := &verifyv1.Capacity{WorkerFraction: 1, Slowdown: 1, ActiveWorkers: 2}
	if diff := cmp.Diff(full, got.GetCapacity(), protocmp.Transform()); diff != "" {
		t.Errorf("capacity after the duration (-want +got):\n%s", diff)
	}
}

// Fault injection refuses the chosen fraction of calls with UNAVAILABLE
// before anything is hashed, and goes when it is lifted.
func TestCapacityKnobInjectsFaults(t *testing.T) {
	cfg := testConfig()
	cfg.EnableCapacityKnob = true
	h := start(t, cfg)
	ctx := context.Background()
	if _, err := h.admin.SetCapacity(ctx, &verifyv1.SetCapacityRequest{ErrorFraction: 1.5}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("error_fraction 1.5: %v, want INVALID_ARGUMENT", err)
	}
	resp, err := h.admin.SetCapacity(ctx, &verifyv1.SetCapacityRequest{ErrorFraction: 1})
	if err != nil || resp.GetCapacity().GetErrorFraction() != 1 {
		t.Fatalf("SetCapacity(error_fraction 1) = %v, %v", resp, err)
	}
	before := h.hashCount()
	for range 10 {
		_, err := h.verify.Hash(ctx, &verifyv1.HashRequest{Password: []byte("pw")})
		if st := wantCode(t, err, codes.Unavailable); !strings.Contains(st.Message(), "injected fault") {
			t.Errorf("message %q does not say the fault was injected", st.Message())
		}
	}
	if got := h.hashCount() - before; got != 0 {
		t.Errorf("%v hashes ran for calls refused by injected faults", got)
	}
	if _, err := h.admin.SetCapacity(ctx, &verifyv1.SetCapacityRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.verify.Hash(ctx, &verifyv1.HashRequest{Password: []byte("pw")}); err != nil {
		t.Errorf("after lifting the faults: %v", err)
	}
}

// A client watching health (every gateway does) does not hold a drain to its
// timeout: the drain ends long-lived streams before GracefulStop waits for
// the calls in flight.
func TestDrainEndsHealthWatches(t *testing.T) {
	cfg := testConfig()
	cfg.DrainTimeout = time.Minute
	h := start(t, cfg)
	stream, err := healthpb.NewHealthClient(h.cc).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := h.stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > cfg.DrainTimeout/3 {
		t.Errorf("drain with a health watcher took %v: it waited for the stream (timeout %v)", took, cfg.DrainTimeout)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			break // the watch ended with the server
		}
	}
}
