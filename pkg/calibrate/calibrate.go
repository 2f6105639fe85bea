package calibrate

import (
	"context"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/leveehq/levee/pkg/bytesize"
	"github.com/leveehq/levee/pkg/residentheap"
	"github.com/leveehq/levee/pkg/verify"
)

// Result is a calibrated policy and what was measured at it.
type Result struct {
	// Policy is the verifier's hashing policy: the calibrated Params with the
	// default salt and key lengths.
	Policy verify.Policy
	// Limits are the verifier's default limits, with MaxMemoryKiB raised
	// when Policy needs more. Policy validates under them.
	Limits verify.Limits
	// Workers is the concurrency measured at: the verifier's -workers.
	Workers int

	// P50 and P95 are the measured latencies of one hash at the policy with
	// Workers hashes at once; Throughput is the hashes per second completed.
	P50, P95   time.Duration
	Throughput float64
	// Hashes is how many hashes the figures come from.
	Hashes int

	// Target and MemoryBudget echo the request.
	Target       time.Duration
	MemoryBudget int64
	// MemoryPerHash is what one hash allocates (m × 1024 bytes);
	// MemoryTotal is Workers times that, at most MemoryBudget.
	MemoryPerHash, MemoryTotal int64
	// HeapLimit is the soft memory limit a verifier with these workers,
	// limits and -memory-budget sets with -resident-heap (its default): twice
	// the arrays its pool admits at once (a stored hash per worker at the
	// limits' m, or the budget, whichever is less), plus a base. The process
	// needs this much and a little more (its binary, stacks).
	HeapLimit int64

	// Bound says what settled the policy.
	Bound string
	// Warnings are things an operator should know before using the policy.
	Warnings []string
	// Probes is how many points were measured.
	Probes int
}

// point is a measured (m, t).
type point struct {
	m, t     uint32
	p50, p95 time.Duration
	tput     float64
	n        int
}

type searcher struct {
	cfg      Config
	progress io.Writer
	bench    Bench
	seen     map[[2]uint32]point
	warmed   bool
}

