package verifier

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leveehq/levee/pkg/callmeta"
)

// Tenants share the queue, over real gRPC: a tenant whose calls fill the
// queue gives up its newest queued call to a quiet tenant's arrival
// (RESOURCE_EXHAUSTED, reason pushed_out), and the quiet call is hashed
// next in turn, not after everything the flood queued. Hashing time is
// counted by tenant.
func TestTenantsShareTheQueue(t *testing.T) {
	cfg := testConfig()
	cfg.QueueCapacity = 6
	h := start(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	release, wait := h.occupy("hold")
	var floods []func() error
	for i := range cfg.QueueCapacity {
		floods = append(floods, h.goHash(ctx, "flood"))
		h.waitQueued(i + 1)
	}
	quiet := h.goHash(ctx, "quiet")
	// The flood's newest call leaves the queue; the quiet one takes its place.
	pushed := floods[len(floods)-1]()
	if st := wantCode(t, pushed, codes.ResourceExhausted); st.Message() != status.Convert(errPushedOut).Message() {
		t.Errorf("the pushed-out call: %q", st.Message())
	}
	h.waitQueued(cfg.QueueCapacity)
	release()
	wantOK(t, "hold", wait())
	wantOK(t, "quiet", quiet())
	for i, w := range floods[:len(floods)-1] {
		wantOK(t, fmt.Sprint("flood ", i), w())
	}
	got := h.hashed()
	if i := slices.Index(got, "quiet"); i < 0 || i > 2 {
		t.Errorf("hash order %q: want the quiet tenant's call second after the hold, not behind the flood", got)
	}
	if diff := cmp.Diff(map[string]float64{reasonPushedOut: 1}, h.dropped()); diff != "" {
		t.Errorf("dropped_total by reason (-want +got):\n%s", diff)
	}
	for _, tenant := range []string{"quiet", "flood", "hold"} {
		if got := h.metric("levee_verifier_tenant_work_seconds_total", map[string]string{"tenant": tenant}); got <= 0 {
			t.Errorf("tenant %s worked %v s, want > 0", tenant, got)
		}
	}
}

// The weight a gateway sends in levee-tenant-weight shares the workers, over
// real gRPC: a tenant of weight 3 queued beside one of weight 1 has three
// calls hashed for each of the other's (unweighted, they would alternate).
func TestTenantWeightsShareTheWorkers(t *testing.T) {
	cfg := testConfig()
	cfg.QueueCapacity = 8
	h := start(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	release, wait := h.occupy("hold")
	var calls []func() error
	for i := range 6 {
		calls = append(calls, h.goHashAs(ctx, callmeta.Facts{Tenant: "gold", Weight: 3}))
		h.waitQueued(i + 1)
	}
	for i := range 2 {
		calls = append(calls, h.goHash(ctx, "plain"))
		h.waitQueued(7 + i)
	}
	release()
	wantOK(t, "hold", wait())
	for i, w := range calls {
		wantOK(t, fmt.Sprint("call ", i), w())
	}
	got := h.hashed()
	first := got[1:5] // after the hold
	if n := countOf(first, "gold"); n != 3 {
		t.Errorf("hash order %q: %d of the first four after the hold were gold's, want 3", got, n)
	}
}

func countOf(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}
