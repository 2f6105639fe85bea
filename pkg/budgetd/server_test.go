package budgetd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
	"github.com/leveehq/levee/pkg/ledger"
)

// Every test starts replicas with gRPC, HTTP, etcd clients and embedded
// etcd servers; none of their goroutines may outlive the tests.
func TestMain(m *testing.M) {
	// These tests measure time: not beside the lab's (see testlock).
	testlock.Shared()
	goleak.VerifyTestMain(m)
}

// leaderWait bounds every wait for an election: a first election takes one
// round trip to etcd, a re-election after etcd returns a few session TTLs
// (2 s in tests).
const leaderWait = 15 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func report(key string, first uint64, wanted uint32) *budgetv1.KeyReport {
	return &budgetv1.KeyReport{Key: key, FirstAttempts: first, TokensWanted: wanted}
}

// TestLeaseStatusRoundTrip: one replica on its own embedded etcd leads,
// grants from an empty ledger what the report earned, and describes it in
// Status; health, reflection, the status page and /metrics answer.
func TestLeaseStatusRoundTrip(t *testing.T) {
	r := budgetdtest.StartReplica(t, nil, nil) // embedded etcd
	budgetdtest.WaitLeader(t, leaderWait, r)
	c := r.Client()
	ctx := ctxT(t)

	resp, err := c.Lease(ctx, &budgetv1.LeaseRequest{
		ClientId: "gateway-1/4121",
		Reports:  []*budgetv1.KeyReport{report("verify", 100, 5), report("verify/tenant-a", 0, 3)},
	})
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	def := ledger.DefaultSettings()
	defProto := &budgetv1.Settings{Ratio: def.Ratio, Burst: def.Burst, MinPerSecond: def.MinPerSecond}
	// A new leader starts empty: 100 first attempts at ratio 0.1 earn 10
	// tokens (5 wanted); a key with no traffic earns nothing yet. The only
	// client's share of min_per_second is all of it.
	want := []*budgetv1.KeyLease{
		{Key: "verify", Tokens: 5, Settings: defProto, FallbackMinPerSecond: def.MinPerSecond},
		{Key: "verify/tenant-a", Tokens: 0, Settings: defProto, FallbackMinPerSecond: def.MinPerSecond},
	}
	if diff := cmp.Diff(want, resp.GetLeases(), protocmp.Transform(),
		protocmp.IgnoreFields(&budgetv1.KeyLease{}, "valid_for")); diff != "" {
		t.Errorf("leases (-want +got):\n%s", diff)
	}
	for _, l := range resp.GetLeases() {
		if got := l.GetValidFor().AsDuration(); got != time.Second {
			t.Errorf("%s: valid_for = %v, want 1s", l.GetKey(), got)
		}
	}
	if got := resp.GetRefreshAfter().AsDuration(); got < 170*time.Millisecond || got > 230*time.Millisecond {
		t.Errorf("refresh_after = %v, want 200ms ± 15%%", got)
	}
	if resp.GetLeader() != r.Addr() {
		t.Errorf("leader = %q, want %q", resp.GetLeader(), r.Addr())
	}

	st, err := c.Status(ctx, &budgetv1.StatusRequest{Key: "verify"})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	wantSt := &budgetv1.StatusResponse{
		Leader:  r.Addr(),
		Replica: r.Addr(),
		Budgets: []*budgetv1.BudgetStatus{{
			Key:                "verify",
			Settings:           defProto,
			FirstAttemptsTotal: 100,
			TokensGrantedTotal: 5,
			Clients:            []*budgetv1.ClientStatus{{ClientId: "gateway-1/4121", Has: 5, Wants: 5}},
		}},
	}
	if diff := cmp.Diff(wantSt, st, protocmp.Transform(),
		protocmp.IgnoreFields(&budgetv1.BudgetStatus{}, "tokens_available", "first_attempts_per_second",
			"retries_per_second", "retry_ratio"),
		protocmp.IgnoreFields(&budgetv1.ClientStatus{}, "first_attempts_per_second", "since_report")); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}
	if b := st.GetBudgets()[0]; b.GetFirstAttemptsPerSecond() <= 0 || b.GetTokensAvailable() < 4 {
		t.Errorf("first/s = %v, tokens = %v: want the reported traffic and the 5 unspent tokens", b.GetFirstAttemptsPerSecond(), b.GetTokensAvailable())
	}
	all, err := c.Status(ctx, &budgetv1.StatusRequest{})
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	var keys []string
	for _, b := range all.GetBudgets() {
		keys = append(keys, b.GetKey())
	}
	if diff := cmp.Diff([]string{"verify", "verify/tenant-a"}, keys); diff != "" {
		t.Errorf("Status keys (-want +got):\n%s", diff)
	}

	cc := dial(t, r.Addr())
	for _, svc := range []string{"", "levee.budget.v1.BudgetService"} {
		h, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", svc, h.GetStatus(), err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatal(err)
	}
	rr, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
	var services []string
	for _, s := range rr.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	if !strings.Contains(strings.Join(services, " "), "levee.budget.v1.BudgetService") {
		t.Errorf("reflection lists %v, want levee.budget.v1.BudgetService", services)
	}

	page := httpGet(t, "http://"+r.MetricsAddr()+"/")
	for _, s := range []string{"leader:  " + r.Addr(), "verify/tenant-a", "gateway-1/4121"} {
		if !strings.Contains(page, s) {
			t.Errorf("status page lacks %q:\n%s", s, page)
		}
	}
	metrics := httpGet(t, "http://"+r.MetricsAddr()+"/metrics")
	for _, s := range []string{"levee_budgetd_is_leader 1", `levee_budgetd_leases_total{outcome="local"} 1`,
		`levee_budgetd_tokens_granted_total{key="other"} 5`} {
		if !strings.Contains(metrics, s) {
			t.Errorf("/metrics lacks %q", s)
		}
	}
}