// Run measures candidate policies on this machine and returns the one with
// the most memory per hash that the budget allows and then the most
// iterations whose p95 latency, with cfg.Concurrency hashes at once, is
// within cfg.Target. See the package documentation for the search order.
//
// Each measured point is reported as a line on progress (nil: none). Run is
// bounded only by ctx: give it a deadline; when ctx ends, Run returns its
// error. Validation problems wrap ErrInvalidConfig; impossible requests
// ErrBudgetTooSmall or ErrTargetTooShort.
func Run(ctx context.Context, cfg Config, progress io.Writer) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	s := &searcher{cfg: cfg, progress: progress, bench: cfg.Bench, seen: map[[2]uint32]point{}}
	if s.bench == nil {
		s.bench = Argon2Bench
	}
	p := cfg.Parallelism
	minM := 8 * uint32(p) // Argon2's floor, a multiple of its 4p granule
	top := cfg.PerHashKiB()
	if top < minM {
		return Result{}, fmt.Errorf("calibrate: %w: %s for %d concurrent hashes is %s each, below Argon2's minimum of 8 KiB × %d lanes = %d KiB",
			ErrBudgetTooSmall, bytesize.Format(cfg.MemoryBudget), cfg.Concurrency, bytesize.Format(cfg.MemoryBudget/int64(cfg.Concurrency)), p, minM)
	}
	tMin, tMax := cfg.MinIterations, verify.DefaultLimits().MaxIterations
	fmt.Fprintf(progress, "calibrating: p95 ≤ %s with %d hashes at once, p=%d, memory ≤ %s per hash (%s budget)\n",
		ms(cfg.Target), cfg.Concurrency, p, mib(int64(top)), bytesize.Format(cfg.MemoryBudget))

	var chosen point
	var bound string
	first, err := s.measure(ctx, top, tMin)
	if err != nil {
		return Result{}, err
	}
	if first.p95 <= cfg.Target {
		// Memory is at its ceiling: spend the rest of the target on passes.
		t, err := s.largest(int64(tMin), first.p95, int64(tMax)+1, -1, func(int64) int64 { return 1 },
			func(x int64) int64 { return x },
			func(x int64) (time.Duration, error) {
				pt, err := s.measure(ctx, top, uint32(x))
				return pt.p95, err
			})
		if err != nil {
			return Result{}, err
		}
		chosen = s.seen[[2]uint32{top, uint32(t)}]
		switch {
		case uint32(t) == tMax && top == cfg.MaxMemoryKiB:
			bound = fmt.Sprintf("the memory cap (%s per hash) and the iteration cap (t=%d); latency is below the target", mib(int64(top)), tMax)
		case uint32(t) == tMax:
			bound = fmt.Sprintf("the memory budget and the iteration cap (t=%d); latency is below the target", tMax)
		case top == cfg.MaxMemoryKiB:
			bound = fmt.Sprintf("the memory cap (%s per hash), then the target (t raised to %d)", mib(int64(top)), t)
		default:
			bound = fmt.Sprintf("the memory budget, then the target (t raised to %d)", t)
		}
	} else {
		// Too slow even at the fewest passes: give up memory until it fits.
		fast, err := s.measure(ctx, minM, tMin)
		if err != nil {
			return Result{}, err
		}
		if fast.p95 > cfg.Target {
			return Result{}, fmt.Errorf("calibrate: %w: the cheapest policy allowed (m=%d KiB, t=%d, p=%d) takes %s at p95 with %d hashes at once, over the %s target",
				ErrTargetTooShort, minM, tMin, p, ms(fast.p95), cfg.Concurrency, ms(cfg.Target))
		}
		// Search in granules of 4p KiB, to within 1/32 of the memory.
		g := int64(4 * uint32(p))
		gm, err := s.largest(int64(minM)/g, fast.p95, int64(top)/g, first.p95,
			func(lo int64) int64 { return max(1, lo/32) },
			func(x int64) int64 { return roundDown(x*g, p) / g },
			func(x int64) (time.Duration, error) {
				pt, err := s.measure(ctx, uint32(x*g), tMin)
				return pt.p95, err
			})
		if err != nil {
			return Result{}, err
		}
		chosen = s.seen[[2]uint32{uint32(gm * g), tMin}]
		if m := uint32(roundDown(gm*g, p)); m != chosen.m {
			// Report the rounder number only with its own measurement.
			if chosen, err = s.measure(ctx, m, tMin); err != nil {
				return Result{}, err
			}
		}
		bound = fmt.Sprintf("the target: memory reduced to %s at the minimum t=%d (the budget allows %s)", mib(int64(chosen.m)), tMin, mib(int64(top)))
	}
	return s.result(chosen, bound)
}

// largest returns the largest x in [lo, bad) whose latency is within the
// target, to within tol(lo), given lo's latency (within the target) and
// bad's (over it, or negative when bad was not measured: then bad is only a
// cap). Each probe goes where a straight line through the nearest
// measurements on either side reaches the target (through the origin while
// bad is unmeasured: Argon2's time is about proportional to m × t), at least
// tol above lo, so that a good guess is confirmed by one probe failing, and
// out of the top eighth of the interval, so that a poor one still shrinks
// it. snap rounds a probe to a value that reads well, when that stays above
// lo.
func (s *searcher) largest(lo int64, latLo time.Duration, bad int64, latBad time.Duration,
	tol, snap func(int64) int64, lat func(int64) (time.Duration, error)) (int64, error) {
	target := float64(s.cfg.Target)
	for bad-lo > tol(lo) {
		var x int64
		if latBad < 0 {
			x = int64(float64(lo) * target / float64(max(latLo, 1)))
		} else {
			f := (target - float64(latLo)) / float64(max(latBad-latLo, 1))
			x = lo + int64(f*float64(bad-lo))
			x = min(x, bad-(bad-lo)/8)
		}
		x = min(max(x, lo+tol(lo)), bad-1)
		if r := snap(x); r > lo {
			x = r
		}
		l, err := lat(x)
		if err != nil {
			return 0, err
		}
		if l <= s.cfg.Target {
			lo, latLo = x, l
		} else {
			bad, latBad = x, l
		}
	}
	return lo, nil
}

