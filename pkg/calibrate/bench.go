package calibrate

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leveehq/levee/pkg/verify"
)

// Bench measures hashing under p with concurrency hashes in flight: each of
// concurrency workers first runs warmup unmeasured hashes, then all of them
// hash back to back until n hashes were measured in total. It returns at
// once with ctx's error when ctx is done (a hash already started finishes
// first).
type Bench func(ctx context.Context, p verify.Params, concurrency, warmup, n int) (Sample, error)

// Sample is what a Bench measured.
type Sample struct {
	// Latencies holds one duration per measured hash.
	Latencies []time.Duration
	// Elapsed is the wall time from the first measured hash's start to the
	// last one's end, for throughput.
	Elapsed time.Duration
}

// Argon2Bench is the Bench that hashes for real, through verify's
// HashPassword, the code path of the verifier's Hash call (Verify derives
// the same key), with one goroutine per worker.
//
// What it measures depends on the Go runtime's memory settings: Argon2
// allocates its m KiB array per hash, and a hash that has to fault fresh
// pages in is much slower than one reusing a freed array. Run it under the
// settings the verifier uses (residentheap.Keep) for figures that
// hold in production.
func Argon2Bench(ctx context.Context, p verify.Params, concurrency, warmup, n int) (Sample, error) {
	lim := verify.DefaultLimits()
	lim.MaxMemoryKiB = max(lim.MaxMemoryKiB, p.Memory)
	lim.MaxIterations = max(lim.MaxIterations, p.Iterations)
	lim.MaxParallelism = max(lim.MaxParallelism, p.Parallelism)
	pol := verify.DefaultPolicy()
	pol.Params = p
	v, err := verify.New(pol, lim)
	if err != nil {
		return Sample{}, fmt.Errorf("bench: %w", err)
	}
	password := []byte("calibrate: correct horse battery staple")
	hash := func() error {
		_, err := v.HashPassword(password, nil)
		return err
	}

	per := (n + concurrency - 1) / concurrency
	lat := make([][]time.Duration, concurrency)
	errs := make([]error, concurrency)
	var warm, done sync.WaitGroup
	start := make(chan struct{})
	var began time.Time
	for w := range concurrency {
		warm.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			for range warmup {
				if errs[w] = ctx.Err(); errs[w] == nil {
					errs[w] = hash()
				}
				if errs[w] != nil {
					break
				}
			}
			warm.Done()
			<-start
			if errs[w] != nil {
				return
			}
			for range per {
				if errs[w] = ctx.Err(); errs[w] != nil {
					return
				}
				t0 := time.Now()
				if errs[w] = hash(); errs[w] != nil {
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	warm.Wait()
	began = time.Now()
	close(start)
	done.Wait()
	elapsed := time.Since(began)
	s := Sample{Elapsed: elapsed}
	for w := range concurrency {
		if errs[w] != nil {
			return Sample{}, errs[w]
		}
		s.Latencies = append(s.Latencies, lat[w]...)
	}
	return s, nil
}
