package gateway

import (
	"context"
	"net"
	"sync"
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

// load sends calls from 4 callers for d and counts the failures in each
// second.
func load(t *testing.T, gw *testGateway, d time.Duration) (failedPerSecond, sentPerSecond []int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	stored := storedHash("pw", 64, 1)
	secs := int(d / time.Second)
	failed := make([]atomic.Int64, secs)
	sent := make([]atomic.Int64, secs)
	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(time.Since(start) / time.Second)
				if i >= secs {
					return
				}
				sent[i].Add(1)
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := gw.client.Verify(cctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
				ccancel()
				if err != nil {
					failed[i].Add(1)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	for i := range failed {
		failedPerSecond = append(failedPerSecond, int(failed[i].Load()))
		sentPerSecond = append(sentPerSecond, int(sent[i].Load()))
	}
	return failedPerSecond, sentPerSecond
}

// A verifier that refuses everything at once is ejected within a second,
// and from then on under 5 % of calls fail: each ejection ends by time, the
// node is tried again, found refusing on its first answers, and ejected
// again for longer. Balancing on outstanding calls alone sent it more than
// its share (it always looks idle): half or more of all calls failed for as
// long as it stayed.
func TestRefusingVerifierIsEjected(t *testing.T) {
	good := startVerifier(t, nil)
	bad, badAddr := startRefusing(t)
	gw := startGateway(t, gatewayConfig(good.addr, badAddr))
	gw.waitServing(t, 2)

	failed, sent := load(t, gw, 8*time.Second)
	t.Logf("failures per second %v of %v calls; the refusing verifier saw %d", failed, sent, bad.calls.Load())
	if failed[0] == 0 {
		t.Fatalf("no call failed in the first second: the refusing verifier was not in rotation, the test tests nothing")
	}
	var f, s int
	for i := 1; i < len(failed); i++ {
		f, s = f+failed[i], s+sent[i]
	}
	if float64(f) > 0.05*float64(s) {
		t.Errorf("%d of %d calls failed after the first second, want under 5 %%", f, s)
	}
	if got := gw.metric(t, "levee_gateway_verifier_ejected", map[string]string{"verifier": badAddr}); got != 1 {
		t.Errorf("ejected{%s} = %v, want 1", badAddr, got)
	}
	if got := gw.metric(t, "levee_gateway_verifier_ejected", map[string]string{"verifier": good.addr}); got != 0 {
		t.Errorf("ejected{%s} = %v, want 0: the healthy verifier was ejected", good.addr, got)
	}
	// Ejections end by time: it was tried again, and ejected again.
	gw.g.metrics.observeVerifiers(gw.g.backends.list())
	if got := gw.metric(t, "levee_gateway_verifier_ejections", map[string]string{"verifier": badAddr}); got < 2 {
		t.Errorf("%v ejections in 8 s, want ≥ 2: an ejection ends by time and the node is judged again", got)
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
			cfg.Autopilot.Tick = 250 * time.Millisecond
			gw := startGateway(t, cfg)
			gw.waitServing(t, 2)
			_, sent := load(t, gw, 3*time.Second)
			if sent[0] == 0 {
				t.Fatal("no call sent")
			}
			gw.g.metrics.observeVerifiers(gw.g.backends.list())
			for _, addr := range []string{a, b} {
				if got := gw.metric(t, "levee_gateway_verifier_ejections", map[string]string{"verifier": addr}); got != 0 {
					t.Errorf("%s ejected %v times after %d calls refused by every verifier, want 0", addr, got, sent)
				}
			}
		})
	}
}