// measure runs (or recalls) one point.
func (s *searcher) measure(ctx context.Context, m, t uint32) (point, error) {
	if pt, ok := s.seen[[2]uint32{m, t}]; ok {
		return pt, nil
	}
	if err := ctx.Err(); err != nil {
		return point{}, fmt.Errorf("calibrate: stopped after %d points: %w", len(s.seen), err)
	}
	warmup := 1
	if !s.warmed {
		warmup, s.warmed = s.cfg.Warmup, true
	}
	params := verify.Params{Memory: m, Iterations: t, Parallelism: s.cfg.Parallelism}
	sample, err := s.bench(ctx, params, s.cfg.Concurrency, warmup, s.cfg.Samples)
	if err != nil {
		return point{}, fmt.Errorf("calibrate: measuring m=%d KiB, t=%d: %w", m, t, err)
	}
	if len(sample.Latencies) == 0 {
		return point{}, fmt.Errorf("calibrate: measuring m=%d KiB, t=%d: no latencies", m, t)
	}
	lat := slices.Clone(sample.Latencies)
	slices.Sort(lat)
	pt := point{m: m, t: t, p50: quantile(lat, 0.50), p95: quantile(lat, 0.95), n: len(lat)}
	if sample.Elapsed > 0 {
		pt.tput = float64(len(lat)) / sample.Elapsed.Seconds()
	}
	s.seen[[2]uint32{m, t}] = pt
	verdict := "within target"
	if pt.p95 > s.cfg.Target {
		verdict = "over target"
	}
	fmt.Fprintf(s.progress, "  m=%7d KiB (%s) t=%2d: p50 %s, p95 %s, %.1f hashes/s: %s\n",
		m, mib(int64(m)), t, ms(pt.p50), ms(pt.p95), pt.tput, verdict)
	return pt, nil
}

// quantile is the nearest-rank quantile of sorted.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (s *searcher) result(pt point, bound string) (Result, error) {
	c := s.cfg
	pol := verify.DefaultPolicy()
	pol.Params = verify.Params{Memory: pt.m, Iterations: pt.t, Parallelism: c.Parallelism}
	lim := verify.DefaultLimits()
	lim.MaxMemoryKiB = max(lim.MaxMemoryKiB, pt.m)
	if err := pol.Validate(lim); err != nil {
		return Result{}, fmt.Errorf("calibrate: the chosen policy does not validate: %w", err)
	}
	r := Result{
		Policy: pol, Limits: lim, Workers: c.Concurrency,
		P50: pt.p50, P95: pt.p95, Throughput: pt.tput, Hashes: pt.n,
		Target: c.Target, MemoryBudget: c.MemoryBudget,
		MemoryPerHash: int64(pt.m) << 10, MemoryTotal: int64(c.Concurrency) * int64(pt.m) << 10,
		HeapLimit: residentheap.Limit(c.Concurrency, int64(lim.MaxMemoryKiB)<<10, c.MemoryBudget),
		Bound:     bound, Probes: len(s.seen),
	}
	if r.MemoryTotal > c.MemoryBudget {
		return Result{}, fmt.Errorf("calibrate: internal error: %d bytes over the %d-byte budget", r.MemoryTotal, c.MemoryBudget)
	}
	if cores := runtime.GOMAXPROCS(0); int(c.Parallelism)*c.Concurrency > cores {
		r.Warnings = append(r.Warnings, fmt.Sprintf("p=%d lanes × %d hashes at once = %d goroutines on %d cores: every hash waits for a core; with p=1 and -workers ≤ %d each hash has one",
			c.Parallelism, c.Concurrency, int(c.Parallelism)*c.Concurrency, cores, cores))
	}
	if floor := owaspFloorKiB(pt.t); pt.m < floor {
		r.Warnings = append(r.Warnings, fmt.Sprintf("m=%s with t=%d is below OWASP's minimum for that t (%s): raise the budget or the target",
			mib(int64(pt.m)), pt.t, mib(int64(floor))))
	}
	return r, nil
}

// owaspFloorKiB is the least memory the OWASP Password Storage Cheat Sheet
// accepts for Argon2id with t iterations and p=1: 46 MiB at t=1, 19 MiB at
// t=2, 12 MiB at t=3, 9 MiB at t=4, 7 MiB at t=5 and beyond.
func owaspFloorKiB(t uint32) uint32 {
	switch t {
	case 1:
		return 47104
	case 2:
		return 19456
	case 3:
		return 12288
	case 4:
		return 9216
	}
	return 7168
}

// ms formats a duration in milliseconds, with one decimal below 10 ms.
func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	if f < 10 {
		return fmt.Sprintf("%.1f ms", f)
	}
	return fmt.Sprintf("%.0f ms", f)
}
