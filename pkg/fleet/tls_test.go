package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/etcdclient"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/fleetctl"
	"github.com/leveehq/levee/pkg/gateway"
	"github.com/leveehq/levee/pkg/mtls"
)

// A fleet run with a development set (what `levee local` runs):
//
//   - every internal port (budgetd, each verifier, etcd) refuses plaintext,
//     TLS without a client certificate and a certificate of another CA, and
//     serves one of the fleet's CA;
//   - the gateway's public port serves TLS with a client certificate of
//     the CA, and refuses plaintext, TLS without one (no -allow-anonymous)
//     and a certificate of another CA;
//   - each port serves each method only to the roles it names
//     (checkAuthorization);
//   - etcd refuses a settings write from any identity but the admin's (etcd's
//     own access control: gateway, verifier and client certificates may not
//     write it), and takes the admin's;
//   - certificates reissued on disk are served without a restart.
func TestMutualTLSFleet(t *testing.T) {
	dir, rogueDir := t.TempDir(), t.TempDir()
	now := time.Now()
	ca, err := mtls.NewCA("test CA", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	set := mtls.DevelopmentSet{Dir: dir, ValidFor: 24 * time.Hour}
	if err := ca.WriteSet(set, now); err != nil {
		t.Fatal(err)
	}
	// Another CA's set: valid certificates, the wrong authority.
	if err := mtls.WriteDevelopmentSet(mtls.DevelopmentSet{Dir: rogueDir, ValidFor: 24 * time.Hour}, now); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig(t, "")
	cfg.EnableCapacityKnob = true
	cfg.TLSDir = dir

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ready := make(chan Addresses, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, func(a Addresses) { ready <- a }) }()
	var a Addresses
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("fleet ended before it was ready: %v", err)
	case <-ctx.Done():
		t.Fatal("fleet not ready within the test's deadline")
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fleet: %v", err)
		}
		// The same data in plaintext: etcd's access control is on, so a
		// fleet without certificates could do nothing; it refuses to start
		// and says why.
		plain := cfg
		plain.TLSDir = ""
		pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
		defer pcancel()
		if err := Run(pctx, plain, func(Addresses) { t.Error("a plaintext fleet on TLS etcd data started") }); err == nil ||
			!strings.Contains(err.Error(), "access control on") {
			t.Errorf("plaintext fleet on the data of a TLS run: %v, want a refusal naming etcd's access control", err)
		}
	}()
	if len(a.Etcd) != 1 || !strings.HasPrefix(a.Etcd[0], "https://") {
		t.Fatalf("etcd endpoints %v, want one https:// URL", a.Etcd)
	}
	etcdURL, err := url.Parse(a.Etcd[0])
	if err != nil {
		t.Fatal(err)
	}

	caPool := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil || !caPool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("ca.crt: %v", err)
	}
	keyPair := func(d, name string) []tls.Certificate {
		c, err := tls.LoadX509KeyPair(filepath.Join(d, name+".crt"), filepath.Join(d, name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{c}
	}
	transports := map[string]grpc.DialOption{
		"plaintext":                        grpc.WithTransportCredentials(insecure.NewCredentials()),
		"TLS without a client certificate": grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: caPool})),
		// Sent whatever the server says it accepts (crypto/tls would
		// otherwise send none, and the gateway then serves an anonymous
		// caller, as it should).
		"a client certificate of another CA": grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: caPool,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return &keyPair(rogueDir, mtls.IdentityClient)[0], nil
			}})),
		"the fleet's client certificate": grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: caPool,
			Certificates: keyPair(dir, mtls.IdentityClient)})),
	}
	health := func(addr string, transport grpc.DialOption) error {
		cc, err := grpc.NewClient(addr, transport)
		if err != nil {
			return err
		}
		defer cc.Close()
		hctx, hcancel := context.WithTimeout(ctx, 3*time.Second)
		defer hcancel()
		_, err = healthpb.NewHealthClient(cc).Check(hctx, &healthpb.HealthCheckRequest{})
		return err
	}

	internal := map[string]string{"budgetd": a.Budgetd, "etcd": etcdURL.Host}
	for i, v := range a.Verifiers {
		internal["verifier "+strconv.Itoa(i+1)] = v
	}
	for port, addr := range internal {
		for how, transport := range transports {
			err := health(addr, transport)
			if want := how == "the fleet's client certificate"; (err == nil) != want {
				t.Errorf("%s (%s) with %s: health check %v; want it served: %v", port, addr, how, err, want)
			}
		}
	}
	for how, transport := range transports {
		err := health(a.Gateway, transport)
		want := how == "the fleet's client certificate"
		if (err == nil) != want {
			t.Errorf("gateway (%s) with %s: health check %v; want it served: %v", a.Gateway, how, err, want)
		}
	}

	identity := func(name string) *mtls.Source {
		src, err := mtls.Settings{Dir: dir}.Load(name, mtls.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	checkAuthorization(ctx, t, a, transports, identity)

	// Settings writes: only the admin's identity.
	write := func(name string) error {
		cli, err := etcdclient.New(etcdclient.Config{Endpoints: a.Etcd, DialTimeout: 5 * time.Second, TLS: identity(name)})
		if err != nil {
			return err
		}
		defer cli.Close()
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		return fleetctl.EditSettings(wctx, cli, gateway.DefaultSettingsKey, "set", []string{"clamp=40"}, io.Discard)
	}
	for _, name := range []string{mtls.IdentityClient, mtls.IdentityGateway, mtls.IdentityVerifier, mtls.IdentityBudgetd} {
		if err := write(name); !errors.Is(err, rpctypes.ErrPermissionDenied) {
			t.Errorf("settings write as %s: %v, want etcd's permission denied", name, err)
		}
	}
	if err := write(mtls.IdentityAdmin); err != nil {
		t.Errorf("settings write as admin: %v", err)
	}

	// Rotation: every certificate reissued under the same CA is served
	// within the reload interval (a second), without a restart.
	served := func(addr string) *x509.Certificate {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: caPool, Certificates: keyPair(dir, mtls.IdentityAdmin)})
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	before := map[string]string{}
	for port, addr := range internal {
		before[port] = served(addr).SerialNumber.String()
	}
	set.Force = true
	if err := ca.WriteSet(set, time.Now()); err != nil {
		t.Fatal(err)
	}
	for port, addr := range internal {
		deadline := time.Now().Add(10 * time.Second)
		for served(addr).SerialNumber.String() == before[port] {
			if time.Now().After(deadline) {
				t.Fatalf("%s still serves its old certificate 10 s after it was reissued", port)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err := health(addr, identity(mtls.IdentityClient).DialOption("")); err != nil {
			t.Errorf("%s after the rotation: %v", port, err)
		}
	}
}

// checkAuthorization calls every method of every port of the fleet at a
// with every identity of its development set, none, and another CA's, and
// checks each answer against the table of who may call what: a refusal
// must carry its code (UNAVAILABLE for a handshake the port refuses,
// PERMISSION_DENIED for an identity without the role), and a call that is
// allowed must get past authorisation (any other answer).
func checkAuthorization(ctx context.Context, t *testing.T, a Addresses, transports map[string]grpc.DialOption, identity func(string) *mtls.Source) {
	t.Helper()
	const served = codes.OK // "past authorisation": the method's own answer
	denied, refused := codes.PermissionDenied, codes.Unavailable
	type method struct {
		port, name string
		addr       string
		call       func(context.Context, *grpc.ClientConn) error
	}
	verify := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := verifyv1.NewVerifyServiceClient(cc).Verify(ctx, &verifyv1.VerifyRequest{})
		return err
	}
	hash := func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := verifyv1.NewVerifyServiceClient(cc).Hash(ctx, &verifyv1.HashRequest{})
		return err
	}
	methods := []method{
		{"gateway", "Verify", a.Gateway, verify},
		{"gateway", "Hash", a.Gateway, hash},
		{"verifier", "Verify", a.Verifiers[0], verify},
		{"verifier", "Hash", a.Verifiers[0], hash},
		{"verifier", "SetCapacity", a.Verifiers[0], func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := verifyv1.NewVerifierAdminServiceClient(cc).SetCapacity(ctx, &verifyv1.SetCapacityRequest{WorkerFraction: 1, Slowdown: 1})
			return err
		}},
		{"verifier", "GetCapacity", a.Verifiers[0], func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := verifyv1.NewVerifierAdminServiceClient(cc).GetCapacity(ctx, &verifyv1.GetCapacityRequest{})
			return err
		}},
		{"budgetd", "Lease", a.Budgetd, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := budgetv1.NewBudgetServiceClient(cc).Lease(ctx, &budgetv1.LeaseRequest{ClientId: "table/1"})
			return err
		}},
		{"budgetd", "Status", a.Budgetd, func(ctx context.Context, cc *grpc.ClientConn) error {
			_, err := budgetv1.NewBudgetServiceClient(cc).Status(ctx, &budgetv1.StatusRequest{})
			return err
		}},
	}
	callers := []string{"none", "another CA's", mtls.IdentityClient, mtls.IdentityFrontend, mtls.IdentityGateway,
		mtls.IdentityVerifier, mtls.IdentityBudgetd, mtls.IdentityAdmin}
	// want[port.method] lists the answer for each of callers, in order.
	want := map[string][]codes.Code{
		"gateway.Verify":       {refused, refused, served, served, denied, denied, denied, denied},
		"gateway.Hash":         {refused, refused, served, served, denied, denied, denied, denied},
		"verifier.Verify":      {refused, refused, denied, denied, served, denied, denied, denied},
		"verifier.Hash":        {refused, refused, denied, denied, served, denied, denied, denied},
		"verifier.SetCapacity": {refused, refused, denied, denied, denied, denied, denied, served},
		"verifier.GetCapacity": {refused, refused, denied, denied, denied, denied, denied, served},
		"budgetd.Lease":        {refused, refused, served, served, served, denied, served, denied},
		"budgetd.Status":       {refused, refused, denied, denied, denied, denied, served, served},
	}
	dial := func(who string) grpc.DialOption {
		switch who {
		case "none":
			return transports["TLS without a client certificate"]
		case "another CA's":
			return transports["a client certificate of another CA"]
		}
		return identity(who).DialOption("")
	}
	for _, m := range methods {
		for i, who := range callers {
			cc, err := grpc.NewClient(m.addr, dial(who))
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = m.call(cctx, cc)
			cancel()
			cc.Close()
			got := status.Code(err)
			w := want[m.port+"."+m.name][i]
			if w == served && (got == codes.Unauthenticated || got == denied || got == refused) ||
				w != served && got != w {
				t.Errorf("%s %s as %s: %v; want %v", m.port, m.name, who, err, w)
			}
		}
	}

	// A caller's headers can lower its standing, never raise it or change
	// its tenant.
	cc, err := grpc.NewClient(a.Gateway, identity(mtls.IdentityClient).DialOption(""))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for _, kv := range [][]string{{callmeta.PriorityKey, "critical"}, {callmeta.TenantKey, "someone-else"}} {
		cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, kv...), 5*time.Second)
		err := verify(cctx, cc)
		cancel()
		if status.Code(err) != denied {
			t.Errorf("gateway Verify as %s with %s: %v; want %v", mtls.IdentityClient, kv, err, denied)
		}
	}
}
