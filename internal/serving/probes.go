package serving

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/leveehq/levee/pkg/wellknown"
)

// Probes answers an orchestrator's liveness and readiness probes (a
// kubelet's grpc probes) as the gRPC health service, in plaintext HTTP/2 on
// the server's metrics port beside /metrics. The gRPC port asks for a
// client certificate, which no kubelet presents; the metrics port already
// tells anyone who reaches it more than these two answers do.
//
// Its answers never depend on the work a server does:
//
//   - wellknown.ProbeLiveness is SERVING whenever the process answers at
//     all. It is read from no queue, takes no worker and no lock that work
//     holds, so a node whose every worker is busy is not restarted for it.
//   - wellknown.ProbeReadiness is SERVING between SetReady(true) (warm,
//     listening) and SetReady(false) (draining): never false because the
//     node is busy. A busy node says so by shedding, not by leaving its
//     Service, which would send everything to the nodes still listed.
//
// Any other service name is NOT_FOUND. Watch is not served: probes Check.
// The zero value is not ready; use NewProbes.
type Probes struct {
	healthpb.UnimplementedHealthServer

	ready atomic.Bool
	srv   *grpc.Server
}

// NewProbes returns Probes that are not ready.
func NewProbes() *Probes {
	p := &Probes{srv: grpc.NewServer()}
	healthpb.RegisterHealthServer(p.srv, p)
	return p
}

// SetReady sets the readiness answer.
func (p *Probes) SetReady(ready bool) { p.ready.Store(ready) }

// Check implements grpc.health.v1.Health/Check for the probe services.
func (p *Probes) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	switch req.GetService() {
	case wellknown.ProbeLiveness:
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case wellknown.ProbeReadiness:
		st := healthpb.HealthCheckResponse_NOT_SERVING
		if p.ready.Load() {
			st = healthpb.HealthCheckResponse_SERVING
		}
		return &healthpb.HealthCheckResponse{Status: st}, nil
	}
	return nil, status.Error(codes.NotFound, "unknown probe service")
}

// Handler serves gRPC requests (HTTP/2 with a content type of
// application/grpc, which only the health service answers) with the probes
// and everything else with next.
func (p *Probes) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			p.srv.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Stop ends the probe calls in progress; Handler answers none after it.
func (p *Probes) Stop() { p.srv.Stop() }
