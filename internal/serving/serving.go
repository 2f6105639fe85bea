// Package serving holds what every Levee server does the same way: open its
// gRPC and metrics listeners, and run its HTTP side (metrics, status page)
// under the server's errgroup until the server says stop.
package serving

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Listen opens the gRPC listener on addr and, unless metricsAddr is empty,
// the HTTP one (nil otherwise). On error nothing is left open; errors name
// component.
func Listen(component, addr, metricsAddr string) (lis, mlis net.Listener, err error) {
	if lis, err = net.Listen("tcp", addr); err != nil {
		return nil, nil, fmt.Errorf("%s: listen: %w", component, err)
	}
	if metricsAddr != "" {
		if mlis, err = net.Listen("tcp", metricsAddr); err != nil {
			lis.Close()
			return nil, nil, fmt.Errorf("%s: metrics listen: %w", component, err)
		}
	}
	return lis, mlis, nil
}

// HTTP serves h on lis in a goroutine of g and returns the function that
// shuts it down, waiting at most a second for requests in progress. With a
// nil lis it starts nothing and stop does nothing.
func HTTP(g *errgroup.Group, component string, lis net.Listener, h http.Handler) (stop func()) {
	if lis == nil {
		return func() {}
	}
	// HTTP/2 without TLS (prior knowledge) as well as HTTP/1: a kubelet's
	// grpc probe speaks it to Probes.Handler.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, Protocols: protocols}
	g.Go(func() error {
		if err := hs.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("%s: http: %w", component, err)
		}
		return nil
	})
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}
}

// SetHealth sets the serving status of the server as a whole ("") and of
// each named service at once.
func SetHealth(h *health.Server, serving bool, services ...string) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	h.SetServingStatus("", st)
	for _, s := range services {
		h.SetServingStatus(s, st)
	}
}

// Streams ends a server's long-lived streams (health Watch, ORCA load
// reports, reflection) when the server stops: GracefulStop waits for every
// call, and a stream nobody ends would hold it until its timeout. The zero
// value is not ready; use NewStreams.
type Streams struct {
	ctx context.Context
	end context.CancelFunc
}

// NewStreams returns a Streams whose streams run until End.
func NewStreams() *Streams {
	ctx, end := context.WithCancel(context.Background())
	return &Streams{ctx: ctx, end: end}
}

// Interceptor gives each stream a context that also ends with End.
func (s *Streams) Interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		ctx, cancel := context.WithCancel(ss.Context())
		defer cancel()
		defer context.AfterFunc(s.ctx, cancel)()
		return handler(srv, &stream{ServerStream: ss, ctx: ctx})
	}
}

// End ends every stream, now and from now on.
func (s *Streams) End() { s.end() }

type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

// Stop stops srv gracefully: it ends streams, lets unary calls in flight
// finish, and stops srv at once (cancelling what is left) when ctx ends
// first. It returns when srv has stopped.
func Stop(ctx context.Context, srv *grpc.Server, streams *Streams) {
	streams.End()
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-ctx.Done():
		srv.Stop()
		<-stopped
	}
}
