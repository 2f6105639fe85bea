package experiment

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/grpctest"
	"github.com/leveehq/levee/lab/drive"
	"github.com/leveehq/levee/pkg/wellknown"
)

// backlogServer is a plain server of one worker: it hashes every call it
// accepted, one at a time, whether or not its caller is still there, as the
// lab's control does.
type backlogServer struct {
	verifyv1.UnimplementedVerifyServiceServer
	service time.Duration
	worker  sync.Mutex
	pending atomic.Int64 // calls accepted and not yet hashed
}

func (s *backlogServer) Verify(ctx context.Context, _ *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	s.pending.Add(1)
	s.worker.Lock()
	time.Sleep(s.service)
	s.worker.Unlock()
	s.pending.Add(-1)
	return &verifyv1.VerifyResponse{Match: true}, nil
}

// The capacity measurement ends by abandoning its callers' calls, and a
// plain server hashes them all the same. The experiment must not start
// while it does: naive clients arriving into that backlog time out and
// retry, and a fleet that would hold the load sticks before its trigger
// (the control did, at 0.7 C with a 150 ms hash, every run). Counted: no
// call is left queued when the measurement returns.
func TestCapacityLeavesTheFleetDrained(t *testing.T) {
	srv := &backlogServer{service: 50 * time.Millisecond}
	addr := grpctest.Serve(t, func(s *grpc.Server) { verifyv1.RegisterVerifyServiceServer(s, srv) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := CapacityConfig{Callers: 8, Measure: time.Second, Deadline: 2 * time.Second, Unloaded: 20}
	res, err := MeasureCapacity(ctx, drive.Target(addr, nil), Request{hash: "stored", password: []byte("pw")}, c)
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.pending.Load(); n != 0 {
		t.Errorf("%d calls were still queued at the server when the capacity measurement returned", n)
	}
	if res.PerSecond < 10 || res.PerSecond > 21 {
		t.Errorf("C = %.1f/s, want about 20/s (one worker, 50 ms a call)", res.PerSecond)
	}
	t.Logf("C = %.1f/s, unloaded p50 %v, p99 %v", res.PerSecond, res.UnloadedP50, res.UnloadedP99)
}

// A plain server queues every call: when the closed loop's callers queue
// more work than the measurement's deadline, calls time out in the queue
// and C reads low (the control's read 9/s where it served 13/s with a
// 150 ms hash). The callers' deadline covers their whole queue on one
// worker instead.
func TestCapacityOfAQueueLongerThanTheDeadline(t *testing.T) {
	srv := &backlogServer{service: 50 * time.Millisecond}
	addr := grpctest.Serve(t, func(s *grpc.Server) { verifyv1.RegisterVerifyServiceServer(s, srv) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// 8 callers queue 400 ms of work, twice the deadline.
	c := CapacityConfig{Callers: 8, Measure: 2 * time.Second, Deadline: 200 * time.Millisecond, Unloaded: 20}
	res, err := MeasureCapacity(ctx, drive.Target(addr, nil), Request{hash: "stored", password: []byte("pw")}, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.PerSecond < 15 {
		t.Errorf("C = %.1f/s, want about 20/s (one worker, 50 ms a call)", res.PerSecond)
	}
	t.Logf("C = %.1f/s, unloaded p50 %v, p99 %v", res.PerSecond, res.UnloadedP50, res.UnloadedP99)
}

// coldServer is a verifier of one worker that is slow until it has hashed
// fill calls, as a fresh verifier is while its resident heap grows to its
// soft limit (every hash faults its array in), and counts one garbage
// collection more from then on, as the verifier's does when its heap
// reaches the limit.
type coldServer struct {
	verifyv1.UnimplementedVerifyServiceServer
	cold, warm time.Duration
	fill       int64
	worker     sync.Mutex
	hashed     atomic.Int64
}

func (s *coldServer) Verify(context.Context, *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	s.worker.Lock()
	defer s.worker.Unlock()
	if s.hashed.Load() < s.fill {
		time.Sleep(s.cold)
	} else {
		time.Sleep(s.warm)
	}
	s.hashed.Add(1)
	return &verifyv1.VerifyResponse{Match: true}, nil
}

// metrics is the server's metrics page: the Go collector's count of
// garbage collections, one at start (the verifier's warm-up collects) and
// two once the heap has filled.
func (s *coldServer) metrics(w http.ResponseWriter, _ *http.Request) {
	n := 1
	if s.hashed.Load() >= s.fill {
		n = 2
	}
	fmt.Fprintf(w, "# TYPE %[1]s summary\n%[1]s_sum 0.001\n%[1]s_count %[2]d\n", wellknown.MetricGoGC, n)
}

// coldFleet serves srv as a fleet of one verifier whose metrics page the
// lab reads.
func coldFleet(t *testing.T, srv *coldServer) *drive.Fleet {
	addr := grpctest.Serve(t, func(s *grpc.Server) { verifyv1.RegisterVerifyServiceServer(s, srv) })
	page := httptest.NewServer(http.HandlerFunc(srv.metrics))
	t.Cleanup(page.Close)
	f := drive.Target(addr, nil)
	f.Members = append(f.Members, &drive.Member{Name: "verifier-1", Role: drive.RoleVerifier, Metrics: page.URL + "/metrics"})
	return f
}

// A fresh verifier hashes slower until its resident heap has grown to its
// soft limit, which the load that follows the measurement never sees: C
// measured in that span read a third to two thirds of what the fleet served
// warm. The closed loop runs until every verifier has collected garbage,
// then measures: here 20 ms calls until 60 are hashed, 5 ms after, and C
// must read the 5 ms worker's.
func TestCapacityIsMeasuredOnceTheVerifiersAreWarm(t *testing.T) {
	srv := &coldServer{cold: 20 * time.Millisecond, warm: 5 * time.Millisecond, fill: 60}
	f := coldFleet(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The unloaded calls and the 200 ms warm-up hash 21 calls: with the
	// warm-up alone, the measured second would be mostly cold calls.
	c := CapacityConfig{Callers: 8, Warmup: 200 * time.Millisecond, WarmLimit: 10 * time.Second, Measure: time.Second,
		Deadline: 2 * time.Second, Unloaded: 10}
	res, err := MeasureCapacity(ctx, f, Request{hash: "stored", password: []byte("pw")}, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Cold != 0 {
		t.Errorf("%d verifiers cold when C was measured, want 0", res.Cold)
	}
	if res.PerSecond < 150 {
		t.Errorf("C = %.1f/s, want about 200/s (one worker, 5 ms a call once warm)", res.PerSecond)
	}
	t.Logf("C = %.1f/s after %v of closed loop", res.PerSecond, res.Warmed)
}

// A verifier that never warms holds the measurement up for WarmLimit at
// most, and is counted as cold.
func TestCapacityWaitsForWarmthAtMostWarmLimit(t *testing.T) {
	srv := &coldServer{cold: 5 * time.Millisecond, warm: 5 * time.Millisecond, fill: 1 << 40}
	f := coldFleet(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := CapacityConfig{Callers: 4, Warmup: 100 * time.Millisecond, WarmLimit: 500 * time.Millisecond, Measure: time.Second,
		Deadline: 2 * time.Second, Unloaded: 10}
	res, err := MeasureCapacity(ctx, f, Request{hash: "stored", password: []byte("pw")}, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.Cold != 1 {
		t.Errorf("%d verifiers cold, want 1", res.Cold)
	}
	if res.Warmed < 600*time.Millisecond || res.Warmed > 3*time.Second {
		t.Errorf("the closed loop warmed for %v, want Warmup + WarmLimit (600 ms) and little more", res.Warmed)
	}
}
