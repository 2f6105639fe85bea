package gateway

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/verify"
)

// padded returns req with an unknown field that brings its encoding to size
// bytes.
func padded(t *testing.T, req *verifyv1.VerifyRequest, size int) *verifyv1.VerifyRequest {
	t.Helper()
	out := proto.Clone(req).(*verifyv1.VerifyRequest)
	base := proto.Size(out)
	const field = 1000 // unknown to every Levee message
	n := size - base - protowire.SizeTag(field) - protowire.SizeVarint(uint64(size))
	var raw []byte
	raw = protowire.AppendTag(raw, field, protowire.BytesType)
	raw = protowire.AppendBytes(raw, bytes.Repeat([]byte{'x'}, max(n, 0)))
	out.ProtoReflect().SetUnknown(raw)
	if got := proto.Size(out); got < size-8 || got > size {
		t.Fatalf("padded to %d bytes, want about %d", got, size)
	}
	return out
}

// One message-size bound on every hop: a request over it is refused at the
// gateway's edge, and does not move the concurrency limit however many come;
// a request just under it is forwarded and answered. (With a gateway bound
// four times the verifier's, padded requests crossed the gateway, came back
// RESOURCE_EXHAUSTED from the verifier, and were read as overload: one per
// 100 ms held the limit at its floor.)
func TestPaddedRequestsCannotHoldTheLimitDown(t *testing.T) {
	v := startVerifier(t, nil)
	cfg := gatewayConfig(v.addr)
	cfg.Admission.InitialLimit, cfg.Admission.MinLimit = 10, 2
	gw := startGatewayOnFakeClock(t, cfg)
	gw.waitServing(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &verifyv1.VerifyRequest{EncodedHash: storedHash("pw", 64, 1), Password: []byte("pw")}

	big := padded(t, req, verify.MaxRequestSize+4<<10)
	for range 30 {
		_, err := gw.client.Verify(ctx, big)
		if code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
			t.Fatalf("a %d-byte request: %v, want RESOURCE_EXHAUSTED naming the size", proto.Size(big), err)
		}
		gw.clock.Advance(100 * time.Millisecond) // the limiter's windows close as they pass
	}
	// The adaptive limit: the effective one is capped by the ceiling the
	// verifier's slots set, which is not under test.
	if got := gw.g.limiter.Adaptive(); got < cfg.Admission.InitialLimit {
		t.Errorf("adaptive limit %d after 30 oversized requests, want ≥ %d (untouched)", got, cfg.Admission.InitialLimit)
	}
	if got := gw.metric(t, "levee_gateway_verifier_results_total", nil); got != 0 {
		t.Errorf("%v oversized requests were forwarded; want all refused at the gateway's edge", got)
	}

	resp, err := gw.client.Verify(ctx, padded(t, req, verify.MaxRequestSize-1<<10))
	if err != nil || !resp.GetMatch() {
		t.Fatalf("a request 1 KiB under the bound: %v, %v; want forwarded and matched", resp, err)
	}
}

// quotaVerifier answers every Verify with RESOURCE_EXHAUSTED and no
// pushback trailer, as a transport or a proxy's quota would: not the
// verifier's own overload refusal.
type quotaVerifier struct {
	verifyv1.UnimplementedVerifyServiceServer
}

func (quotaVerifier) Verify(context.Context, *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	return nil, status.Error(codes.ResourceExhausted, "some quota exhausted")
}

// Only the verifier's own overload signal (RESOURCE_EXHAUSTED with pushback
// -1) counts as overload for the limiter: other RESOURCE_EXHAUSTED answers
// are passed back and leave the limit alone.
func TestOnlyVerifierOverloadMovesTheLimit(t *testing.T) {
	cfg := gatewayConfig(serveBackend(t, quotaVerifier{}))
	cfg.Admission.InitialLimit, cfg.Admission.MinLimit = 10, 2
	gw := startGatewayOnFakeClock(t, cfg)
	gw.waitServing(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 30 {
		_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: storedHash("pw", 64, 1), Password: []byte("pw")})
		if code(err) != codes.ResourceExhausted {
			t.Fatalf("Verify = %v, want the backend's RESOURCE_EXHAUSTED passed back", err)
		}
		gw.clock.Advance(30 * time.Millisecond)
	}
	if got := gw.g.limiter.Adaptive(); got < cfg.Admission.InitialLimit {
		t.Errorf("adaptive limit %d after 30 quota refusals, want ≥ %d (untouched)", got, cfg.Admission.InitialLimit)
	}
	if got := gw.metric(t, "levee_gateway_verifier_results_total", map[string]string{"result": "overloaded"}); got != 0 {
		t.Errorf("%v hops counted as overload", got)
	}
}
