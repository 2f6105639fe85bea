package serving

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/leveehq/levee/pkg/wellknown"
)

// The probes share the HTTP port with what it served before: HTTP/1
// requests reach the next handler, plaintext HTTP/2 gRPC the probes.
// Liveness is always SERVING, readiness follows SetReady, anything else is
// NOT_FOUND.
func TestProbes(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := NewProbes()
	var g errgroup.Group
	stop := HTTP(&g, "test", lis, p.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "metrics")
	})))
	defer func() {
		stop()
		p.Stop()
		if err := g.Wait(); err != nil {
			t.Error(err)
		}
	}()

	resp, err := http.Get("http://" + lis.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "metrics" {
		t.Errorf("HTTP/1 GET = %q, want the next handler's answer", body)
	}

	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	check := func(service string) (healthpb.HealthCheckResponse_ServingStatus, codes.Code) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		return r.GetStatus(), status.Code(err)
	}
	for _, c := range []struct {
		ready   bool
		service string
		want    healthpb.HealthCheckResponse_ServingStatus
		code    codes.Code
	}{
		{false, wellknown.ProbeLiveness, healthpb.HealthCheckResponse_SERVING, codes.OK},
		{false, wellknown.ProbeReadiness, healthpb.HealthCheckResponse_NOT_SERVING, codes.OK},
		{true, wellknown.ProbeReadiness, healthpb.HealthCheckResponse_SERVING, codes.OK},
		{true, wellknown.ProbeLiveness, healthpb.HealthCheckResponse_SERVING, codes.OK},
		{true, "", healthpb.HealthCheckResponse_UNKNOWN, codes.NotFound},
		{false, wellknown.ProbeReadiness, healthpb.HealthCheckResponse_NOT_SERVING, codes.OK},
	} {
		p.SetReady(c.ready)
		if got, code := check(c.service); got != c.want || code != c.code {
			t.Errorf("ready %v: Check(%q) = %v, %v; want %v, %v", c.ready, c.service, got, code, c.want, c.code)
		}
	}
}
