package caller_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/pkg/caller"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/mtls"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// identities issues the certificates of the test from one CA, and one of
// another CA, each loaded as a Source.
type identities struct {
	server, tenant, frontend, component, stranger *mtls.Source
	// lowFrontend is a front end that may ask for batch at most;
	// badTenant a caller whose certificate names a tenant no levee-tenant
	// header could carry.
	lowFrontend, badTenant *mtls.Source
	caFile                 string
}

func issue(t *testing.T) identities {
	t.Helper()
	now := time.Now()
	dir := t.TempDir()
	ca, err := mtls.NewCA("test CA", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	load := func(ca *mtls.CA, dir, name string, l mtls.Leaf) *mtls.Source {
		l.Name, l.ValidFor = name, time.Hour
		if err := os.MkdirAll(filepath.Join(dir, name), 0o700); err != nil {
			t.Fatal(err)
		}
		f, err := ca.WriteFiles(filepath.Join(dir, name), name, l, now)
		if err != nil {
			t.Fatal(err)
		}
		src, err := mtls.Load(f, mtls.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	other, err := mtls.NewCA("another CA", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	return identities{
		server: load(ca, dir, "gateway", mtls.Leaf{Server: true, DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}),
		tenant: load(ca, dir, "shop", mtls.Leaf{Client: true, Roles: []string{mtls.RoleBudget}, Tenant: "shop", Priority: "interactive"}),
		frontend: load(ca, dir, "idp", mtls.Leaf{Client: true, Roles: []string{mtls.RoleFrontend}, Tenant: "idp",
			Priority: "critical"}),
		component: load(ca, dir, "verifier", mtls.Leaf{Client: true, Roles: []string{mtls.RoleGateway, mtls.RoleAdmin}}),
		stranger:  load(other, filepath.Join(dir, "other"), "shop", mtls.Leaf{Client: true, Tenant: "shop", Priority: "critical"}),
		lowFrontend: load(ca, dir, "reports", mtls.Leaf{Client: true, Roles: []string{mtls.RoleFrontend}, Tenant: "reports",
			Priority: "batch"}),
		badTenant: load(ca, dir, "odd", mtls.Leaf{Client: true, Tenant: "shop eu/1", Priority: "interactive"}),
		caFile:    filepath.Join(dir, "gateway", "ca.crt"),
	}
}

// serve runs a real gRPC server over TLS (client certificates verified when
// given) whose health Check is bound by rules; each call's bound facts are
// sent on the returned channel.
func serve(t *testing.T, src *mtls.Source, rules caller.Rules) (string, <-chan callmeta.Facts) {
	return serveAuth(t, src, rules, tls.VerifyClientCertIfGiven)
}

// serveAuth is serve with the handshake's client authentication given, as
// the gateway sets it: RequireAndVerifyClientCert unless anonymous callers
// are let in.
func serveAuth(t *testing.T, src *mtls.Source, rules caller.Rules, clientAuth tls.ClientAuthType) (string, <-chan callmeta.Facts) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan callmeta.Facts, 1)
	record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		seen <- callmeta.FromContext(ctx)
		return handler(ctx, req)
	}
	unary, stream := rules.Interceptors(healthpb.Health_Check_FullMethodName)
	srv := grpc.NewServer(append(src.ServerOptions(clientAuth), // nil src: plaintext
		grpc.ChainUnaryInterceptor(unary, record), grpc.ChainStreamInterceptor(stream))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	// A service the rules do not name, registered beside.
	budgetv1.RegisterBudgetServiceServer(srv, budgetv1.UnimplementedBudgetServiceServer{})
	reflection.Register(srv)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String(), seen
}

// call sends one bound call as id (nil: no certificate) with the metadata
// pairs kv, and returns the facts it was served with or its error.
func call(t *testing.T, addr string, dial grpc.DialOption, seen <-chan callmeta.Facts, kv ...string) (callmeta.Facts, error) {
	t.Helper()
	cc, err := grpc.NewClient(addr, dial)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		return callmeta.Facts{}, err
	}
	return <-seen, nil
}

// withoutCertificate dials with TLS, trusting the CA in caFile, and
// presents no certificate.
func withoutCertificate(t *testing.T, caFile string) grpc.DialOption {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no CA in", caFile)
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}))
}

