package gateway

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
)

// refusingVerifier is a verifier that refuses every call at once, as one
// whose cost estimate a stall had poisoned did: DEADLINE_EXCEEDED, "your
// deadline is shorter than the expected cost", while it reports SERVING.
type refusingVerifier struct {
	verifyv1.UnimplementedVerifyServiceServer
	calls atomic.Int64
}

func (r *refusingVerifier) Verify(context.Context, *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	r.calls.Add(1)
	return nil, status.Error(codes.DeadlineExceeded, "remaining deadline 2s is shorter than the expected argon2id time 9s")
}

// startRefusing serves a refusingVerifier on 127.0.0.1, SERVING.
func startRefusing(t *testing.T) (*refusingVerifier, string) {
	t.Helper()
	r := &refusingVerifier{}
	return r, serveBackend(t, r)
}

// serveBackend serves impl as a verifier on 127.0.0.1 over real gRPC, its
// health service saying SERVING, until the test ends; it returns the
// address. For backends that behave as no real verifier can be made to.
func serveBackend(t *testing.T, impl verifyv1.VerifyServiceServer) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	verifyv1.RegisterVerifyServiceServer(srv, impl)
	hs := health.NewServer()
	hs.SetServingStatus(verifyv1.VerifyService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// calls sends n calls through gw one after another, moving its fake clock
// on by step after each, and returns how many failed.
func calls(t *testing.T, gw *testGateway, n int, step time.Duration) (failed int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stored := storedHash("pw", 64, 1)
	for range n {
		if _, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")}); err != nil {
			failed++
		}
		gw.clock.Advance(step)
	}
	return failed
}

// ejections reads the gateway's ejection gauges for addr.
func ejections(t *testing.T, gw *testGateway, addr string) (ejected, times float64) {
	t.Helper()
	gw.g.verifiers.UpdateGauges()
	return gw.metric(t, "levee_gateway_verifier_ejected", map[string]string{"verifier": addr}),
		gw.metric(t, "levee_gateway_verifier_ejections", map[string]string{"verifier": addr})
}

// A verifier that refuses everything at once is ejected on its first
// answers, and no call fails while it is out. Its ejection ends by time:
// tried again, it is found refusing on its first answers and ejected again,
// for longer. Balancing on outstanding calls alone sent it more than its
// share (it always looks idle): half or more of all calls failed for as
// long as it stayed.
func TestRefusingVerifierIsEjected(t *testing.T) {
	good := startVerifier(t, nil)
	bad, badAddr := startRefusing(t)
	gw := startGatewayOnFakeClock(t, gatewayConfig(good.addr, badAddr))
	gw.waitServing(t, 2)

	const step = 10 * time.Millisecond
	if failed := calls(t, gw, 80, step); failed == 0 {
		t.Fatal("no call failed: the refusing verifier was not in rotation, the test tests nothing")
	}
	if ejected, times := ejections(t, gw, badAddr); ejected != 1 || times != 1 {
		t.Fatalf("refusing verifier: ejected %v, %v times after 80 calls; want out, once", ejected, times)
	}
	seen := bad.calls.Load()
	if failed := calls(t, gw, 100, step); failed > 0 { // 1 s: within the first ejection's 2 s
		t.Errorf("%d of 100 calls failed while the refusing verifier was ejected", failed)
	}
	if got := bad.calls.Load(); got != seen {
		t.Errorf("the ejected verifier got %d calls", got-seen)
	}
	if ejected, _ := ejections(t, gw, good.addr); ejected != 0 {
		t.Errorf("the healthy verifier was ejected")
	}
	gw.clock.Advance(time.Second) // the first ejection is over
	if failed := calls(t, gw, 80, step); failed == 0 {
		t.Fatal("no call failed after the ejection ended: the verifier was not tried again")
	}
	if ejected, times := ejections(t, gw, badAddr); ejected != 1 || times != 2 {
		t.Fatalf("refusing verifier: ejected %v, %v times; want out again, twice in all", ejected, times)
	}
	gw.clock.Advance(3 * time.Second) // the second lasts twice as long as the first
	if ejected, _ := ejections(t, gw, badAddr); ejected != 1 {
		t.Errorf("the second ejection ended within 3 s, want it to last 4 s")
	}
}

// A fleet-wide condition ejects nobody: with every verifier refusing (as
// under overload, or callers whose deadlines no hash fits), neither is an
// outlier against its peers, and the autopilot, which ejects a verifier
// refusing everything only while another serves, ejects neither either.
func TestFleetWideRefusalsEjectNobody(t *testing.T) {
	for _, autopilot := range []bool{false, true} {
		t.Run(map[bool]string{false: "autopilot off", true: "autopilot on"}[autopilot], func(t *testing.T) {
			_, a := startRefusing(t)
			_, b := startRefusing(t)
			cfg := gatewayConfig(a, b)
			cfg.Autopilot.Enabled = autopilot
			gw := startGatewayOnFakeClock(t, cfg)
			gw.waitServing(t, 2)
			if failed := calls(t, gw, 200, 10*time.Millisecond); failed != 200 {
				t.Fatalf("%d of 200 calls failed, want all: every verifier refuses", failed)
			}
			gw.g.tick()
			gw.g.auto.ejectRefusing(gw.clock.Now())
			for _, addr := range []string{a, b} {
				if _, times := ejections(t, gw, addr); times != 0 {
					t.Errorf("%s ejected %v times after 200 calls refused by every verifier, want 0", addr, times)
				}
			}
		})
	}
}
