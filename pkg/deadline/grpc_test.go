package deadline

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/leveehq/levee/internal/grpctest"
)

// healthService is the test service: Check and Watch count their
// invocations and hand their context to a hook, which records what it needs.
type healthService struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int64
	hook  func(ctx context.Context) error // nil: do nothing
}

func (h *healthService) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	h.calls.Add(1)
	if h.hook != nil {
		if err := h.hook(ctx); err != nil {
			return nil, err
		}
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h *healthService) Watch(_ *healthpb.HealthCheckRequest, ss grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	h.calls.Add(1)
	if h.hook != nil {
		if err := h.hook(ss.Context()); err != nil {
			return err
		}
	}
	return ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// serve starts a real gRPC server on 127.0.0.1:0 and stops it when the test
// ends.
func serve(t *testing.T, svc healthpb.HealthServer, opts ...grpc.ServerOption) string {
	t.Helper()
	return grpctest.Serve(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, svc) }, opts...)
}

// dial returns a client for addr, closed when the test ends (before the
// server stops, cleanups running last-in first-out).
func dial(t *testing.T, addr string, opts ...grpc.DialOption) healthpb.HealthClient {
	t.Helper()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	cc, err := grpc.NewClient("passthrough:///"+addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// callWatch opens a Watch stream and reads it to the end.
func callWatch(ctx context.Context, client healthpb.HealthClient) error {
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// methods runs a test body once per kind of call, so the unary and the
// stream interceptor are held to the same contract.
var methods = []struct {
	name string
	call func(context.Context, healthpb.HealthClient) error
}{
	{name: "unary", call: func(ctx context.Context, c healthpb.HealthClient) error {
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}},
	{name: "stream", call: callWatch},
}

func serverOptions(c Config, extra ...grpc.ServerOption) []grpc.ServerOption {
	return append([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(c.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(c.StreamServerInterceptor()),
	}, extra...)
}

// TestServerAppliesDefault: a caller that sends no deadline gets a handler
// whose deadline is Default from the moment the interceptor ran. That moment
// lies between the call's start and its return, which bounds the deadline
// exactly, with no allowance for scheduling.
func TestServerAppliesDefault(t *testing.T) {
	c := Config{Default: 7 * time.Minute, Max: time.Hour, Margin: time.Millisecond}
	for _, m := range methods[:1] { // unary only: see TestStreamKeepsCallersDeadline
		t.Run(m.name, func(t *testing.T) {
			var seen time.Time
			var hasDeadline bool
			svc := &healthService{hook: func(ctx context.Context) error {
				seen, hasDeadline = ctx.Deadline()
				return nil
			}}
			client := dial(t, serve(t, svc, serverOptions(c)...))

			before := time.Now()
			if err := m.call(context.Background(), client); err != nil {
				t.Fatalf("call: %v", err)
			}
			after := time.Now()
			if !hasDeadline {
				t.Fatal("handler saw no deadline")
			}
			between(t, "handler deadline", seen, before.Add(c.Default), after.Add(c.Default))
		})
	}
}

// TestServerClampsToMax: a caller asking for a day gets Max.
func TestServerClampsToMax(t *testing.T) {
	c := Config{Default: time.Minute, Max: 10 * time.Minute, Margin: time.Millisecond}
	for _, m := range methods[:1] { // unary only: see TestStreamKeepsCallersDeadline
		t.Run(m.name, func(t *testing.T) {
			var seen time.Time
			svc := &healthService{hook: func(ctx context.Context) error {
				seen, _ = ctx.Deadline()
				return nil
			}}
			client := dial(t, serve(t, svc, serverOptions(c)...))

			ctx, cancel := context.WithTimeout(context.Background(), 24*time.Hour)
			defer cancel()
			before := time.Now()
			if err := m.call(ctx, client); err != nil {
				t.Fatalf("call: %v", err)
			}
			after := time.Now()
			between(t, "handler deadline", seen, before.Add(c.Max), after.Add(c.Max))
		})
	}
}

// TestStreamKeepsCallersDeadline: a stream gets no default deadline and no
// clamp (a health Watch cut every Default would flap every watcher), but
// keeps the deadline its caller sent.
func TestStreamKeepsCallersDeadline(t *testing.T) {
	c := Config{Default: time.Second, Max: 2 * time.Second, Margin: time.Millisecond}
	var seen time.Time
	var has bool
	svc := &healthService{hook: func(ctx context.Context) error {
		seen, has = ctx.Deadline()
		return nil
	}}
	client := dial(t, serve(t, svc, serverOptions(c)...))
	if err := callWatch(context.Background(), client); err != nil {
		t.Fatal(err)
	}
	if has {
		t.Errorf("a stream without a deadline got one (%v): long-lived streams must not be cut", time.Until(seen))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	before := time.Now()
	if err := callWatch(ctx, client); err != nil {
		t.Fatal(err)
	}
	if !has || seen.Before(before.Add(time.Hour-time.Minute)) {
		t.Errorf("a stream's own 1h deadline became %v, want it kept (no clamp to Max)", time.Until(seen))
	}
}

// TestServerRefusesCallWithNoTimeLeft: a call that reaches the interceptor
// with its deadline passed, or cancelled, is refused and its handler never
// runs. The client cannot send a deadline that is already past (grpc-go
// refuses that itself), so a test interceptor chained in front stands in for
// the time spent on the wire.
func TestServerRefusesCallWithNoTimeLeft(t *testing.T) {
	c := DefaultConfig()
	arrivals := []struct {
		name     string
		ctx      func(context.Context) (context.Context, context.CancelFunc)
		wantCode codes.Code
	}{
		{
			name: "deadline passed",
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithDeadline(ctx, time.Now().Add(-time.Second))
			},
			wantCode: codes.DeadlineExceeded,
		},
		{
			name: "cancelled",
			ctx: func(ctx context.Context) (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(ctx)
				cancel()
				return ctx, cancel
			},
			wantCode: codes.Canceled,
		},
	}
	for _, a := range arrivals {
		for _, m := range methods {
			t.Run(a.name+"/"+m.name, func(t *testing.T) {
				late := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
					ctx, cancel := a.ctx(ctx)
					defer cancel()
					return next(ctx, req)
				})
				lateStream := grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, next grpc.StreamHandler) error {
					ctx, cancel := a.ctx(ss.Context())
					defer cancel()
					return next(srv, &serverStream{ServerStream: ss, ctx: ctx})
				})
				svc := &healthService{}
				// Chained interceptors run in the order they were added:
				// the stand-in first, then the one under test.
				client := dial(t, serve(t, svc, append([]grpc.ServerOption{late, lateStream}, serverOptions(c)...)...))

				err := m.call(context.Background(), client)
				if got := status.Code(err); got != a.wantCode {
					t.Errorf("call error = %v, want code %v", err, a.wantCode)
				}
				if n := svc.calls.Load(); n != 0 {
					t.Errorf("handler ran %d times, want 0", n)
				}
			})
		}
	}
}

