package budgetd_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
)

func leaseVia(ctx context.Context, r *budgetdtest.Replica, client string) (*budgetv1.LeaseResponse, error) {
	return r.Client().Lease(ctx, &budgetv1.LeaseRequest{ClientId: client, Reports: []*budgetv1.KeyReport{report("verify", 50, 2)}})
}

// watchLeaders samples which replicas lead every 10 ms until stop is
// closed, and returns the number of changes seen.
func watchLeaders(stop <-chan struct{}, replicas ...*budgetdtest.Replica) (changes func() int) {
	var mu sync.Mutex
	n := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		last := make([]bool, len(replicas))
		for i, r := range replicas {
			last[i] = r.IsLeader()
		}
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for i, r := range replicas {
				if l := r.IsLeader(); l != last[i] {
					last[i] = l
					mu.Lock()
					n++
					mu.Unlock()
				}
			}
		}
	})
	return func() int {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// TestFailover: with two replicas, the follower forwards to the leader;
// leadership holds still while etcd is healthy; when the leader stops it
// resigns and the follower takes over within moments, granting again.
func TestFailover(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	r1 := budgetdtest.StartReplica(t, etcd, nil)
	budgetdtest.WaitLeader(t, leaderWait, r1)
	r2 := budgetdtest.StartReplica(t, etcd, nil)
	ctx := ctxT(t)

	// The follower forwards to the leader once it has seen it.
	var resp *budgetv1.LeaseResponse
	eventually(t, 5*time.Second, "follower forwards", func() bool {
		var err error
		resp, err = leaseVia(ctx, r2, "gw-2")
		return err == nil
	})
	if resp.GetLeader() != r1.Addr() {
		t.Errorf("forwarded lease came from %q, want the leader %q", resp.GetLeader(), r1.Addr())
	}
	if got := metricValue(t, r2.Server().Registry(), "levee_budgetd_forwarded_total", "rpc", "lease", "result", "ok"); got < 1 {
		t.Errorf("follower forwarded_total{lease,ok} = %v, want ≥ 1", got)
	}
	st, err := r2.Client().Status(ctx, &budgetv1.StatusRequest{Key: "verify"})
	if err != nil || st.GetLeader() != r1.Addr() || len(st.GetBudgets()[0].GetClients()) != 1 {
		t.Errorf("Status via the follower = %v, %v; want the leader's view with one client", st, err)
	}
	h, err := healthpb.NewHealthClient(dial(t, r2.Addr())).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("follower health = %v, %v; want SERVING (it can forward)", h.GetStatus(), err)
	}

	// No flapping while etcd is healthy: several session renewals (TTL/3
	// each) pass without a leadership change. Changes are counted by the
	// replicas themselves (elections won, sessions lost), so that a test
	// machine too busy to sample does not miss one.
	counts := func() [4]float64 {
		return [4]float64{
			metricValue(t, r1.Server().Registry(), "levee_budgetd_leadership_acquired_total"),
			metricValue(t, r2.Server().Registry(), "levee_budgetd_leadership_acquired_total"),
			metricValue(t, r1.Server().Registry(), "levee_budgetd_etcd_session_losses_total"),
			metricValue(t, r2.Server().Registry(), "levee_budgetd_etcd_session_losses_total"),
		}
	}
	before := counts()
	stop := make(chan struct{})
	changes := watchLeaders(stop, r1, r2)
	time.Sleep(3 * time.Second)
	close(stop)
	if after := counts(); after != before || after != [4]float64{1, 0, 0, 0} {
		t.Errorf("elections won r1, r2 and sessions lost r1, r2: %v before, %v after 3s with etcd healthy; want [1 0 0 0] both", before, after)
	}
	t.Logf("IsLeader changes sampled every 10ms over 3s: %d", changes())
	if !r1.IsLeader() || r2.IsLeader() {
		t.Fatalf("leaders: r1 %v, r2 %v; want r1 only", r1.IsLeader(), r2.IsLeader())
	}

	// The leader stops: it resigns, the follower wins at once.
	start := time.Now()
	r1.Stop()
	stopped := time.Since(start)
	took := eventually(t, 10*time.Second, "follower takes over", r2.IsLeader)
	t.Logf("leader stopped in %v; follower leading %v later", stopped, took)
	if took > 2*time.Second {
		t.Errorf("takeover took %v; a resigning leader should be replaced within a second", took)
	}
	resp, err = leaseVia(ctx, r2, "gw-2")
	if err != nil || resp.GetLeader() != r2.Addr() {
		t.Fatalf("Lease after failover = %v, %v; want a grant from %s", resp, err, r2.Addr())
	}
	// A new leader starts empty: its first grant is only what this report
	// earned (50 × 0.1 = 5 wanted 2), and the Status totals start again.
	st, err = r2.Client().Status(ctx, &budgetv1.StatusRequest{Key: "verify"})
	if err != nil || st.GetBudgets()[0].GetFirstAttemptsTotal() != 50 {
		t.Errorf("new leader's Status = %v, %v; want totals since it took over (50 first attempts)", st, err)
	}
}