func TestBind(t *testing.T) {
	ids := issue(t)
	anonymous := withoutCertificate(t, ids.caFile)
	type want struct {
		code     codes.Code
		tenant   string
		priority callmeta.Priority
	}
	ok := func(tenant string, p callmeta.Priority) want { return want{codes.OK, tenant, p} }
	refused := func(c codes.Code) want { return want{code: c} }
	for _, tc := range []struct {
		name  string
		rules caller.Rules
		dial  grpc.DialOption
		kv    []string
		want  want
	}{
		{"tenant caller, nothing asked", caller.Rules{}, ids.tenant.DialOption(""), nil, ok("shop", callmeta.Interactive)},
		{"tenant caller asks for less", caller.Rules{}, ids.tenant.DialOption(""), []string{callmeta.PriorityKey, "batch"}, ok("shop", callmeta.Batch)},
		{"tenant caller asks for more", caller.Rules{}, ids.tenant.DialOption(""), []string{callmeta.PriorityKey, "critical"}, refused(codes.PermissionDenied)},
		{"tenant caller names itself", caller.Rules{}, ids.tenant.DialOption(""), []string{callmeta.TenantKey, "shop"}, ok("shop", callmeta.Interactive)},
		{"tenant caller names another", caller.Rules{}, ids.tenant.DialOption(""), []string{callmeta.TenantKey, "bank"}, refused(codes.PermissionDenied)},
		{"front end, nothing asked", caller.Rules{}, ids.frontend.DialOption(""), nil, ok("idp", callmeta.Interactive)},
		{"front end names a tenant, critical", caller.Rules{}, ids.frontend.DialOption(""),
			[]string{callmeta.TenantKey, "bank", callmeta.PriorityKey, "critical"}, ok("bank", callmeta.Critical)},
		{"a component's certificate", caller.Rules{}, ids.component.DialOption(""), nil, refused(codes.PermissionDenied)},
		{"another CA's certificate", caller.Rules{}, ids.stranger.DialOption(""), nil, refused(codes.Unavailable)},
		{"anonymous", caller.Rules{}, anonymous, nil, refused(codes.Unauthenticated)},
		{"anonymous, allowed", caller.Rules{AllowAnonymous: true}, anonymous, nil, ok(caller.AnonymousTenant, callmeta.Batch)},
		{"anonymous, allowed, asks for interactive", caller.Rules{AllowAnonymous: true}, anonymous,
			[]string{callmeta.PriorityKey, "interactive"}, refused(codes.PermissionDenied)},
		{"anonymous, allowed, names a tenant", caller.Rules{AllowAnonymous: true}, anonymous,
			[]string{callmeta.TenantKey, "shop"}, refused(codes.PermissionDenied)},
		{"malformed priority", caller.Rules{}, ids.tenant.DialOption(""), []string{callmeta.PriorityKey, "urgent"}, refused(codes.InvalidArgument)},
		{"front end asks above its ceiling", caller.Rules{}, ids.lowFrontend.DialOption(""),
			[]string{callmeta.TenantKey, "bank", callmeta.PriorityKey, "interactive"}, refused(codes.PermissionDenied)},
		{"front end names a tenant at its ceiling", caller.Rules{}, ids.lowFrontend.DialOption(""),
			[]string{callmeta.TenantKey, "bank"}, ok("bank", callmeta.Batch)},
		{"a certificate's tenant no header could carry", caller.Rules{}, ids.badTenant.DialOption(""), nil, refused(codes.PermissionDenied)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, seen := serve(t, ids.server, tc.rules)
			f, err := call(t, addr, tc.dial, seen, tc.kv...)
			if got := status.Code(err); got != tc.want.code {
				t.Fatalf("got %v, want %v", err, tc.want.code)
			}
			if err == nil && (f.Tenant != tc.want.tenant || f.Priority != tc.want.priority || f.Attempt != 1) {
				t.Errorf("served as tenant %q priority %v attempt %d, want %q %v 1", f.Tenant, f.Priority, f.Attempt, tc.want.tenant, tc.want.priority)
			}
		})
	}
}

// As the gateway serves by default, a handshake without a client
// certificate fails, and the callers that have one are bound as above.
func TestBindRequiringCertificates(t *testing.T) {
	ids := issue(t)
	addr, seen := serveAuth(t, ids.server, caller.Rules{}, tls.RequireAndVerifyClientCert)
	if _, err := call(t, addr, withoutCertificate(t, ids.caFile), seen); status.Code(err) != codes.Unavailable {
		t.Errorf("no certificate: %v, want the handshake to fail (UNAVAILABLE)", err)
	}
	if _, err := call(t, addr, ids.stranger.DialOption(""), seen); status.Code(err) != codes.Unavailable {
		t.Errorf("another CA's certificate: %v, want the handshake to fail (UNAVAILABLE)", err)
	}
	if _, err := call(t, addr, ids.lowFrontend.DialOption(""), seen, callmeta.PriorityKey, "critical"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a front end asking above its ceiling: %v, want PERMISSION_DENIED", err)
	}
	f, err := call(t, addr, ids.tenant.DialOption(""), seen, callmeta.PriorityKey, "batch")
	if err != nil || f.Tenant != "shop" || f.Priority != callmeta.Batch {
		t.Errorf("a tenant caller asking for batch: %+v, %v", f, err)
	}
}

// A method the rules do not bind is refused, whoever calls it, unless its
// service is open (reflection here; health's Watch stream).
func TestUnnamedMethodsRefused(t *testing.T) {
	ids := issue(t)
	addr, _ := serve(t, ids.server, caller.Rules{})
	for _, dial := range []grpc.DialOption{ids.tenant.DialOption(""), ids.frontend.DialOption("")} {
		cc, err := grpc.NewClient(addr, dial)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err = budgetv1.NewBudgetServiceClient(cc).Lease(ctx, &budgetv1.LeaseRequest{})
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("a registered method the rules do not name: %v, want PERMISSION_DENIED", err)
		}
		rc, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		if _, err := rc.Recv(); err != nil {
			t.Errorf("reflection, an open service: %v", err)
		}
		w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Errorf("health Watch, an open service: %v", err)
		}
		cancel()
	}
}

// Without TLS there is nobody to bind to: the facts pass as sent.
func TestPlaintextPassesTheFactsAsSent(t *testing.T) {
	addr, seen := serve(t, nil, caller.Rules{Plaintext: true})
	f, err := call(t, addr, (*mtls.Source)(nil).DialOption(""), seen, callmeta.TenantKey, "bank", callmeta.PriorityKey, "critical")
	if err != nil || f.Tenant != "bank" || f.Priority != callmeta.Critical {
		t.Fatalf("got %+v, %v; want tenant bank, critical", f, err)
	}
}