// wireUnit is the granularity of grpc-timeout for a duration d: grpc-go
// sends at most 8 digits and rounds up to the unit it picks, so the callee
// can be given up to one unit more than the caller had left. This is the
// encoding's resolution, not a scheduling allowance.
func wireUnit(d time.Duration) time.Duration {
	const maxDigits = 1e8
	for _, unit := range []time.Duration{time.Nanosecond, time.Microsecond, time.Millisecond, time.Second, time.Minute} {
		if d < maxDigits*unit {
			return unit
		}
	}
	return time.Hour
}

// TestTwoHopForwardsRemainingMinusMargin: A's handler calls B through the
// client interceptor. Each handler reads its remaining time; B's must be at
// most A's less the margin, because every moment between A's reading and
// B's only shrinks B's share further.
func TestTwoHopForwardsRemainingMinusMargin(t *testing.T) {
	// Default is far above what A forwards, so a B that fell back on Default
	// instead of receiving A's deadline would fail the comparison.
	c := Config{Default: time.Hour, Max: 2 * time.Hour, Margin: 250 * time.Millisecond}

	tests := []struct {
		name    string
		timeout time.Duration // the outer caller's; 0 sends no deadline
	}{
		{name: "caller deadline", timeout: 10 * time.Second},
		{name: "no caller deadline, A applies Default", timeout: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var remainingB time.Duration
			var hasB bool
			b := &healthService{hook: func(ctx context.Context) error {
				remainingB, hasB = Remaining(ctx)
				return nil
			}}
			clientB := dial(t, serve(t, b, serverOptions(c)...), grpc.WithUnaryInterceptor(c.UnaryClientInterceptor()))

			var remainingA time.Duration
			a := &healthService{hook: func(ctx context.Context) error {
				remainingA, _ = Remaining(ctx)
				_, err := clientB.Check(ctx, &healthpb.HealthCheckRequest{})
				return err
			}}
			clientA := dial(t, serve(t, a, serverOptions(c)...))

			ctx := context.Background()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			if _, err := clientA.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatalf("call A: %v", err)
			}
			if !hasB {
				t.Fatal("B's handler saw no deadline")
			}
			forwarded := remainingA - c.Margin
			if limit := forwarded + wireUnit(forwarded); remainingB > limit {
				t.Errorf("B had %v left, A had %v: want B <= A - margin %v (+ wire unit %v)",
					remainingB, remainingA, c.Margin, wireUnit(forwarded))
			}
		})
	}
}

