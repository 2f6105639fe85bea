package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/argon2"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/verifier"
	"github.com/leveehq/levee/pkg/verify"
)

// clientsPerWorker is how many concurrent callers per worker keep the
// verifier's queue from ever emptying: while a worker hashes, another caller's
// request is already queued behind it, so no worker waits for a round trip.
const clientsPerWorker = 4

var benchPassword = []byte("benchmark password")

// BenchmarkSaturation measures hashes per second with every core busy, in
// process and through a verifier over gRPC, at m=64 MiB, t=3 and p=4 (the
// default policy) or p=1. Use a fixed -benchtime=Nx: one op is one hash.
func BenchmarkSaturation(b *testing.B) {
	for _, lanes := range []uint8{4, 1} {
		params := verify.Params{Memory: 64 << 10, Iterations: 3, Parallelism: lanes}
		b.Run(fmt.Sprintf("p=%d", lanes), func(b *testing.B) {
			b.Run("via=inprocess", func(b *testing.B) { saturateInProcess(b, params) })
			b.Run("via=grpc", func(b *testing.B) { saturateGRPC(b, params) })
		})
	}
}

// saturateInProcess runs argon2.IDKey on GOMAXPROCS goroutines: the ceiling
// the verifier is measured against.
func saturateInProcess(b *testing.B, p verify.Params) {
	salt := []byte("0123456789abcdef")
	// Warm up: one hash per goroutine, so that whatever can stay resident
	// between hashes (under the heap mode in force) is resident.
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() { argon2.IDKey(benchPassword, salt, p.Iterations, p.Memory, p.Parallelism, 32) })
	}
	wg.Wait()

	b.ResetTimer()
	start := rusage()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			argon2.IDKey(benchPassword, salt, p.Iterations, p.Memory, p.Parallelism, 32)
		}
	})
	b.StopTimer()
	reportHashes(b, rusage().sub(start))
}

// saturateGRPC sends Verify calls to a real verifier with one worker per
// core from clientsPerWorker callers per worker, all in this process.
func saturateGRPC(b *testing.B, p verify.Params) {
	cfg := verifier.DefaultConfig()
	cfg.Workers = runtime.GOMAXPROCS(0)
	cfg.Policy.Params = p // warm-up hashes what the calls will hash
	// Long waits and deadlines: every call must be hashed, none refused.
	cfg.MaxQueueWait = time.Minute
	cfg.Deadline.Max = time.Minute
	s := startServer(b, cfg)
	client := verifyv1.NewVerifyServiceClient(s.conn)
	req := &verifyv1.VerifyRequest{EncodedHash: storedHash(b, p, benchPassword), Password: benchPassword}

	var failed atomic.Int64
	var firstErr atomic.Value
	b.SetParallelism(clientsPerWorker)
	b.ResetTimer()
	start := rusage()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			resp, err := client.Verify(ctx, req)
			cancel()
			if err != nil || !resp.GetMatch() {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Sprintf("match=%v err=%v", resp.GetMatch(), err))
			}
		}
	})
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d calls did not verify; first: %v", n, b.N, firstErr.Load())
	}
	reportHashes(b, rusage().sub(start))
}

// reportHashes reports the rate and what each hash cost the whole process:
// CPU (user+sys), the sys share (page faults show up there) and minor faults.
func reportHashes(b *testing.B, u usage) {
	n := float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "hashes/s")
	b.ReportMetric(u.cpu().Seconds()*1e3/n, "cpu-ms/hash")
	b.ReportMetric(u.sys.Seconds()*1e3/n, "sys-ms/hash")
	b.ReportMetric(float64(u.minflt)/n, "faults/hash")
	warnForeignCPU(b, u)
}
