package verifier

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
)

// Requests whose deadline passes while they wait behind a saturated pool are
// never hashed, and the drop counter says why: the caller gets
// DEADLINE_EXCEEDED and the reason is queue_expired.
func TestDeadlinePassesWhileQueuedNeverHashed(t *testing.T) {
	cfg := testConfig()
	cfg.Workers = 2
	h := start(t, cfg)

	// Both workers held: the pool is saturated.
	release1, wait1 := h.occupy("hold-1")
	release2, wait2 := h.occupy("hold-2")

	// Short deadlines, yet long enough to be admitted: the projected wait of
	// a few policy hashes is far below them. (That they were admitted, not
	// refused on arrival, is what the drop reason says.)
	const n = 4
	timeout := 500*time.Millisecond + 10*h.expected()
	var waits []func() error
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		t.Cleanup(cancel)
		waits = append(waits, h.goHash(ctx, fmt.Sprintf("expire-%d", i)))
	}
	for _, wait := range waits {
		wantCode(t, wait(), codes.DeadlineExceeded)
	}
	h.waitFor("all expired requests accounted for", func() bool { return h.dropped()[reasonQueueExpired] == n })
	h.waitQueued(0)

	// Release the workers, then send one more request: once it has been
	// hashed, anything still queued would have been hashed before it.
	release1()
	release2()
	wantOK(t, "hold-1", wait1())
	wantOK(t, "hold-2", wait2())
	wantOK(t, "after", h.goHash(context.Background(), "after")())

	if diff := cmp.Diff([]string{"hold-1", "hold-2", "after"}, h.hashed()); diff != "" {
		t.Errorf("hashed (-want +got); no expire-* may appear:\n%s", diff)
	}
	if got := h.hashCount(); got != 3 {
		t.Errorf("levee_verifier_hashes_total = %v, want 3", got)
	}
	if diff := cmp.Diff(map[string]float64{reasonQueueExpired: n}, h.dropped()); diff != "" {
		t.Errorf("dropped_total by reason (-want +got):\n%s", diff)
	}
}

// A request whose remaining deadline, when a worker picks it up, is shorter
// than its expected service time is dropped at dequeue without hashing:
// DEADLINE_EXCEEDED, reason dequeue_expired.
func TestDroppedAtDequeueWhenDeadlineShorterThanService(t *testing.T) {
	h := start(t, testConfig())
	release, wait := h.occupy("hold")

	// A stored hash with 5 s of expected work (a Verify's estimate scales
	// with the stored m×t), sent with 500 ms more than that: admitted,
	// since the queue is empty and the deadline covers the hash.
	const cost, slack = 5 * time.Second, 500 * time.Millisecond
	stored := h.costlyHash(cost)
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), cost+slack)
	defer cancel()
	waitBig := h.goVerify(ctx, "too-late", stored)
	h.waitQueued(1)

	// Hold the worker until less than the expected cost remains (but most
	// of the deadline does), then let it pick the request up.
	for time.Since(sent) < slack+100*time.Millisecond {
		time.Sleep(10 * time.Millisecond)
	}
	release()
	wantOK(t, "hold", wait())
	st := wantCode(t, waitBig(), codes.DeadlineExceeded)
	if !strings.Contains(st.Message(), "dropped before hashing") {
		t.Errorf("message %q does not say the request was dropped before hashing", st.Message())
	}
	if ctx.Err() != nil {
		t.Errorf("the caller's deadline had passed (%v): this test wants a drop at dequeue, not an expiry", ctx.Err())
	}

	if diff := cmp.Diff([]string{"hold"}, h.hashed()); diff != "" {
		t.Errorf("hashed (-want +got):\n%s", diff)
	}
	if got := h.hashCount(); got != 1 {
		t.Errorf("levee_verifier_hashes_total = %v, want 1", got)
	}
	if diff := cmp.Diff(map[string]float64{reasonExpired: 1}, h.dropped()); diff != "" {
		t.Errorf("dropped_total by reason (-want +got):\n%s", diff)
	}
}
