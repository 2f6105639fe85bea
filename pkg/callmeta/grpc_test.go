package callmeta

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leveehq/levee/internal/grpctest"
)

// recorder is the test service: Check counts its invocations and
// records the facts FromContext gives them.
type recorder struct {
	healthpb.UnimplementedHealthServer
	calls atomic.Int64
	facts atomic.Pointer[Facts]
}

func (r *recorder) record(ctx context.Context) {
	r.calls.Add(1)
	f := FromContext(ctx)
	r.facts.Store(&f)
}

func (r *recorder) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	r.record(ctx)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// start serves a recorder on 127.0.0.1:0 behind the interceptors and returns
// it with a client; both are shut down when the test ends.
func start(t *testing.T) (*recorder, healthpb.HealthClient) {
	t.Helper()
	rec := &recorder{}
	addr := grpctest.Serve(t, func(s *grpc.Server) { healthpb.RegisterHealthServer(s, rec) },
		grpc.ChainUnaryInterceptor(UnaryServerInterceptor()))

	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return rec, healthpb.NewHealthClient(cc)
}

var methods = []struct {
	name string
	call func(context.Context, healthpb.HealthClient) error
}{
	{name: "unary", call: func(ctx context.Context, c healthpb.HealthClient) error {
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}},
}

// TestInterceptorRoundTrip: facts written with AppendOutgoing on the client
// reach the handler through a real gRPC server, defaults included.
func TestInterceptorRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		ctx  func() context.Context
		want Facts
	}{
		{
			name: "all facts",
			ctx: func() context.Context {
				return AppendOutgoing(context.Background(), Facts{Attempt: 3, Priority: Batch, Tenant: "acme-eu"})
			},
			want: Facts{Attempt: 3, Priority: Batch, Tenant: "acme-eu"},
		},
		{
			name: "no facts sent",
			ctx:  context.Background,
			want: Facts{Attempt: 1, Priority: Interactive},
		},
		{
			name: "replaced on the way",
			ctx: func() context.Context {
				first := AppendOutgoing(context.Background(), Facts{Attempt: 1, Priority: Critical, Tenant: "a"})
				return AppendOutgoing(first, Facts{Attempt: 2, Priority: Critical})
			},
			want: Facts{Attempt: 2, Priority: Critical},
		},
	}
	for _, m := range methods {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				rec, client := start(t)
				if err := m.call(tt.ctx(), client); err != nil {
					t.Fatalf("call: %v", err)
				}
				got := rec.facts.Load()
				if got == nil {
					t.Fatal("handler did not run")
				}
				if diff := cmp.Diff(tt.want, *got); diff != "" {
					t.Errorf("facts in handler mismatch (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestInterceptorRefusesMalformed: malformed facts get InvalidArgument with
// a message naming the key, and the handler never runs.
func TestInterceptorRefusesMalformed(t *testing.T) {
	tests := []struct {
		name string
		kv   []string
		key  string
	}{
		{name: "attempt abc", kv: []string{AttemptKey, "abc"}, key: AttemptKey},
		{name: "attempt zero", kv: []string{AttemptKey, "0"}, key: AttemptKey},
		{name: "attempt above max", kv: []string{AttemptKey, "101"}, key: AttemptKey},
		{name: "unknown priority", kv: []string{PriorityKey, "urgent"}, key: PriorityKey},
		{name: "tenant too long", kv: []string{TenantKey, strings.Repeat("a", MaxTenantLen+1)}, key: TenantKey},
		{name: "tenant bad character", kv: []string{TenantKey, "a:b"}, key: TenantKey},
		{name: "facts that fail Validate", kv: nil, key: AttemptKey},
	}
	for _, m := range methods {
		for _, tt := range tests {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				rec, client := start(t)
				ctx := metadata.AppendToOutgoingContext(context.Background(), tt.kv...)
				if tt.kv == nil {
					ctx = AppendOutgoing(context.Background(), Facts{Attempt: MaxAttempt + 1})
				}
				err := m.call(ctx, client)
				if got := status.Code(err); got != codes.InvalidArgument {
					t.Fatalf("call error = %v, want code InvalidArgument", err)
				}
				if msg := status.Convert(err).Message(); !strings.Contains(msg, tt.key) {
					t.Errorf("status message %q does not name %s", msg, tt.key)
				}
				if n := rec.calls.Load(); n != 0 {
					t.Errorf("handler ran %d times, want 0", n)
				}
			})
		}
	}
}
