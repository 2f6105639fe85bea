package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/budget/budgettest"
	"github.com/leveehq/levee/pkg/client"
	"github.com/leveehq/levee/pkg/ledger"
)

var _ client.Budget = (*budget.Budget)(nil)

// TestWithFleetBudget runs the client on a real budget.Budget leased from a
// budgettest server (the real ledger): the retries it sends are exactly the
// tokens leased, and budgetd is told every first attempt and retry.
func TestWithFleetBudget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	clock := budgettest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv := budgettest.NewServer(budgettest.Config{Now: clock.Now, ValidFor: 10 * time.Second})
	srv.SetSettings("verify", ledger.Settings{Ratio: 0.1, Burst: 1000, MinPerSecond: 100})
	if _, err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	clock.Advance(10 * time.Second) // the ledger earns its burst

	bcfg := budget.DefaultConfig()
	bcfg.Target = srv.Addr()
	bcfg.Keys = []string{"verify"}
	bcfg.Clock = clock
	bcfg.TokensHeadroom = 20 // the first lease: 20 tokens
	bcfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	bc, err := budget.New(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	// The refresher's own first lease, then ours (refreshes are serialised,
	// so ours is applied last); after that the refresher waits on the fake
	// clock, and the lease is not topped up behind the test's back.
	if err := srv.WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := bc.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := bc.Key("verify")
	if err != nil {
		t.Fatal(err)
	}
	if st := b.Status(); st.Mode != budget.Shared || st.LeaseTokens != 20 {
		t.Fatalf("budget %+v, want a shared lease of 20", st)
	}

	v := &verifier{script: always(codes.Unavailable)}
	cc := serve(t, v)
	reg := prometheus.NewRegistry()
	c := newClient(t, cc, testConfig(b, &sleeper{}, reg))
	exhausted := 0
	for range 100 {
		_, err := c.Verify(ctx, "h", []byte("pw"))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("Verify = %v, want UNAVAILABLE", err)
		}
		if errors.Is(err, client.ErrBudgetExhausted) {
			exhausted++
		}
	}
	if got := len(v.seen()); got != 120 {
		t.Errorf("server saw %d attempts, want 100 first + the 20 leased retries", got)
	}
	if exhausted != 90 {
		t.Errorf("%d calls ended on an empty budget, want 90 (10 used two tokens each)", exhausted)
	}

	if err := bc.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if led := srv.Ledger("verify"); led.FirstTotal != 100 || led.RetriesTotal != 20 {
		t.Errorf("budgetd saw %d first attempts and %d retries, want 100 and 20", led.FirstTotal, led.RetriesTotal)
	}
}
