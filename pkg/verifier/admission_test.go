package verifier

import (
	"context"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/callmeta"
)

// Refusals on arrival: the call ends at once and is never hashed. The
// node's own bounds (queue full, projected wait past MaxQueueWait) are
// overload: RESOURCE_EXHAUSTED with grpc-retry-pushback-ms: -1, reason
// arrival. A deadline this node cannot meet (too short for one hash, or for
// the queue ahead plus the hash) is the caller's: DEADLINE_EXCEEDED without
// pushback, reason deadline.
func TestRefusedOnArrival(t *testing.T) {
	const aheadCost = 5 * time.Second
	tests := []struct {
		name string
		cfg  func(*Config)
		// ahead queues work in front of the arriving call; nil for none.
		ahead func(h *harness, ctx context.Context) (wait func() error)
		// call is the arriving call, made with a deadline of timeout.
		call         func(h *harness, ctx context.Context, opts ...grpc.CallOption) error
		timeout      time.Duration
		wantCode     codes.Code
		wantMsg      *regexp.Regexp
		wantPushback []string
		wantReason   string // the drop's reason label
	}{
		{
			name: "deadline shorter than the projected queue wait",
			ahead: func(h *harness, ctx context.Context) func() error {
				return h.goVerify(ctx, "ahead", h.costlyHash(aheadCost))
			},
			call:    hashCall,
			timeout: time.Second, // covers the hash itself, not the wait
			// This caller's deadline, not the node's bound: not overload,
			// so no pushback (a less busy node may meet it).
			wantCode:     codes.DeadlineExceeded,
			wantMsg:      regexp.MustCompile(`projected queue wait plus the expected hash time would overrun this call's deadline; not queued`),
			wantPushback: nil,
			wantReason:   reasonDeadline,
		},
		{
			name: "projected queue wait over MaxQueueWait",
			cfg:  func(c *Config) { c.MaxQueueWait = time.Second },
			ahead: func(h *harness, ctx context.Context) func() error {
				return h.goVerify(ctx, "ahead", h.costlyHash(aheadCost))
			},
			call:         hashCall,
			timeout:      30 * time.Second, // the deadline would allow it
			wantCode:     codes.ResourceExhausted,
			wantMsg:      regexp.MustCompile(`projected queue wait exceeds the maximum; do not retry`),
			wantPushback: []string{"-1"},
			wantReason:   reasonArrival,
		},
		{
			name: "queue full",
			cfg:  func(c *Config) { c.QueueCapacity = 1 },
			ahead: func(h *harness, ctx context.Context) func() error {
				return h.goHash(ctx, "ahead")
			},
			call:         hashCall,
			timeout:      30 * time.Second,
			wantCode:     codes.ResourceExhausted,
			wantMsg:      regexp.MustCompile(`queue full; do not retry`),
			wantPushback: []string{"-1"},
			wantReason:   reasonArrival,
		},
		{
			name: "deadline shorter than one hash on an empty queue",
			call: func(h *harness, ctx context.Context, opts ...grpc.CallOption) error {
				_, err := h.verify.Verify(ctx, &verifyv1.VerifyRequest{
					EncodedHash: h.costlyHash(aheadCost),
					Password:    []byte("pw"),
				}, opts...)
				return err
			},
			timeout:  time.Second,
			wantCode: codes.DeadlineExceeded,
			wantMsg: regexp.MustCompile(`^remaining deadline (\d+(\.\d+)?m?s) is shorter than the expected ` +
				`argon2id time (\d+(\.\d+)?s)$`),
			wantPushback: nil, // a deadline problem, not overload: retrying elsewhere may work
			wantReason:   reasonDeadline,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			h := start(t, cfg)
			wantHashed := []string{}
			if tt.ahead != nil {
				release, wait := h.occupy("hold")
				ctx, cancel := context.WithCancel(context.Background())
				waitAhead := tt.ahead(h, ctx)
				h.waitQueued(1)
				t.Cleanup(func() {
					// The work ahead is never hashed: it leaves the queue
					// first.
					cancel()
					wantCode(t, waitAhead(), codes.Canceled)
					release()
					wantOK(t, "hold", wait())
				})
				wantHashed = []string{"hold"}
			}

			ctx, cancel := context.WithTimeout(as(context.Background(), "refused"), tt.timeout)
			defer cancel()
			var trailer metadata.MD
			err := tt.call(h, ctx, grpc.Trailer(&trailer))
			st := wantCode(t, err, tt.wantCode)
			if !tt.wantMsg.MatchString(st.Message()) {
				t.Errorf("message %q does not match %q", st.Message(), tt.wantMsg)
			}
			if ctx.Err() != nil {
				t.Errorf("the call ended when its deadline passed (%v); want a refusal at once", ctx.Err())
			}
			if diff := cmp.Diff(tt.wantPushback, trailer.Get(callmeta.PushbackKey)); diff != "" {
				t.Errorf("trailer %s (-want +got):\n%s", callmeta.PushbackKey, diff)
			}

			// The shed path builds no per-call load report and no timing
			// trailers: a refusal must stay cheap, and the out-of-band ORCA
			// stream already tells balancers how loaded the node is.
			for _, key := range []string{"endpoint-load-metrics-bin", callmeta.QueueWaitKey, callmeta.ServiceTimeKey, callmeta.WorkersKey} {
				if got := trailer.Get(key); len(got) != 0 {
					t.Errorf("refusal's trailer %s = %q, want none", key, got)
				}
			}

			if m := tt.wantMsg.FindStringSubmatch(st.Message()); len(m) == 5 {
				remaining, _ := time.ParseDuration(m[1])
				expected, _ := time.ParseDuration(m[3])
				if remaining <= 0 || remaining > tt.timeout {
					t.Errorf("message names a remaining deadline of %v; the caller sent %v", remaining, tt.timeout)
				}
				if expected < aheadCost {
					t.Errorf("message names an expected time of %v; the hash was built to cost %v", expected, aheadCost)
				}
			}

			if got := h.hashed(); slices.Contains(got, "refused") || !slices.Equal(got, wantHashed) {
				t.Errorf("hashed %q, want %q", got, wantHashed)
			}
			if got := h.hashCount(); got != float64(len(wantHashed)) {
				t.Errorf("levee_verifier_hashes_total = %v, want %d", got, len(wantHashed))
			}
			if diff := cmp.Diff(map[string]float64{tt.wantReason: 1}, h.dropped()); diff != "" {
				t.Errorf("dropped_total by reason (-want +got):\n%s", diff)
			}
		})
	}
}

