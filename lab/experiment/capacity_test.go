package experiment

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/grpctest"
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
	res, err := MeasureCapacity(ctx, addr, nil, Request{hash: "stored", password: []byte("pw")}, c)
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
	res, err := MeasureCapacity(ctx, addr, nil, Request{hash: "stored", password: []byte("pw")}, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.PerSecond < 15 {
		t.Errorf("C = %.1f/s, want about 20/s (one worker, 50 ms a call)", res.PerSecond)
	}
	t.Logf("C = %.1f/s, unloaded p50 %v, p99 %v", res.PerSecond, res.UnloadedP50, res.UnloadedP99)
}
