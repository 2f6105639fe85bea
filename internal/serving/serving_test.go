package serving

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestListen(t *testing.T) {
	lis, mlis, err := Listen("test", "127.0.0.1:0", "")
	if err != nil || lis == nil || mlis != nil {
		t.Fatalf("Listen without metrics = %v, %v, %v", lis, mlis, err)
	}
	defer lis.Close()
	// The gRPC address taken: the error names the component and nothing
	// stays open.
	if _, _, err := Listen("verifier", lis.Addr().String(), ""); err == nil || !strings.Contains(err.Error(), "verifier: listen") {
		t.Errorf("Listen on a taken address = %v, want an error naming the component", err)
	}
	free, _, err := Listen("test", "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	if _, _, err := Listen("gateway", addr, lis.Addr().String()); err == nil || !strings.Contains(err.Error(), "gateway: metrics listen") {
		t.Errorf("Listen with a taken metrics address = %v", err)
	}
	again, _, err := Listen("test", addr, "")
	if err != nil {
		t.Errorf("the gRPC listener was left open after the metrics one failed: %v", err)
	} else {
		again.Close()
	}
}

func TestHTTP(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var g errgroup.Group
	stop := HTTP(&g, "test", lis, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	resp, err := http.Get("http://" + lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Errorf("body %q", body)
	}
	stop()
	if err := g.Wait(); err != nil {
		t.Errorf("a shut down HTTP server reported %v", err)
	}
	HTTP(&g, "test", nil, nil)() // no listener: nothing to start or stop
}

func TestSetHealth(t *testing.T) {
	h := health.NewServer()
	for _, on := range []bool{true, false} {
		SetHealth(h, on, "svc")
		want := healthpb.HealthCheckResponse_NOT_SERVING
		if on {
			want = healthpb.HealthCheckResponse_SERVING
		}
		for _, name := range []string{"", "svc"} {
			resp, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			if err != nil || resp.GetStatus() != want {
				t.Errorf("SetHealth(%v): %q is %v, %v; want %v", on, name, resp.GetStatus(), err, want)
			}
		}
	}
}

// Stop ends long-lived streams, so a graceful stop does not wait for them.
func TestStopEndsStreams(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	streams := NewStreams()
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(streams.Interceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	w, err := healthpb.NewHealthClient(cc).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	// A context that never ends: only ending the stream lets Stop return.
	Stop(context.Background(), srv, streams)
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := w.Recv(); err == nil {
		t.Error("the watch is still open after Stop")
	}
}
