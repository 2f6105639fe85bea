package experiment

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/grpctest"
	"github.com/leveehq/levee/lab/drive"
	"github.com/leveehq/levee/lab/observe"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/verify"
)

func TestParseTenants(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Tenant
	}{
		{"a:0.3", []Tenant{{Name: "a", Load: 0.3, Kind: Naive, Cost: 1}}},
		{"a:0.3:naive,b:3:naive:cost=5", []Tenant{{Name: "a", Load: 0.3, Kind: Naive, Cost: 1}, {Name: "b", Load: 3, Kind: Naive, Cost: 5}}},
		{" shop.eu-1:1:levee , b_2:10:cost=2 ", []Tenant{{Name: "shop.eu-1", Load: 1, Kind: Levee, Cost: 1}, {Name: "b_2", Load: 10, Kind: Naive, Cost: 2}}},
		{"h:0.5:human,n:100:nodeadline", []Tenant{{Name: "h", Load: 0.5, Kind: Human, Cost: 1}, {Name: "n", Load: 100, Kind: NoDeadline, Cost: 1}}},
	} {
		got, err := ParseTenants(tc.in)
		if err != nil {
			t.Errorf("ParseTenants(%q): %v", tc.in, err)
			continue
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("ParseTenants(%q) (-want +got):\n%s", tc.in, d)
		}
		if again, err := ParseTenants(FormatTenants(got)); err != nil || !cmp.Equal(again, got) {
			t.Errorf("FormatTenants(%v) = %q does not read back: %v, %v", got, FormatTenants(got), again, err)
		}
	}
	for _, tc := range []struct{ in, why string }{
		{"", "empty"},
		{"a", "name:load"},
		{"a:", "load"},
		{":1", "tenant name"},
		{"a b:1", "tenant name"},
		{"a:0", "load"},
		{"a:-1", "load"},
		{"a:101", "load"},
		{"a:NaN", "load"},
		{"a:Inf", "load"},
		{"a:1,a:2", "named twice"},
		{"a:1:robot", "client kind"},
		{"a:1:naive:levee", "client kind"},
		{"a:1:cost=5:naive", "client kind"},
		{"a:1:cost=0", "cost"},
		{"a:1:cost=65", "cost"},
		{"a:1:cost=1.5", "cost"},
		{"a:1:cost=2:cost=3", "cost"},
		{"a:1:naive:cost=2:x", "name:load"},
		{"a:1,", "entry"},
		{strings.Repeat("x", 65) + ":1", "tenant name"},
		{strings.Repeat("t:1,", 16) + "u:1", "named twice"},
	} {
		if got, err := ParseTenants(tc.in); err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("ParseTenants(%q) = %v, %v; want an error about %s", tc.in, got, err, tc.why)
		}
	}
	many := make([]string, MaxTenants+1)
	for i := range many {
		many[i] = string(rune('a'+i)) + ":1"
	}
	if _, err := ParseTenants(strings.Join(many, ",")); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("%d tenants: err = %v", len(many), err)
	}
	sets, err := ParseTenantSets("a:0.3,b:3;a:0.3,b:10")
	if err != nil || len(sets) != 2 || sets[1][1].Load != 10 {
		t.Errorf("ParseTenantSets: %v, %v", sets, err)
	}
	if _, err := ParseTenantSets("a:0.3;"); err == nil {
		t.Error("ParseTenantSets accepted an empty set")
	}
}

// FuzzParseTenants: the tenants parser never panics, what it accepts
// validates and reads back the same from its formatting.
func FuzzParseTenants(f *testing.F) {
	for _, s := range []string{"a:0.3:naive,b:3:naive:cost=5", "a:1", "a:1:cost=64", ",", ":", "a:b:c:d:e", "a:1e2", "a:0x1p-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ParseTenants(s)
		if err != nil {
			return
		}
		c := DefaultClients()
		c.Tenants = ts
		if err := c.Validate(); err != nil {
			t.Errorf("ParseTenants(%q) = %v, which does not validate: %v", s, ts, err)
		}
		again, err := ParseTenants(FormatTenants(ts))
		if err != nil || !cmp.Equal(again, ts) {
			t.Errorf("ParseTenants(%q) = %v formats as %q, which reads back as %v, %v", s, ts, FormatTenants(ts), again, err)
		}
	})
}

