package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/verifier"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/workpool"
)

// BenchmarkRefusal measures what a request refused at arrival ("queue full",
// RESOURCE_EXHAUSTED) costs the process, in CPU time (getrusage user+sys,
// client and server together: both run in this process) per op:
//
//   - op=submit: workpool.Pool.Submit returning ErrQueueFull, the refusal
//     decision alone.
//   - op=handler: verifier.Server.Verify called directly, without gRPC: the
//     password check, Parse of the stored hash, Submit, the pushback trailer
//     and the drop counter. Not the per-call ORCA load report: the ORCA
//     interceptor builds it after the handler returns.
//   - op=verify: a Verify call over gRPC on 127.0.0.1, refused.
//   - op=health: a grpc.health.v1 Check on the same server and connection:
//     the transport and interceptor baseline that op=verify pays as well.
//
// The gRPC ops run with 1 caller in sequence and with 16 concurrent callers.
// The verifier is made to refuse cheaply and deterministically: one worker
// and one queue slot, the capacity knob's slowdown at 100 so that the worker
// holds one real hash for 99 times its duration again while sleeping, and a
// second request in the queue slot. Every further arrival is "queue full".
func BenchmarkRefusal(b *testing.B) {
	b.Run("op=submit/clients=1", benchSubmitRefused)
	b.Run("op=handler/clients=1", func(b *testing.B) {
		s, req := refusingServer(b)
		// A real call carries a deadline and a server transport stream (the
		// pushback trailer is set on it); give the direct call both.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		ctx = grpc.NewContextWithServerTransportStream(ctx, nopStream{})
		benchSequential(b, func() error {
			_, err := s.Verify(ctx, req)
			return wantCode(err, codes.ResourceExhausted)
		})
	})
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("op=verify/clients=%d", clients), func(b *testing.B) {
			s, req := refusingServer(b)
			client := verifyv1.NewVerifyServiceClient(s.conn)
			benchCalls(b, clients, func(ctx context.Context) error {
				_, err := client.Verify(ctx, req)
				return wantCode(err, codes.ResourceExhausted)
			})
		})
		b.Run(fmt.Sprintf("op=health/clients=%d", clients), func(b *testing.B) {
			s, _ := refusingServer(b)
			client := healthpb.NewHealthClient(s.conn)
			req := &healthpb.HealthCheckRequest{}
			benchCalls(b, clients, func(ctx context.Context) error {
				_, err := client.Check(ctx, req)
				return wantCode(err, codes.OK)
			})
		})
	}
}

