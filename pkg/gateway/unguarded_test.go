package gateway

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/verifier"
)

// TestUnguardedFleetHashesForCallersWhoLeft checks the lab's control fleet
// (an unguarded gateway over unguarded verifiers) over real sockets: it
// refuses nothing and computes every hash it was sent, even for callers whose
// deadline passed long before a worker reached them. A guarded fleet would
// have refused most of these calls or dropped them at dequeue; the control
// must not, or the lab could not show the failure it looks for.
func TestUnguardedFleetHashesForCallersWhoLeft(t *testing.T) {
	unguarded := func(c *verifier.Config) { c.Workers, c.Unguarded = 1, true }
	v1, v2 := startVerifier(t, unguarded), startVerifier(t, unguarded)
	cfg := gatewayConfig(v1.addr, v2.addr)
	cfg.Unguarded = true
	tg := startGateway(t, cfg)
	tg.waitServing(t, 2)
	// Each hash now holds its worker about 100 × its CPU time.
	v1.slow(t, 100)
	v2.slow(t, 100)

	hashes := func() float64 {
		return v1.metric(t, "levee_verifier_hashes_total", nil) + v2.metric(t, "levee_verifier_hashes_total", nil)
	}
	before := hashes()
	const calls = 40
	var wg sync.WaitGroup
	codesSeen := make(chan codes.Code, calls)
	for range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := tg.client.Hash(ctx, &verifyv1.HashRequest{Password: []byte("pw")})
			codesSeen <- status.Code(err)
		}()
	}
	wg.Wait()
	close(codesSeen)
	for c := range codesSeen {
		if c != codes.OK && c != codes.DeadlineExceeded {
			t.Errorf("a call ended with %v; an unguarded fleet only answers or lets the caller time out", c)
		}
	}
	// Every call that reached a verifier is hashed in the end, though
	// nearly every caller has left (a call can also time out before it
	// leaves this process or the gateway).
	reached := func() float64 {
		m := map[string]string{"grpc_method": "Hash"}
		return v1.metric(t, "grpc_server_started_total", m) + v2.metric(t, "grpc_server_started_total", m)
	}
	waitFor(t, 30*time.Second, "every call that reached a verifier to be hashed", func() bool {
		return reached() > 0 && hashes()-before >= reached()
	})
	if got, want := hashes()-before, reached(); got != want || want < calls/2 {
		t.Errorf("hashed %v of the %v calls that reached a verifier (of %d sent), want all, and most calls to reach one", got, want, calls)
	}
	// 40 hashes of 100 × their cost on 2 workers take longer than 100 ms:
	// the last ones are computed for callers who had left.
	late := v1.metric(t, "levee_verifier_late_total", nil) + v2.metric(t, "levee_verifier_late_total", nil)
	if late < 1 {
		t.Errorf("late hashes = %v of %d, want some: an unguarded fleet hashes for callers who left", late, calls)
	}
	if d := v1.metric(t, "levee_verifier_dropped_total", nil) + v2.metric(t, "levee_verifier_dropped_total", nil); d != 0 {
		t.Errorf("verifiers dropped %v calls; unguarded verifiers drop nothing", d)
	}
	if r := tg.metric(t, "levee_gateway_refused_total", nil); r != 0 {
		t.Errorf("gateway refused %v calls; an unguarded gateway refuses nothing", r)
	}
}