func hashCall(h *harness, ctx context.Context, opts ...grpc.CallOption) error {
	_, err := h.verify.Hash(ctx, &verifyv1.HashRequest{Password: []byte("pw")}, opts...)
	return err
}

// A caller who cancels while queued gets CANCELED, leaves the queue at once
// and is never hashed; the drop is counted with reason cancelled.
func TestCancelledWhileQueuedNeverHashed(t *testing.T) {
	h := start(t, testConfig())
	release, wait := h.occupy("hold")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitLeaver := h.goHash(ctx, "leaver")
	h.waitQueued(1)
	cancel()
	wantCode(t, waitLeaver(), codes.Canceled)
	h.waitFor("the cancelled request to leave the queue", func() bool {
		return h.dropped()[reasonCancel] == 1 && h.metric("levee_verifier_queue_length", nil) == 0
	})

	release()
	wantOK(t, "hold", wait())
	wantOK(t, "after", h.goHash(context.Background(), "after")())
	if diff := cmp.Diff([]string{"hold", "after"}, h.hashed()); diff != "" {
		t.Errorf("hashed (-want +got):\n%s", diff)
	}
	if got := h.hashCount(); got != 2 {
		t.Errorf("levee_verifier_hashes_total = %v, want 2", got)
	}
	if diff := cmp.Diff(map[string]float64{reasonCancel: 1}, h.dropped()); diff != "" {
		t.Errorf("dropped_total by reason (-want +got):\n%s", diff)
	}
}
