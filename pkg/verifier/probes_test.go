package verifier

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/wellknown"
)

// probeTimeout is the Helm chart's probe timeoutSeconds: a kubelet counts a
// probe that takes longer as failed.
const probeTimeout = time.Second

// probe asks the verifier's metrics port, as a kubelet's grpc probe does
// (plaintext HTTP/2, no certificate), for service's status within
// probeTimeout.
func (h *harness) probe(service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	h.t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(h.metrics, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return resp.GetStatus(), err
}

func (h *harness) wantProbe(when, service string, want healthpb.HealthCheckResponse_ServingStatus) {
	h.t.Helper()
	got, err := h.probe(service)
	if err != nil || got != want {
		h.t.Fatalf("%s: probe %q = %v, %v; want %v within %v", when, service, got, err, want, probeTimeout)
	}
}

// A kubelet must never restart a verifier or take it out of its Service
// because it is busy: with every worker held and the queue full (the next
// call refused), liveness and readiness both answer SERVING within the
// probe's timeout. Readiness turns NOT_SERVING as soon as a drain starts,
// while the held work is still in flight, and liveness stays SERVING.
func TestProbesUnderOverloadAndDrain(t *testing.T) {
	cfg := testConfig()
	cfg.Workers = 2
	cfg.QueueCapacity = 4
	h := start(t, cfg)
	h.wantProbe("warm", wellknown.ProbeLiveness, healthpb.HealthCheckResponse_SERVING)
	h.wantProbe("warm", wellknown.ProbeReadiness, healthpb.HealthCheckResponse_SERVING)

	var waits []func() error
	for i := range cfg.Workers {
		_, wait := h.occupy(fmt.Sprintf("busy%d", i))
		waits = append(waits, wait)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range cfg.QueueCapacity {
		waits = append(waits, h.goHash(ctx, fmt.Sprintf("queued%d", i)))
	}
	h.waitQueued(cfg.QueueCapacity)
	_, err := h.verify.Hash(as(ctx, "refused"), &verifyv1.HashRequest{Password: []byte("pw")})
	wantCode(t, err, codes.ResourceExhausted)
	if st := h.srv.pool.Stats(); st.Busy != cfg.Workers || st.Queued != cfg.QueueCapacity {
		t.Fatalf("pool %d busy, %d queued; want every worker busy (%d) and the queue full (%d)",
			st.Busy, st.Queued, cfg.Workers, cfg.QueueCapacity)
	}
	for range 5 {
		h.wantProbe("overloaded", wellknown.ProbeLiveness, healthpb.HealthCheckResponse_SERVING)
		h.wantProbe("overloaded", wellknown.ProbeReadiness, healthpb.HealthCheckResponse_SERVING)
	}

	h.cancel() // the drain starts; the held hashes keep it from finishing
	h.waitFor("readiness NOT_SERVING while draining", func() bool {
		st, err := h.probe(wellknown.ProbeReadiness)
		return err == nil && st == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if st := h.srv.pool.Stats(); st.Busy != cfg.Workers {
		t.Fatalf("%d hashes running when readiness turned; want the held %d still in flight", st.Busy, cfg.Workers)
	}
	h.wantProbe("draining", wellknown.ProbeLiveness, healthpb.HealthCheckResponse_SERVING)

	h.releaseAll()
	for _, wait := range waits {
		_ = wait() // finished or dropped by the drain: either way, answered
	}
	if err := h.stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// The probe port answers only the probe services.
func TestProbeUnknownService(t *testing.T) {
	h := start(t, testConfig())
	_, err := h.probe(verifyv1.VerifyService_ServiceDesc.ServiceName)
	wantCode(t, err, codes.NotFound)
}