// tenantServer answers every call of tenant "a" and refuses every call of
// any other tenant, counting the calls each tenant named in levee-tenant
// and the stored hashes each sent.
type tenantServer struct {
	verifyv1.UnimplementedVerifyServiceServer
	mu     sync.Mutex
	calls  map[string]int
	hashes map[string]map[string]bool
}

func (s *tenantServer) Verify(ctx context.Context, req *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	f, err := callmeta.Asked(ctx)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	s.mu.Lock()
	s.calls[f.Tenant]++
	if s.hashes[f.Tenant] == nil {
		s.hashes[f.Tenant] = map[string]bool{}
	}
	s.hashes[f.Tenant][req.GetEncodedHash()] = true
	s.mu.Unlock()
	if f.Tenant != "a" {
		return nil, status.Error(codes.ResourceExhausted, "over its share")
	}
	return &verifyv1.VerifyResponse{Match: true}, nil
}

// Each tenant's calls name it, carry its own stored hash, and are counted
// on their own: what the server saw of each tenant is what the series
// says, and the verdicts follow from it. Counted, not timed.
func TestTenantsNameThemselvesAndAreCountedApart(t *testing.T) {
	srv := &tenantServer{calls: map[string]int{}, hashes: map[string]map[string]bool{}}
	addr := grpctest.Serve(t, func(s *grpc.Server) { verifyv1.RegisterVerifyServiceServer(s, srv) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q, err := NewRequest(verify.Params{Memory: 64, Iterations: 1, Parallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	cl := DefaultClients()
	cl.Tenants = []Tenant{{Name: "a", Load: 0.2, Kind: Naive, Cost: 1}, {Name: "b", Load: 0.8, Kind: Naive, Cost: 5}}
	e := Spec{Load: 1, Baseline: 2 * time.Second, Trigger: Trigger{Kind: None}, Seed: 7}
	res, err := Run(ctx, &drive.Fleet{Name: "fake", Target: addr}, cl, q, Capacity{PerSecond: 200}, e, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tenants) != 2 {
		t.Fatalf("%d tenant verdicts, want 2", len(res.Tenants))
	}
	var offered [2]int64
	var attempts [2]int64
	for sec := range res.Series.Len() {
		for i := range 2 {
			offered[i] += res.Series.Tenant(sec, i).Offered.Load()
			attempts[i] += res.Series.Tenant(sec, i).Attempts.Load()
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.calls[""] != 0 {
		t.Errorf("%d calls named no tenant", srv.calls[""])
	}
	// a is answered at once: one attempt each; b is refused three times.
	if int64(srv.calls["a"]) != offered[0] || attempts[0] != offered[0] {
		t.Errorf("tenant a: %d logical requests, %d attempts recorded, %d calls at the server; want all equal", offered[0], attempts[0], srv.calls["a"])
	}
	if int64(srv.calls["b"]) != 3*offered[1] || attempts[1] != 3*offered[1] {
		t.Errorf("tenant b: %d logical requests, %d attempts recorded, %d calls at the server; want 3 attempts each", offered[1], attempts[1], srv.calls["b"])
	}
	if r := float64(offered[1]) / float64(offered[0]+offered[1]); r < 0.7 || r > 0.9 {
		t.Errorf("tenant b offered %.2f of the arrivals, want about 0.8", r)
	}
	if len(srv.hashes["a"]) != 1 || len(srv.hashes["b"]) != 1 {
		t.Fatalf("stored hashes by tenant: %v; want one each", srv.hashes)
	}
	for h := range srv.hashes["b"] {
		if !strings.Contains(h, "m=320,") {
			t.Errorf("tenant b's stored hash %q: want m=320 (64 KiB × cost 5)", h)
		}
	}
	a, b := res.Tenants[0], res.Tenants[1]
	if a.ServedFraction != 1 || b.ServedFraction != 0 || !res.QuietServed() {
		t.Errorf("served: a %.3f, b %.3f, quiet served %v; want 1, 0, true", a.ServedFraction, b.ServedFraction, res.QuietServed())
	}
	// Successes count by the second they ended, which on a loaded machine
	// can fall after the short baseline: the shares are judged over the
	// whole series.
	all := Window{0, res.Series.Len()}
	whole := JudgeTenants(res.Series, cl.Tenants, all, Window{all.To, all.To}, Window{all.To, all.To}, 0)
	if whole[0].WorkShare != 1 || whole[1].WorkShare != 0 {
		t.Errorf("work shares over the run: a %.3f, b %.3f; want 1, 0 (b served nothing)", whole[0].WorkShare, whole[1].WorkShare)
	}
	if b.Attempts[observe.CodeResourceExhausted] == 0 || b.Attempts[observe.CodeOK] != 0 || a.Attempts[observe.CodeResourceExhausted] != 0 {
		t.Errorf("attempts by code: a %v, b %v; want b's refused and none of a's", a.Attempts, b.Attempts)
	}
}

// The tenant checks judge what the issue asks (docs/lab.md, "Tenants"):
// the quietest tenant served at 99 %, goodput at 0.9 C, hashing shares
// within 5 % of equal, the verifiers' count preferred to the lab's estimate.
func TestTenantChecks(t *testing.T) {
	nan := math.NaN()
	tv := func(name string, load, served, est, ver float64) TenantVerdict {
		return TenantVerdict{Tenant: Tenant{Name: name, Load: load, Kind: Naive, Cost: 1}, ServedFraction: served, WorkShare: est, VerifierWorkShare: ver}
	}
	for _, tc := range []struct {
		name               string
		goodput            float64 // × C
		tenants            []TenantVerdict
		quiet, kept, equal bool
		worst              float64
		fromVerifiers      bool
	}{
		{"the quiet tenant served, the flood held", 0.95, []TenantVerdict{tv("a", 0.3, 0.995, 0.3, nan), tv("b", 3, 0.2, 0.7, nan)},
			true, true, false, 0.4, false},
		{"the quiet tenant is the one with less load, wherever it is listed", 0.95, []TenantVerdict{tv("b", 3, 0.2, 0.5, nan), tv("a", 0.3, 0.98, 0.5, nan)},
			false, true, true, 0, false},
		{"goodput short of 0.9 C", 0.89, []TenantVerdict{tv("a", 0.3, 1, 0.5, nan), tv("b", 3, 0.1, 0.5, nan)},
			true, false, true, 0, false},
		{"hashing shares within 5 % of a half", 1, []TenantVerdict{tv("a", 1, 0.5, 0.7, 0.524), tv("b", 1, 0.1, 0.3, 0.476)},
			false, true, true, 0.048, true},
		{"hashing shares 6 % off", 1, []TenantVerdict{tv("a", 1, 0.5, 0.5, 0.53), tv("b", 1, 0.1, 0.5, 0.47)},
			false, true, false, 0.06, true},
		{"one tenant without the verifiers' count: the estimate for all", 1, []TenantVerdict{tv("a", 1, 0.5, 0.5, 0.9), tv("b", 1, 0.1, 0.5, nan)},
			false, true, true, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Result{Capacity: Capacity{PerSecond: 100}, Verdict: Verdict{Baseline: 100 * tc.goodput}, Tenants: tc.tenants}
			worst, equal := r.EqualHashing()
			_, fromVerifiers := r.HashingShares()
			if r.QuietServed() != tc.quiet || r.GoodputKept() != tc.kept || equal != tc.equal || math.Abs(worst-tc.worst) > 1e-9 ||
				fromVerifiers != tc.fromVerifiers {
				t.Errorf("quiet served %v, goodput kept %v, equal %v (worst %.3f, verifiers' count %v); want %v, %v, %v (%.3f, %v)",
					r.QuietServed(), r.GoodputKept(), equal, worst, fromVerifiers, tc.quiet, tc.kept, tc.equal, tc.worst, tc.fromVerifiers)
			}
		})
	}
	if (&Result{Capacity: Capacity{PerSecond: 100}}).QuietServed() {
		t.Error("a run without tenants passed the quiet tenant's check")
	}
}
