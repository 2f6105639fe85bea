package fleet

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/promscrape"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/verifier"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/wellknown"
)

func TestMain(m *testing.M) {
	// These tests measure time: not beside the lab's (see testlock).
	testlock.Shared()
	goleak.VerifyTestMain(m)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// testConfig is a small fleet for a test: free ports on 127.0.0.1, one
// worker per verifier, a cheap policy, logs discarded. scheme prefixes the
// etcd URLs: "http://" for a plaintext fleet, "" where TLSDir decides.
func testConfig(t *testing.T, scheme string) Config {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Etcd.DataDir = t.TempDir()
	cfg.Etcd.ClientURL = scheme + "127.0.0.1:" + strconv.Itoa(freePort(t))
	cfg.Etcd.PeerURL = scheme + "127.0.0.1:" + strconv.Itoa(freePort(t))
	cfg.GatewayPort, cfg.BudgetdPort, cfg.VerifierPort = 0, 0, 0
	cfg.Workers = 1
	cfg.Policy = verify.Policy{Params: verify.Params{Memory: 64, Iterations: 1, Parallelism: 1}, SaltLen: 16, KeyLen: 32}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return cfg
}

// The whole fleet in one process: the gateway finds both verifiers through
// etcd, answers through them, leases retry tokens from budgetd, and the
// fleet stops cleanly.
func TestLocalFleet(t *testing.T) {
	cfg := testConfig(t, "http://")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ready := make(chan Addresses, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, func(a Addresses) { ready <- a }) }()
	var a Addresses
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("fleet ended before it was ready: %v", err)
	}
	if len(a.Verifiers) != 2 || a.Gateway == "" || a.Budgetd == "" {
		t.Fatalf("addresses %+v", a)
	}

	cc, err := grpc.NewClient(a.Gateway, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := verifyv1.NewVerifyServiceClient(cc)
	h, err := client.Hash(ctx, &verifyv1.HashRequest{Password: []byte("local secret")})
	if err != nil {
		t.Fatalf("Hash through the gateway: %v", err)
	}
	for pw, want := range map[string]bool{"local secret": true, "wrong": false} {
		resp, err := client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: h.GetEncodedHash(), Password: []byte(pw)})
		if err != nil || resp.GetMatch() != want {
			t.Errorf("Verify(%q) = %v, %v; want match=%v", pw, resp, err, want)
		}
	}

	// The gateway leases its retry budget from this fleet's budgetd.
	bcc, err := grpc.NewClient(a.Budgetd, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer bcc.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, err := budgetv1.NewBudgetServiceClient(bcc).Status(ctx, &budgetv1.StatusRequest{Key: "gateway"})
		if err == nil && len(st.GetBudgets()) == 1 && len(st.GetBudgets()[0].GetClients()) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("budgetd never saw the gateway's key: %v, %v", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// What other programs read from each member's /metrics is there, under
	// the names they read it by. Each verifier answers one call first: a
	// series with labels shows once it has counted something.
	members := []struct {
		addr  string
		names []string
	}{
		{a.GatewayMetrics, wellknown.GatewayMetrics},
		{a.GatewayMetrics, wellknown.BudgetMetrics}, // the gateway's own budget client
		{a.BudgetdMetrics, wellknown.BudgetdMetrics},
	}
	for i, addr := range a.Verifiers {
		vcc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		_, err = verifyv1.NewVerifyServiceClient(vcc).Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: h.GetEncodedHash(), Password: []byte("local secret")})
		vcc.Close()
		if err != nil {
			t.Fatalf("Verify at verifier %s: %v", addr, err)
		}
		members = append(members, struct {
			addr  string
			names []string
		}{a.VerifierMetrics[i], wellknown.VerifierMetrics})
	}
	for _, m := range members {
		// Per-verifier gauges are refreshed once a second.
		var missing []string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			mfs, err := promscrape.Fetch(ctx, "http://"+m.addr+"/metrics")
			if err != nil {
				t.Fatal(err)
			}
			missing = missing[:0]
			for _, name := range m.names {
				if _, ok := mfs[name]; !ok {
					missing = append(missing, name)
				}
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(missing) > 0 {
			t.Errorf("%s does not export %v, which wellknown names", m.addr, missing)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("fleet stopped with %v", err)
	}
}

// A verifier that cannot start serving fails the whole fleet at once, by
// name, instead of leaving it waiting for a verifier that never comes.
func TestFleetFailsWhenAVerifierCannotServe(t *testing.T) {
	cfg := testConfig(t, "http://")
	cfg.MutateVerifier = func(i int, c *verifier.Config) {
		if i == 1 {
			// TLS to etcd without a certificate: its etcd client cannot be
			// made, which Serve finds when it starts.
			c.EtcdEndpoints = []string{strings.Replace(c.EtcdEndpoints[0], "http://", "https://", 1)}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, func(Addresses) { t.Error("the fleet said it was ready") }) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "verifier 2") {
			t.Errorf("Run = %v, want an error naming verifier 2", err)
		}
	case <-ctx.Done():
		t.Fatal("the fleet never failed: it waits for a verifier that cannot serve")
	}
}
