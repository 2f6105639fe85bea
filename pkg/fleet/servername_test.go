package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/gateway"
	"github.com/leveehq/levee/pkg/mtls"
)

// With -verifier-server-name the gateway checks that name in each
// verifier's certificate instead of the host it dialled (a pod IP on
// Kubernetes): a name the verifiers' certificate carries lets calls
// through; with another the gateway completes no handshake with any
// verifier, although each address (127.0.0.1) is one their certificate
// names, so it never has one to serve with and the fleet never becomes
// ready (Run waits for the gateway to serve).
func TestVerifierServerName(t *testing.T) {
	for _, c := range []struct {
		name  string
		ready bool
	}{
		{"verifier1", true}, // a name of the development set's verifier certificate
		{"not-the-verifiers.example", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := mtls.WriteDevelopmentSet(mtls.DevelopmentSet{Dir: dir, ValidFor: time.Hour}, time.Now()); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, "")
			cfg.TLSDir = dir
			cfg.MutateGateway = func(g *gateway.Config) { g.VerifierServerName = c.name }
			wait := 2 * time.Minute
			if !c.ready {
				wait = 15 * time.Second // the positive case is ready in about a second
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			ready := make(chan Addresses, 1)
			done := make(chan error, 1)
			go func() { done <- Run(ctx, cfg, func(a Addresses) { ready <- a }) }()
			var a Addresses
			select {
			case a = <-ready:
				if !c.ready {
					t.Fatal("the gateway served with verifiers whose certificate does not carry its -verifier-server-name")
				}
			case err := <-done:
				t.Fatalf("fleet ended before it was ready: %v", err)
			case <-ctx.Done():
				if c.ready {
					t.Fatal("fleet not ready within the test's deadline")
				}
				if err := <-done; err != nil && ctx.Err() == nil {
					t.Errorf("fleet: %v", err)
				}
				return
			}
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("fleet: %v", err)
				}
			}()
			pool := x509.NewCertPool()
			pem, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
			if err != nil || !pool.AppendCertsFromPEM(pem) {
				t.Fatalf("ca.crt: %v", err)
			}
			cert, err := tls.LoadX509KeyPair(filepath.Join(dir, mtls.IdentityClient+".crt"), filepath.Join(dir, mtls.IdentityClient+".key"))
			if err != nil {
				t.Fatal(err)
			}
			cc, err := grpc.NewClient(a.Gateway, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool,
				Certificates: []tls.Certificate{cert}})))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			_, err = verifyv1.NewVerifyServiceClient(cc).Hash(cctx, &verifyv1.HashRequest{Password: []byte("pw")})
			if err != nil {
				t.Fatalf("Hash through the gateway: %v", err)
			}
		})
	}
}
