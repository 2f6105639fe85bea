package budget_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/budget/budgettest"
	"github.com/leveehq/levee/pkg/mtls"
)

// A list of replicas is dialled with each one's own TLS name: a client
// presenting the gateway's certificate leases from a budgetd serving mutual
// TLS, listed twice under two names its certificate holds. (The list's
// authority used to be the made-up "budgetd", which no certificate names:
// every gateway of the compose fleet ran on its fallback budget.)
func TestListOfReplicasOverTLS(t *testing.T) {
	dir := t.TempDir()
	if err := mtls.WriteDevelopmentSet(mtls.DevelopmentSet{Dir: dir, ValidFor: time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	load := func(name string) *mtls.Source {
		src, err := mtls.Settings{Dir: dir}.Load(name, mtls.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	srv := budgettest.NewServer(budgettest.Config{TLS: load(mtls.IdentityBudgetd)})
	addr, err := srv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	port := addr[strings.LastIndexByte(addr, ':'):]

	cfg := budget.DefaultConfig()
	cfg.Target = "127.0.0.1" + port + ",localhost" + port
	cfg.Keys = []string{key}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.DialOptions = []grpc.DialOption{load(mtls.IdentityGateway).DialOption("")}
	b := openKey(t, cfg, key)
	deadline := time.Now().Add(10 * time.Second)
	for b.Status().Mode != budget.Shared {
		if time.Now().After(deadline) {
			t.Fatalf("no lease over TLS after 10 s: %+v", b.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
