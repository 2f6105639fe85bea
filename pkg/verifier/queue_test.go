package verifier

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
)

// Once the oldest queued request is LIFOAfter past the start its admission
// projected (here: a worker held far longer than its hash costs, a stall)
// while the queue stands (more than LIFOAfter/4 of work in it), the newest
// are hashed first, and that holds while both do; then oldest first again. The
// assertions are on order only: waiting out LIFOAfter is the precondition,
// not what is measured.
func TestAdaptiveLIFOOverGRPC(t *testing.T) {
	cfg := testConfig()
	cfg.LIFOAfter = 200 * time.Millisecond
	h := start(t, cfg)

	// A backlog whose oldest entry waits past LIFOAfter, of five verifications
	// expected to cost 30 ms each (150 ms, so that four of them still stand
	// above LIFOAfter/4): newest first.
	stored := h.costlyHash(30 * time.Millisecond)
	release, wait := h.occupy("hold")
	var waits []func() error
	var oldestQueued time.Time
	for i := range 5 {
		waits = append(waits, h.goVerify(context.Background(), fmt.Sprintf("backlog-%d", i), stored))
		h.waitQueued(i + 1) // one at a time, so that the queue order is known
		if i == 0 {
			oldestQueued = time.Now()
		}
	}
	for time.Since(oldestQueued) <= cfg.LIFOAfter {
		time.Sleep(5 * time.Millisecond)
	}
	release()
	wantOK(t, "hold", wait())
	for i, w := range waits {
		wantOK(t, fmt.Sprintf("backlog-%d", i), w())
	}
	want := []string{"hold", "backlog-4", "backlog-3", "backlog-2", "backlog-1", "backlog-0"}
	if diff := cmp.Diff(want, h.hashed()); diff != "" {
		t.Fatalf("hash order with a backlog older than LIFOAfter (-want +got):\n%s", diff)
	}
	if got := h.metric("levee_verifier_lifo", nil); got != 0 {
		t.Errorf("levee_verifier_lifo = %v after the queue drained, want 0", got)
	}

	// The queue drained: a young backlog is served oldest first again. That
	// holds only if every one of its hashes began within LIFOAfter of the
	// first arrival; a run slower than that proves nothing and is repeated.
	for attempt := 1; ; attempt++ {
		mark := len(h.hashed())
		hold := fmt.Sprintf("hold-%d", attempt)
		release, wait := h.occupy(hold)
		first := time.Now()
		var waits []func() error
		want := []string{hold}
		for i := range 3 {
			tenant := fmt.Sprintf("young-%d-%d", attempt, i)
			want = append(want, tenant)
			waits = append(waits, h.goHash(context.Background(), tenant))
			h.waitQueued(i + 1)
		}
		release()
		wantOK(t, hold, wait())
		for i, w := range waits {
			wantOK(t, want[i+1], w())
		}
		if took := h.lastBegan().Sub(first); took >= cfg.LIFOAfter {
			if attempt == 5 {
				t.Fatalf("the young backlog never drained within LIFOAfter (last took %v)", took)
			}
			t.Logf("attempt %d: the backlog took %v to drain, more than LIFOAfter; again", attempt, took)
			continue
		}
		if diff := cmp.Diff(want, h.hashed()[mark:]); diff != "" {
			t.Errorf("hash order after the queue drained (-want +got):\n%s", diff)
		}
		break
	}
}

// Draining: health turns NOT_SERVING for the server and the service, new
// calls get UNAVAILABLE, the work already queued is still done, and Serve
// returns nil once it is.
func TestDrain(t *testing.T) {
	h := start(t, testConfig())
	services := []string{"", verifyv1.VerifyService_ServiceDesc.ServiceName}
	for _, svc := range services {
		h.waitHealth(svc, healthpb.HealthCheckResponse_SERVING)
	}
	release, wait := h.occupy("hold")
	waitQueued := h.goHash(context.Background(), "queued")
	h.waitQueued(1)

	h.cancel() // Serve's context: the drain starts
	for _, svc := range services {
		h.waitHealth(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	h.waitFor("the pool to refuse new work", func() bool { return h.srv.pool.Stats().Draining })

	_, err := h.verify.Verify(as(context.Background(), "late-verify"), &verifyv1.VerifyRequest{
		EncodedHash: storedArgon2("m=64,t=1,p=1"),
		Password:    []byte("pw"),
	})
	wantCode(t, err, codes.Unavailable)
	_, err = h.verify.Hash(as(context.Background(), "late-hash"), &verifyv1.HashRequest{Password: []byte("pw")})
	wantCode(t, err, codes.Unavailable)
	if diff := cmp.Diff(map[string]float64{reasonDraining: 2}, h.dropped()); diff != "" {
		t.Errorf("dropped_total by reason (-want +got):\n%s", diff)
	}
	select {
	case <-h.served:
		t.Fatal("Serve returned with work still queued")
	default:
	}

	release()
	wantOK(t, "hold", wait())
	wantOK(t, "queued (admitted before the drain)", waitQueued())
	if err := h.stop(); err != nil {
		t.Errorf("Serve returned %v, want nil", err)
	}
	if got := h.hashed(); !slices.Equal(got, []string{"hold", "queued"}) {
		t.Errorf("hashed %q, want hold then queued", got)
	}
}