// TestInvalidArgument: every malformed request is INVALID_ARGUMENT naming
// the field.
func TestInvalidArgument(t *testing.T) {
	r := budgetdtest.StartReplica(t, etcdtest.StartEtcd(t), nil)
	budgetdtest.WaitLeader(t, leaderWait, r)
	c := r.Client()
	ctx := ctxT(t)

	many := make([]*budgetv1.KeyReport, budgetd.MaxReports+1)
	for i := range many {
		many[i] = report(fmt.Sprintf("k%d", i), 1, 1)
	}
	ok := []*budgetv1.KeyReport{report("verify", 1, 1)}
	for _, tc := range []struct {
		name  string
		req   *budgetv1.LeaseRequest
		field string
	}{
		{"empty client_id", &budgetv1.LeaseRequest{Reports: ok}, "client_id"},
		{"client_id with a space", &budgetv1.LeaseRequest{ClientId: "gateway 1", Reports: ok}, "client_id"},
		{"client_id too long", &budgetv1.LeaseRequest{ClientId: strings.Repeat("a", 129), Reports: ok}, "client_id"},
		{"empty key", &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{report("", 1, 1)}}, "reports[0].key"},
		{"key not ASCII", &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{report("verify", 1, 1), report("vérify", 1, 1)}}, "reports[1].key"},
		{"key too long", &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{report(strings.Repeat("k", 129), 1, 1)}}, "reports[0].key"},
		{"duplicate key", &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{report("verify", 1, 1), report("verify", 1, 1)}}, "reports[1].key"},
		{"too many reports", &budgetv1.LeaseRequest{ClientId: "gw", Reports: many}, "reports:"},
		{"absurd count", &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{report("verify", 1<<50, 1)}}, "reports[0].first_attempts"},
		{"fallback above first", &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{{Key: "verify", FirstAttempts: 5, FallbackFirstAttempts: 6}}}, "reports[0].fallback_first_attempts"},
		{"negative span", &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{{Key: "verify", FirstAttempts: 5, Span: durationpb.New(-time.Second)}}}, "reports[0].span"},
		{"malformed span", &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{{Key: "verify", Span: &durationpb.Duration{Seconds: 1, Nanos: -5}}}}, "reports[0].span"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Lease(ctx, tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.field) {
				t.Errorf("Lease = %v; want INVALID_ARGUMENT naming %s", err, tc.field)
			}
		})
	}
	_, err := c.Status(ctx, &budgetv1.StatusRequest{Key: "no spaces please"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "key") {
		t.Errorf("Status = %v; want INVALID_ARGUMENT naming key", err)
	}
	// 64 reports are fine.
	if _, err := c.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "gw", Reports: many[:budgetd.MaxReports]}); err != nil {
		t.Errorf("Lease with %d reports: %v", budgetd.MaxReports, err)
	}
}

// TestMaxKeys: clients choose keys, so the leader bounds how many it keeps.
func TestMaxKeys(t *testing.T) {
	r := budgetdtest.StartReplica(t, etcdtest.StartEtcd(t), func(c *budgetd.Config) { c.MaxKeys = 2 })
	budgetdtest.WaitLeader(t, leaderWait, r)
	c := r.Client()
	ctx := ctxT(t)
	if _, err := c.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{report("a", 1, 1), report("b", 1, 1)}}); err != nil {
		t.Fatalf("Lease: %v", err)
	}
	_, err := c.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{report("c", 1, 1)}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("third key: %v, want RESOURCE_EXHAUSTED", err)
	}
	if _, err := c.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{report("a", 1, 1)}}); err != nil {
		t.Errorf("known key: %v", err)
	}
}

// dial connects to addr; the connection closes when the test ends.
func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", url, resp.StatusCode, err, b)
	}
	return string(b)
}

// metricValue sums the samples of a counter or gauge whose labels include
// every pair in labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// eventually polls cond every 20 ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// TestForgetIdleClients: with the accounting clock moved past ForgetAfter,
// the owned forget loop drops the silent client, and the key nobody uses
// any more (it has no configuration of its own).
func TestForgetIdleClients(t *testing.T) {
	var offset atomic.Int64
	r := budgetdtest.StartReplica(t, etcdtest.StartEtcd(t), func(c *budgetd.Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	})
	budgetdtest.WaitLeader(t, leaderWait, r)
	ctx := ctxT(t)
	if _, err := r.Client().Lease(ctx, &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{report("verify", 10, 1)}}); err != nil {
		t.Fatal(err)
	}
	reg := r.Server().Registry()
	eventually(t, 5*time.Second, "client counted", func() bool {
		return metricValue(t, reg, "levee_budgetd_clients") == 1
	})
	offset.Store(int64(4 * time.Second)) // ForgetAfter is 3s in tests
	eventually(t, 5*time.Second, "client forgotten", func() bool {
		return metricValue(t, reg, "levee_budgetd_clients") == 0 && metricValue(t, reg, "levee_budgetd_budget_keys") == 0
	})
	st, err := r.Client().Status(ctx, &budgetv1.StatusRequest{})
	if err != nil || len(st.GetBudgets()) != 0 {
		t.Errorf("Status after forgetting = %v, %v; want no budgets", st, err)
	}
}