// TestClientFailsFastWithoutTimeLeft: with less than the margin left, the
// call through the client interceptor fails with DeadlineExceeded and the
// downstream handler is never invoked.
func TestClientFailsFastWithoutTimeLeft(t *testing.T) {
	// A one-hour margin makes "less than the margin left" independent of how
	// slow the machine is.
	c := Config{Default: 2 * time.Hour, Max: 3 * time.Hour, Margin: time.Hour}

	t.Run("direct call", func(t *testing.T) {
		b := &healthService{}
		clientB := dial(t, serve(t, b, serverOptions(c)...), grpc.WithUnaryInterceptor(c.UnaryClientInterceptor()))

		ctx, cancel := context.WithTimeout(context.Background(), c.Margin/2)
		defer cancel()
		_, err := clientB.Check(ctx, &healthpb.HealthCheckRequest{})
		if got := status.Code(err); got != codes.DeadlineExceeded {
			t.Errorf("call error = %v, want code DeadlineExceeded", err)
		}
		if n := b.calls.Load(); n != 0 {
			t.Errorf("downstream handler ran %d times, want 0", n)
		}
	})

	t.Run("second hop", func(t *testing.T) {
		b := &healthService{}
		clientB := dial(t, serve(t, b, serverOptions(c)...), grpc.WithUnaryInterceptor(c.UnaryClientInterceptor()))
		var errFromB error
		a := &healthService{hook: func(ctx context.Context) error {
			_, errFromB = clientB.Check(ctx, &healthpb.HealthCheckRequest{})
			return errFromB
		}}
		clientA := dial(t, serve(t, a, serverOptions(c)...))

		// A is reached with half a margin left: enough to run, not to forward.
		ctx, cancel := context.WithTimeout(context.Background(), c.Margin/2)
		defer cancel()
		_, err := clientA.Check(ctx, &healthpb.HealthCheckRequest{})
		if got := status.Code(errFromB); got != codes.DeadlineExceeded {
			t.Errorf("A's call to B: error = %v, want code DeadlineExceeded", errFromB)
		}
		if got := status.Code(err); got != codes.DeadlineExceeded {
			t.Errorf("call to A: error = %v, want code DeadlineExceeded", err)
		}
		if n := a.calls.Load(); n != 1 {
			t.Errorf("A's handler ran %d times, want 1", n)
		}
		if n := b.calls.Load(); n != 0 {
			t.Errorf("B's handler ran %d times, want 0", n)
		}
	})
}

// TestClientInterceptorNeverInvokes checks the "no network round trip"
// half of the contract directly: the invoker, which is what would touch the
// connection, is not called when the call is refused.
func TestClientInterceptorNeverInvokes(t *testing.T) {
	c := Config{Default: 2 * time.Hour, Max: 3 * time.Hour, Margin: time.Hour}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name        string
		ctx         context.Context
		wantCode    codes.Code
		wantInvoked bool
	}{
		{name: "less than margin left", ctx: withDeadline(t, time.Now().Add(c.Margin/2)), wantCode: codes.DeadlineExceeded},
		{name: "deadline passed", ctx: withDeadline(t, time.Now().Add(-time.Second)), wantCode: codes.DeadlineExceeded},
		{name: "cancelled", ctx: cancelled, wantCode: codes.Canceled},
		{name: "time left", ctx: withDeadline(t, time.Now().Add(c.Margin*2)), wantCode: codes.OK, wantInvoked: true},
		{name: "no deadline", ctx: context.Background(), wantCode: codes.OK, wantInvoked: true},
	}
	intercept := c.UnaryClientInterceptor()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			invoked := false
			invoker := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				invoked = true
				if _, ok := ctx.Deadline(); !ok {
					t.Error("invoker got a context without a deadline")
				}
				return nil
			}
			err := intercept(tt.ctx, "/test/Method", nil, nil, nil, invoker)
			if got := status.Code(err); got != tt.wantCode {
				t.Errorf("error = %v, want code %v", err, tt.wantCode)
			}
			if invoked != tt.wantInvoked {
				t.Errorf("invoker called: %v, want %v", invoked, tt.wantInvoked)
			}
		})
	}
}
