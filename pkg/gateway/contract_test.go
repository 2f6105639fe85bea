package gateway

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/ledger"
	"github.com/leveehq/levee/pkg/wellknown"
)

// The README's promise: with no verifier serving, a call is UNAVAILABLE and
// carries a pushback that says when to come back.
func TestNoVerifierServingIsUnavailableWithPushback(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close() // nothing listens there
	gw := startGateway(t, gatewayConfig(dead))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var trailer metadata.MD
	_, err = gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: storedHash("pw", 64, 1), Password: []byte("pw")}, grpc.Trailer(&trailer))
	if code(err) != codes.Unavailable {
		t.Fatalf("Verify with no verifier serving = %v, want UNAVAILABLE", err)
	}
	after, retry, present := callmeta.PushbackFrom(trailer)
	if !present || !retry || after <= 0 {
		t.Errorf("pushback = %v (retry %v, present %v), want a positive retry-after", after, retry, present)
	}
}

// The README's promise: FAILED_PRECONDITION (a pepper key id the node does
// not hold) is the caller's answer, not a node fault: the gateway neither
// retries it on another verifier, with budget to spare, nor counts it
// against the verifier's breaker.
func TestFailedPreconditionNeitherRetriedNorTripsTheBreaker(t *testing.T) {
	v1, v2 := startVerifier(t, nil), startVerifier(t, nil)
	cfg := gatewayConfig(v1.addr, v2.addr)
	cfg.Breaker.MinRequests = 5
	bs := startBudget(t, ledger.Settings{Ratio: 1, Burst: 100, MinPerSecond: 100})
	cfg.BudgetTarget = bs.Addr()
	gw := startGateway(t, cfg)
	gw.waitServing(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitFor(t, 10*time.Second, "a budget lease", func() bool { return gw.g.retry.Status().Tokens > 0 })

	// keyid "zz": no verifier holds a pepper of that id.
	peppered := strings.Replace(storedHash("pw", 64, 1), "p=1$", "p=1,keyid=eno$", 1)
	const n = 40
	for i := range n {
		_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: peppered, Password: []byte("pw")})
		if code(err) != codes.FailedPrecondition {
			t.Fatalf("call %d: %v, want FAILED_PRECONDITION", i, err)
		}
	}
	if got := gw.metric(t, "levee_gateway_fleet_retries_total", nil); got != 0 {
		t.Errorf("the gateway retried FAILED_PRECONDITION %v times, want never", got)
	}
	for _, v := range []*testVerifier{v1, v2} {
		if got := gw.metric(t, "levee_gateway_verifier_breaker_state", map[string]string{"verifier": v.addr}); got != 0 {
			t.Errorf("breaker of %s is %v after %d FAILED_PRECONDITION answers, want 0 (closed)", v.addr, got, n)
		}
	}
	hashed := v1.metric(t, "levee_verifier_hashes_total", nil) + v2.metric(t, "levee_verifier_hashes_total", nil)
	for range 10 {
		if _, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: storedHash("pw", 64, 1), Password: []byte("pw")}); err != nil {
			t.Fatalf("a valid call after them: %v", err)
		}
	}
	if got := v1.metric(t, "levee_verifier_hashes_total", nil) + v2.metric(t, "levee_verifier_hashes_total", nil) - hashed; got != 10 {
		t.Errorf("the verifiers hashed %v of the 10 valid calls", got)
	}
}

// A verifier's answers about its configuration and state reach the caller
// with a generic message and the same code: neither the pepper key ids a
// node holds nor its cost estimate is a stranger's business. The details
// are counted (and logged at debug level).
func TestVerifierDetailsWithheldFromTheCaller(t *testing.T) {
	v := startVerifier(t, nil)
	gw := startGateway(t, gatewayConfig(v.addr))
	gw.waitServing(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	peppered := strings.Replace(storedHash("pw", 64, 1), "p=1$", "p=1,keyid=eno$", 1)
	_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: peppered, Password: []byte("pw")})
	if code(err) != codes.FailedPrecondition || status.Convert(err).Message() != status.Convert(errCannotVerify).Message() {
		t.Errorf("an unknown pepper key: %v; want FAILED_PRECONDITION with the generic message", err)
	}
	// A deadline the hash cannot meet, refused by the verifier from its
	// estimate: the caller is not told the estimate. A call counts only
	// when the verifier itself refused it (its deadline drops rose by one),
	// not when the gateway's hop ran out of time first.
	stored := storedHash("pw", 8<<10, 3)
	deadlineDrops := func() float64 {
		return v.metric(t, wellknown.MetricVerifierDropped, map[string]string{"reason": "deadline"})
	}
	withheld := func() float64 {
		return gw.metric(t, "levee_gateway_details_withheld_total", map[string]string{"code": "DeadlineExceeded"})
	}
	var refused error
	for i := 0; refused == nil && i < 20; i++ {
		d0, w0 := deadlineDrops(), withheld()
		dctx, dcancel := context.WithTimeout(ctx, testDeadline.Margin+3*time.Millisecond)
		_, err = gw.client.Verify(dctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
		dcancel()
		if code(err) == codes.DeadlineExceeded && deadlineDrops() == d0+1 && withheld() == w0+1 {
			refused = err
		}
	}
	if refused == nil {
		t.Fatalf("no call with a deadline too short for the hash was refused by the verifier (last: %v)", err)
	}
	if msg := status.Convert(refused).Message(); msg != status.Convert(errTooLittleTime).Message() {
		t.Errorf("a deadline too short: %q; want the generic message", msg)
	}
	if got := gw.metric(t, "levee_gateway_details_withheld_total", map[string]string{"code": "FailedPrecondition"}); got != 1 {
		t.Errorf("withheld FAILED_PRECONDITION counted %v, want 1", got)
	}
}
