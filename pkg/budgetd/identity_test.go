package budgetd_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/etcdclient"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
	"github.com/leveehq/levee/pkg/mtls"
)

// With TLS a lease is accounted under the name of the certificate that
// asked for it: two clients that send the same client_id hold their own
// tokens, a client cannot pass as a replica that forwards, and a report no
// real client could make is refused, counted and earns nothing.
func TestLeasesAreBoundToTheCertificate(t *testing.T) {
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
	var etcdURL, prefix string
	r := budgetdtest.StartReplica(t, nil, func(c *budgetd.Config) {
		c.TLS = load(mtls.IdentityBudgetd)
		c.EmbeddedEtcd.TLS = mtls.Settings{Dir: dir}.Resolve(mtls.IdentityEtcd)
		c.EmbeddedEtcd.ClientURL = strings.Replace(c.EmbeddedEtcd.ClientURL, "http://", "https://", 1)
		c.EmbeddedEtcd.PeerURL = strings.Replace(c.EmbeddedEtcd.PeerURL, "http://", "https://", 1)
		etcdURL, prefix = c.EmbeddedEtcd.ClientURL, c.Prefix
	})
	budgetdtest.WaitLeader(t, leaderWait, r)
	client := func(name string) budgetv1.BudgetServiceClient {
		cc, err := grpc.NewClient(r.Addr(), load(name).DialOption(""))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return budgetv1.NewBudgetServiceClient(cc)
	}
	ctx := ctxT(t)
	app, idp, admin := client(mtls.IdentityClient), client(mtls.IdentityFrontend), client(mtls.IdentityAdmin)

	if _, err := app.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "x", Reports: []*budgetv1.KeyReport{report("verify", 100, 5)}}); err != nil {
		t.Fatal(err)
	}
	// The same client_id from another certificate, and once more with the
	// header a forwarding replica sets: both are the front end's own.
	if _, err := idp.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "x", Reports: []*budgetv1.KeyReport{report("verify", 10, 1)}}); err != nil {
		t.Fatal(err)
	}
	forged := metadata.AppendToOutgoingContext(ctx, "levee-budgetd-forwarded", "1")
	if _, err := idp.Lease(forged, &budgetv1.LeaseRequest{ClientId: "client:x", Reports: []*budgetv1.KeyReport{report("verify", 10, 1)}}); err != nil {
		t.Fatal(err)
	}
	// Absurd: 2^39 first attempts in a second.
	_, err := app.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "x", Reports: []*budgetv1.KeyReport{report("verify", 1<<39, 1000)}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("an absurd report: %v, want INVALID_ARGUMENT", err)
	}
	if got := metricValue(t, r.Server().Registry(), "levee_budgetd_leases_total", "outcome", "implausible"); got != 1 {
		t.Errorf("implausible leases counted %v, want 1", got)
	}

	st, err := admin.Status(ctx, &budgetv1.StatusRequest{Key: "verify"})
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]bool{}
	var first uint64
	for _, b := range st.GetBudgets() {
		first += b.GetFirstAttemptsTotal()
		for _, c := range b.GetClients() {
			clients[c.GetClientId()] = true
		}
	}
	if len(clients) != 3 || !clients["client:x"] || !clients["frontend:x"] || !clients["frontend:client:x"] {
		t.Errorf("clients %v; want client:x, frontend:x and frontend:client:x", clients)
	}
	if first != 120 {
		t.Errorf("first attempts counted %d, want 120 (the absurd report earns nothing)", first)
	}

	// budgetd's embedded etcd runs with access control on: another
	// certificate of the CA may not write its election (and budgetd, which
	// leads above, may).
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, TLS: load(mtls.IdentityClient)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, prefix+"election/forged", "x"); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("a client certificate writing budgetd's election: %v, want etcd's permission denied", err)
	}
}
