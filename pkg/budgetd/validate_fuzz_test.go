package budgetd

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/pkg/ledger"
)

// FuzzLease: any bytes a client sends as a LeaseRequest are either rejected
// by validateLease or accounted without a panic, a grant above what was
// wanted, or a NaN or infinite figure in the ledger.
func FuzzLease(f *testing.F) {
	seed := func(r *budgetv1.LeaseRequest) {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, int64(time.Second))
	}
	seed(&budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{{Key: "verify", FirstAttempts: 100, Retries: 3, TokensWanted: 5}}})
	seed(&budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{{Key: "verify", FirstAttempts: 1 << 40, FallbackFirstAttempts: 1 << 40, TokensWanted: 1 << 31, Span: durationpb.New(1000 * time.Hour)}}})
	seed(&budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{{Key: "verify", FirstAttempts: 7, Span: durationpb.New(time.Nanosecond)}}})
	f.Fuzz(func(t *testing.T, b []byte, step int64) {
		var req budgetv1.LeaseRequest
		if proto.Unmarshal(b, &req) != nil || validateLease(&req) != nil {
			return
		}
		l := ledger.NewLedger(ledger.DefaultSettings(), 3*time.Second, time.Unix(0, 0))
		now := time.Unix(0, 0)
		for round := range 3 {
			now = now.Add(time.Duration(step%int64(time.Minute)) * time.Duration(round))
			for _, r := range req.GetReports() {
				g := l.Report(req.GetClientId(), ledger.CountsOf(r), r.GetTokensWanted(), now)
				if g.Tokens > r.GetTokensWanted() {
					t.Fatalf("granted %d > wanted %d", g.Tokens, r.GetTokensWanted())
				}
				if m := g.FallbackMinPerSecond; math.IsNaN(m) || math.IsInf(m, 0) || m < 0 {
					t.Fatalf("fallback min per second %v", m)
				}
			}
		}
		st := l.Status(now)
		for _, v := range []float64{st.Tokens, st.FirstPerSecond, st.RetriesPerSecond} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("status figure %v in %+v", v, st)
			}
		}
	})
}