// benchSubmitRefused measures Pool.Submit refusing with ErrQueueFull.
func benchSubmitRefused(b *testing.B) {
	pool, err := workpool.New(workpool.Config{
		Workers: 1, QueueCapacity: 1, MaxQueueWait: time.Second, LIFOAfter: 200 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	release := make(chan struct{})
	var held sync.WaitGroup
	b.Cleanup(func() {
		close(release)
		held.Wait()
		pool.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const cost = 200 * time.Millisecond
	hold := func() { <-release }
	held.Go(func() { _, _ = pool.Submit(ctx, cost, 0, hold) }) // runs
	waitFor(b, "a busy worker", func() bool { return pool.Stats().Busy == 1 })
	held.Go(func() { _, _ = pool.Submit(ctx, cost, 0, hold) }) // queued
	waitFor(b, "a queued job", func() bool { return pool.Stats().Queued == 1 })

	noop := func() {}
	benchSequential(b, func() error {
		if _, err := pool.Submit(ctx, cost, 0, noop); err != workpool.ErrQueueFull {
			return fmt.Errorf("Submit = %v, want ErrQueueFull", err)
		}
		return nil
	})
}

// refusingServer starts a verifier that refuses every new Verify with
// "queue full", and returns it with a valid default-policy request.
func refusingServer(b *testing.B) (*server, *verifyv1.VerifyRequest) {
	b.Helper()
	cfg := verifier.DefaultConfig()
	cfg.Workers = 1
	cfg.QueueCapacity = 1
	cfg.EnableCapacityKnob = true
	cfg.Deadline.Max = 10 * time.Minute // the fillers must not expire
	s := startServer(b, cfg)
	admin := verifyv1.NewVerifierAdminServiceClient(s.conn)
	if _, err := admin.SetCapacity(context.Background(), &verifyv1.SetCapacityRequest{Slowdown: 100}); err != nil {
		b.Fatal(err)
	}
	req := &verifyv1.VerifyRequest{EncodedHash: storedHash(b, verify.DefaultPolicy().Params, benchPassword), Password: benchPassword}

	client := verifyv1.NewVerifyServiceClient(s.conn)
	fillCtx, stopFill := context.WithCancel(context.Background())
	var fillers sync.WaitGroup
	// Registered after startServer's: runs first, so the fillers leave
	// before the server closes.
	b.Cleanup(func() {
		stopFill()
		fillers.Wait()
	})
	fill := func() {
		fillers.Go(func() {
			ctx, cancel := context.WithTimeout(fillCtx, 10*time.Minute)
			defer cancel()
			_, _ = client.Verify(ctx, req)
		})
	}
	fill()
	waitFor(b, "the worker to take the first filler", func() bool { return gauge(b, s, "levee_verifier_inflight") == 1 })
	waitQuiet(b) // its hash is done; the worker now sleeps out the slowdown
	fill()
	waitFor(b, "the second filler to be queued", func() bool { return gauge(b, s, "levee_verifier_queue_length") == 1 })

	var trailer metadata.MD
	_, err := client.Verify(context.Background(), req, grpc.Trailer(&trailer))
	if err := wantCode(err, codes.ResourceExhausted); err != nil {
		b.Fatalf("probe: %v", err)
	}
	if got := trailer.Get(callmeta.PushbackKey); len(got) != 1 || got[0] != "-1" {
		b.Fatalf("probe: trailer %s = %q, want [-1]", callmeta.PushbackKey, got)
	}
	return s, req
}

// benchCalls runs call b.N times from clients concurrent callers and
// reports CPU per call.
func benchCalls(b *testing.B, clients int, call func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if clients == 1 {
		benchSequential(b, func() error { return call(ctx) })
		return
	}
	var failed atomic.Int64
	var firstErr atomic.Value
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((clients + procs - 1) / procs)
	b.ReportAllocs()
	settle()
	b.ResetTimer()
	start := rusage()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := call(ctx); err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		}
	})
	b.StopTimer()
	u := rusage().sub(start)
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d calls: %v", n, b.N, firstErr.Load())
	}
	reportCPU(b, u)
}

// benchSequential runs op in a b.Loop and reports CPU per op.
func benchSequential(b *testing.B, op func() error) {
	b.ReportAllocs()
	var failed int
	var firstErr error
	settle()
	start := rusage()
	for b.Loop() {
		if err := op(); err != nil {
			if failed++; firstErr == nil {
				firstErr = err
			}
		}
	}
	u := rusage().sub(start)
	if failed > 0 {
		b.Fatalf("%d of %d ops: %v", failed, b.N, firstErr)
	}
	reportCPU(b, u)
}

// reportCPU reports CPU, page faults and context switches per op: a thread
// that sleeps and is woken again costs tens of µs of CPU on a virtual
// machine, which ctxsw/op makes visible.
func reportCPU(b *testing.B, u usage) {
	n := float64(b.N)
	b.ReportMetric(float64(u.cpu().Nanoseconds())/n, "cpu-ns/op")
	b.ReportMetric(float64(u.minflt)/n, "faults/op")
	b.ReportMetric(float64(u.csw)/n, "ctxsw/op")
	warnForeignCPU(b, u)
}

func wantCode(err error, want codes.Code) error {
	if got := status.Code(err); got != want {
		return fmt.Errorf("code %v, want %v (err %v)", got, want, err)
	}
	return nil
}

// gauge reads an unlabelled gauge from the verifier's registry.
func gauge(b *testing.B, s *server, name string) float64 {
	b.Helper()
	mfs, err := s.Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && mf.GetType() == dto.MetricType_GAUGE && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	b.Fatalf("no gauge %s", name)
	return 0
}

func waitFor(b *testing.B, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitQuiet waits until the process uses less than 10% of a core over 50 ms:
// no hash is running any more.
func waitQuiet(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		before := rusage()
		time.Sleep(50 * time.Millisecond)
		if rusage().sub(before).cpu() < 5*time.Millisecond {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("timed out waiting for the process to go quiet")
		}
	}
}

// nopStream stands in for the server transport stream of a gRPC call, so
// that grpc.SetTrailer succeeds on a direct handler call as it would on a
// real one (it would otherwise format an error naming the context).
type nopStream struct{}

func (nopStream) Method() string                  { return verifyv1.VerifyService_Verify_FullMethodName }
func (nopStream) SetHeader(metadata.MD) error     { return nil }
func (nopStream) SendHeader(metadata.MD) error    { return nil }
func (nopStream) SetTrailer(md metadata.MD) error { return nil }
