package budgetd_test

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/embeddedetcd"
	"github.com/leveehq/levee/internal/etcdclient"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
	"github.com/leveehq/levee/pkg/mtls"
)

// With TLS a lease is accounted under the name of the certificate that
// asked for it: two clients that send the same client_id hold their own
// tokens, a client cannot pass as a replica that forwards, a report no
// real client could make is refused, counted and earns nothing, and one
// certificate is credited at most MaxClientRate a second (a bucket of
// ForgetAfter's worth) under at most MaxClientsPerIdentity client ids,
// however it spreads its reports.
func TestLeasesAreBoundToTheCertificate(t *testing.T) {
	dir, load := developmentSet(t)
	const maxRate = 100.0 // a second, per identity; a bucket of ForgetAfter (10 s) of it
	var etcdURL, prefix string
	r := budgetdtest.StartReplica(t, nil, func(c *budgetd.Config) {
		c.TLS = load(mtls.IdentityBudgetd)
		embeddedOverTLS(dir, &c.EmbeddedEtcd)
		etcdURL, prefix = c.EmbeddedEtcd.ClientURL, c.Prefix
		c.MaxClientRate, c.MaxClientsPerIdentity = maxRate, 3
	})
	budgetdtest.WaitLeader(t, leaderWait, r)
	client := func(name string) budgetv1.BudgetServiceClient { return budgetClient(t, r, load(name)) }
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

	// The client certificate names a tenant: its key lives in that
	// tenant's key space. The front end's does not.
	firstTotal := func() (uint64, map[string]bool) {
		clients := map[string]bool{}
		var first uint64
		for _, key := range []string{"verify", budgetd.TenantScope(mtls.DefaultTenant) + "verify"} {
			st, err := admin.Status(ctx, &budgetv1.StatusRequest{Key: key})
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range st.GetBudgets() {
				first += b.GetFirstAttemptsTotal()
				for _, c := range b.GetClients() {
					clients[c.GetClientId()] = true
				}
			}
		}
		return first, clients
	}
	first, clients := firstTotal()
	if len(clients) != 3 || !clients["client:x"] || !clients["frontend:x"] || !clients["frontend:client:x"] {
		t.Errorf("clients %v; want client:x, frontend:x and frontend:client:x", clients)
	}
	if first != 120 {
		t.Errorf("first attempts counted %d, want 120 (the absurd report earns nothing)", first)
	}

	// Each report plausible on its own (90 in a second), forty of them at
	// once under two more client ids: the certificate is credited what its
	// bucket holds (1,000 less the 100 above, and what refilled meanwhile),
	// the rest is counted and never earned.
	start := time.Now()
	for i := range 40 {
		id := []string{"y", "z"}[i%2]
		if _, err := app.Lease(ctx, &budgetv1.LeaseRequest{ClientId: id, Reports: []*budgetv1.KeyReport{report("verify", 90, 0)}}); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	after, _ := firstTotal()
	credited := after - first
	if bound := 900 + uint64(maxRate*elapsed.Seconds()) + 1; credited > bound {
		t.Errorf("the client certificate was credited %d first attempts in %v, more than its bucket's %d", credited, elapsed, bound)
	}
	uncredited := metricValue(t, r.Server().Registry(), "levee_budgetd_reported_uncredited_total")
	if uncredited < float64(40*90-credited) {
		t.Errorf("uncredited attempts counted %v, want at least %d (claimed %d, credited %d)", uncredited, 40*90-credited, 40*90, credited)
	}
	// A fourth client id under one certificate is refused; the front end's
	// certificate is another identity and has room.
	if _, err := app.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "w", Reports: []*budgetv1.KeyReport{report("verify", 1, 0)}}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a fourth client id under one certificate (cap 3): %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := idp.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "w", Reports: []*budgetv1.KeyReport{report("verify", 1, 0)}}); err != nil {
		t.Errorf("another certificate's third client id: %v", err)
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

// budgetd turns on its embedded etcd's access control as whatever name its
// certificate carries, and comes back on the same data under another
// prefix: with access control on it re-grants what it needs, and a
// certificate of your own PKI named other than "budgetd" does not lock
// budgetd out of its own store.
func TestBudgetdOwnsItsEmbeddedEtcdUnderAnyName(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, err := mtls.NewCA("test CA", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteSet(mtls.DevelopmentSet{Dir: dir, ValidFor: time.Hour}, now); err != nil {
		t.Fatal(err)
	}
	const name = "budgetd-eu-1"
	if _, err := ca.WriteFiles(dir, name, mtls.Leaf{Name: name, DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		Server: true, Client: true, Roles: []string{mtls.RoleBudgetd}, ValidFor: time.Hour}, now); err != nil {
		t.Fatal(err)
	}
	src, err := mtls.Settings{Dir: dir}.Load(name, mtls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var emb embeddedetcd.Config
	for i, prefix := range []string{"/first/", "/second/"} {
		r := budgetdtest.StartReplica(t, nil, func(c *budgetd.Config) {
			if i == 0 {
				embeddedOverTLS(dir, &c.EmbeddedEtcd)
				emb = c.EmbeddedEtcd
			}
			c.EmbeddedEtcd, c.TLS, c.Prefix = emb, src, prefix
		})
		budgetdtest.WaitLeader(t, leaderWait, r)
		r.Stop()
	}
}

// A lease sent to a follower reaches the leader bound to the certificate
// that sent it: the follower binds it, the leader takes the binding from
// a replica (and only from one), and neither accounts it under budgetd's
// own name.
func TestForwardedLeaseKeepsItsCallersName(t *testing.T) {
	dir, load := developmentSet(t)
	var etcdURL string
	r1 := budgetdtest.StartReplica(t, nil, func(c *budgetd.Config) {
		c.TLS = load(mtls.IdentityBudgetd)
		embeddedOverTLS(dir, &c.EmbeddedEtcd)
		etcdURL = c.EmbeddedEtcd.ClientURL
	})
	budgetdtest.WaitLeader(t, leaderWait, r1)
	r2 := budgetdtest.StartReplica(t, []string{etcdURL}, func(c *budgetd.Config) { c.TLS = load(mtls.IdentityBudgetd) })
	leader := budgetdtest.WaitLeader(t, leaderWait, r1, r2)
	follower := r1
	if leader == r1 {
		follower = r2
	}
	dial := func(r *budgetdtest.Replica, name string) budgetv1.BudgetServiceClient {
		return budgetClient(t, r, load(name))
	}
	ctx := ctxT(t)
	// The follower learns the leader's address from etcd; until it has,
	// it refuses with UNAVAILABLE (a client then uses its local budget).
	app := dial(follower, mtls.IdentityClient)
	deadline := time.Now().Add(leaderWait)
	for {
		_, err := app.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "x", Reports: []*budgetv1.KeyReport{report("verify", 50, 0)}})
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("a lease through the follower: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := metricValue(t, follower.Server().Registry(), "levee_budgetd_forwarded_total", "rpc", "lease", "result", "ok"); got != 1 {
		t.Errorf("follower forwarded %v leases, want 1", got)
	}
	st, err := dial(leader, mtls.IdentityAdmin).Status(ctx, &budgetv1.StatusRequest{Key: budgetd.TenantScope(mtls.DefaultTenant) + "verify"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, b := range st.GetBudgets() {
		for _, c := range b.GetClients() {
			ids = append(ids, c.GetClientId())
		}
	}
	if len(ids) != 1 || ids[0] != "client:x" {
		t.Errorf("the leader accounts the forwarded lease under %q, want [client:x]", ids)
	}
}

// A client whose certificate names a tenant leases in that tenant's key
// space: two tenants' clients that name one key hold two budgets (their
// own settings, cap and overflow pool), so what one tenant's first attempts
// earn is never another's to spend, and each gets its key back by the name
// it sent. A key too long for the
// space is refused with a message that says so.
func TestTenantsLeaseInTheirOwnKeySpace(t *testing.T) {
	dir, load := developmentSet(t, mtls.Caller{Tenant: "a", Priority: "interactive"}, mtls.Caller{Tenant: "b", Priority: "interactive"})
	r := budgetdtest.StartReplica(t, nil, func(c *budgetd.Config) {
		c.TLS = load(mtls.IdentityBudgetd)
		embeddedOverTLS(dir, &c.EmbeddedEtcd)
	})
	budgetdtest.WaitLeader(t, leaderWait, r)
	ctx := ctxT(t)
	a := budgetClient(t, r, load(mtls.Caller{Tenant: "a"}.CallerName()))
	b := budgetClient(t, r, load(mtls.Caller{Tenant: "b"}.CallerName()))

	lease := func(c budgetv1.BudgetServiceClient, first uint64) {
		resp, err := c.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "x", Reports: []*budgetv1.KeyReport{report("login", first, 50)}})
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.GetLeases()[0].GetKey(); got != "login" {
			t.Fatalf("lease of key %q, want login, the name sent", got)
		}
	}
	lease(a, 1000)
	lease(b, 10)
	// Each tenant's first attempts are on its own budget; none on the key
	// of that name outside the tenants' spaces.
	admin := budgetClient(t, r, load(mtls.IdentityAdmin))
	for key, want := range map[string]uint64{"tenant/a/login": 1000, "tenant/b/login": 10, "login": 0} {
		st, err := admin.Status(ctx, &budgetv1.StatusRequest{Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if got := st.GetBudgets()[0].GetFirstAttemptsTotal(); got != want {
			t.Errorf("budget %s counted %d first attempts, want %d", key, got, want)
		}
	}
	long := strings.Repeat("k", 128)
	_, err := a.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "x", Reports: []*budgetv1.KeyReport{report(long, 1, 0)}})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "tenant/a/") {
		t.Errorf("a 128-byte key from a tenant's client: %v, want INVALID_ARGUMENT naming the key space", err)
	}
}

// developmentSet writes a development set of certificates, with callers'
// besides its own, into a fresh directory and returns it, with a loader of
// its identities.
func developmentSet(t *testing.T, callers ...mtls.Caller) (string, func(name string) *mtls.Source) {
	t.Helper()
	dir := t.TempDir()
	if err := mtls.WriteDevelopmentSet(mtls.DevelopmentSet{Dir: dir, ValidFor: time.Hour, Callers: callers}, time.Now()); err != nil {
		t.Fatal(err)
	}
	return dir, func(name string) *mtls.Source {
		src, err := mtls.Settings{Dir: dir}.Load(name, mtls.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
}

// embeddedOverTLS serves c's embedded etcd over TLS, with the set in dir.
func embeddedOverTLS(dir string, c *embeddedetcd.Config) {
	c.TLS = mtls.Settings{Dir: dir}.Resolve(mtls.IdentityEtcd)
	c.ClientURL = strings.Replace(c.ClientURL, "http://", "https://", 1)
	c.PeerURL = strings.Replace(c.PeerURL, "http://", "https://", 1)
}

// budgetClient dials r presenting src, closed when t ends.
func budgetClient(t *testing.T, r *budgetdtest.Replica, src *mtls.Source) budgetv1.BudgetServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(r.Addr(), src.DialOption(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return budgetv1.NewBudgetServiceClient(cc)
}