// TestEtcdLost: when etcd disappears the leader stops granting
// (UNAVAILABLE, so clients fall back locally) and steps down; when etcd
// returns a leader is elected again and grants resume, on either replica.
func TestEtcdLost(t *testing.T) {
	etcd := etcdtest.NewEtcd(t)
	r1 := budgetdtest.StartReplica(t, etcd.Endpoints(), nil)
	r2 := budgetdtest.StartReplica(t, etcd.Endpoints(), nil)
	leader := budgetdtest.WaitLeader(t, leaderWait, r1, r2)
	follower := r2
	if leader == r2 {
		follower = r1
	}
	ctx := ctxT(t)
	eventually(t, 5*time.Second, "follower forwards", func() bool {
		_, err := leaseVia(ctx, follower, "gw-f")
		return err == nil
	})

	start := time.Now()
	etcd.Stop()
	t.Logf("etcd stopped in %v", time.Since(start))
	start = time.Now()
	eventually(t, 10*time.Second, "leader refuses", func() bool {
		_, err := leaseVia(ctx, leader, "gw-l")
		return status.Code(err) == codes.Unavailable
	})
	refused := time.Since(start)
	eventually(t, 10*time.Second, "leader steps down", func() bool {
		return metricValue(t, leader.Server().Registry(), "levee_budgetd_etcd_session_losses_total") >= 1 &&
			metricValue(t, leader.Server().Registry(), "levee_budgetd_is_leader") == 0
	})
	t.Logf("without etcd: leader refused grants after %v, stepped down after %v", refused, time.Since(start))
	if r1.IsLeader() || r2.IsLeader() {
		t.Errorf("a replica leads without etcd")
	}
	for _, r := range []*budgetdtest.Replica{leader, follower} {
		if _, err := leaseVia(ctx, r, "gw-x"); status.Code(err) != codes.Unavailable {
			t.Errorf("Lease via %s without etcd: %v, want UNAVAILABLE", r.Addr(), err)
		}
	}

	start = time.Now()
	etcd.Restart()
	t.Logf("etcd restarted in %v", time.Since(start))
	start = time.Now()
	newLeader := budgetdtest.WaitLeader(t, leaderWait, r1, r2)
	t.Logf("leader elected %v after etcd returned", time.Since(start))
	for _, r := range []*budgetdtest.Replica{r1, r2} {
		eventually(t, 10*time.Second, "grants resume via "+r.Addr(), func() bool {
			resp, err := leaseVia(ctx, r, "gw-after")
			return err == nil && resp.GetLeader() == newLeader.Addr()
		})
	}
}

// TestLeaderFence: a leader cut off from etcd stops granting before etcd
// could expire its session and let another replica win, that is within
// ElectionTTL of the last answer etcd sent it (counted at the proxy in
// front of etcd, so at or before the leader read it). It does not wait for
// its etcd client to notice the session gone, which happens a TTL or more
// after that answer, when a new leader may already be granting. A single
// replica, so that every answer through the proxy is its own.
func TestLeaderFence(t *testing.T) {
	etcd := etcdtest.NewEtcd(t)
	var ttl time.Duration
	r := budgetdtest.StartReplica(t, etcd.Endpoints(), func(c *budgetd.Config) { ttl = c.ElectionTTL })
	budgetdtest.WaitLeader(t, leaderWait, r)
	ctx := ctxT(t)
	if _, err := leaseVia(ctx, r, "gw"); err != nil {
		t.Fatalf("Lease from the leader: %v", err)
	}
	time.Sleep(ttl) // a few renewals
	etcd.Stop()
	last := etcd.LastAnswer()
	var refused time.Time
	for deadline := time.Now().Add(3 * ttl); refused.IsZero(); time.Sleep(5 * time.Millisecond) {
		_, err := leaseVia(ctx, r, "gw")
		switch {
		case status.Code(err) == codes.Unavailable:
			refused = time.Now()
		case err != nil:
			t.Fatalf("Lease without etcd: %v, want a grant or UNAVAILABLE", err)
		case time.Now().After(deadline):
			t.Fatalf("the leader still grants %v after etcd went away", 3*ttl)
		}
	}
	after := refused.Sub(last)
	t.Logf("granting stopped %v after etcd's last answer (session TTL %v)", after, ttl)
	// Leave etcd's own expiry check and a new leader's election some room:
	// a grant after ttl-100ms could overlap a successor's.
	if after > ttl-100*time.Millisecond {
		t.Errorf("the leader granted for %v after etcd's last answer; it must stop well within the session TTL %v", after, ttl)
	}
}

// TestStopWithoutEtcd: replicas that lost etcd still stop promptly (a
// campaign interrupted by the loss waits for etcd; shutdown does not).
func TestStopWithoutEtcd(t *testing.T) {
	etcd := etcdtest.NewEtcd(t)
	r1 := budgetdtest.StartReplica(t, etcd.Endpoints(), nil)
	r2 := budgetdtest.StartReplica(t, etcd.Endpoints(), nil)
	leader := budgetdtest.WaitLeader(t, leaderWait, r1, r2)
	follower := r2
	if leader == r2 {
		follower = r1
	}
	ctx := ctxT(t)
	eventually(t, 5*time.Second, "follower campaigns and forwards", func() bool {
		_, err := leaseVia(ctx, follower, "gw-f")
		return err == nil
	})
	etcd.Stop()
	for _, r := range []*budgetdtest.Replica{r1, r2} {
		eventually(t, 10*time.Second, "session lost", func() bool {
			return metricValue(t, r.Server().Registry(), "levee_budgetd_etcd_session_losses_total") >= 1
		})
	}
	for _, r := range []*budgetdtest.Replica{r1, r2} {
		start := time.Now()
		r.Stop()
		took := time.Since(start)
		t.Logf("replica stopped in %v without etcd", took)
		if took > 8*time.Second {
			t.Errorf("replica took %v to stop without etcd", took)
		}
	}
}
