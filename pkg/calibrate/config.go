package calibrate

import (
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/leveehq/levee/pkg/verify"
)

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrInvalidConfig is matched by every error from Config.Validate.
	ErrInvalidConfig = errors.New("invalid calibration config")
	// ErrBudgetTooSmall: the memory budget cannot give each concurrent hash
	// Argon2's minimum of 8 KiB per lane.
	ErrBudgetTooSmall = errors.New("memory budget too small")
	// ErrTargetTooShort: even the cheapest policy allowed (Argon2's minimum
	// memory at MinIterations) is slower than the target at this concurrency.
	ErrTargetTooShort = errors.New("latency target too short")
)

// Config is a calibration request. Start from DefaultConfig.
type Config struct {
	// Target is the latency one hash may take at the 95th percentile while
	// Concurrency hashes run at once.
	Target time.Duration
	// Concurrency is how many hashes run at once: the verifier's -workers,
	// which defaults to the cores (GOMAXPROCS).
	Concurrency int
	// MemoryBudget is the memory, in bytes, that the Argon2 arrays of all
	// concurrent hashes may hold at once: per hash, m ≤ MemoryBudget /
	// Concurrency. It is not the whole process: a verifier keeping its heap
	// resident holds up to twice the arrays plus a base (Result.HeapLimit).
	MemoryBudget int64
	// Parallelism is Argon2's p, the lanes of one hash. Each lane is a
	// goroutine, so with p × Concurrency above the cores every hash slows
	// down and nothing is gained; 1 gives each worker a core of its own.
	Parallelism uint8
	// MinIterations is the floor on t. The default, 2, is OWASP's minimum
	// with 19 MiB; t=1 is accepted by OWASP only with 46 MiB or more.
	MinIterations uint32
	// MaxMemoryKiB caps m per hash whatever the budget; the default is the
	// verifier's default Limits.MaxMemoryKiB (256 MiB). A larger cap is
	// allowed: Result.Flags then raise the verifier's -max-memory-kib too.
	MaxMemoryKiB uint32
	// Samples is how many hashes are measured per candidate point (the p95
	// of 20 is the 19th slowest).
	Samples int
	// Warmup is how many unmeasured hashes each worker runs before the
	// first point, so that the heap holds the arrays before timing starts.
	// Later points run one each.
	Warmup int
	// Bench measures a point; nil means Argon2Bench, real hashing on this
	// machine. Tests inject a model.
	Bench Bench
}

// DefaultConfig returns a 250 ms target at one hash per core with one lane
// and t ≥ 2. MemoryBudget has no default: it must be given.
func DefaultConfig() Config {
	return Config{
		Target:        250 * time.Millisecond,
		Concurrency:   runtime.GOMAXPROCS(0),
		Parallelism:   1,
		MinIterations: 2,
		MaxMemoryKiB:  verify.DefaultLimits().MaxMemoryKiB,
		Samples:       20,
		Warmup:        3,
	}
}

// Validate returns an error wrapping ErrInvalidConfig that names every
// invalid field. A budget too small for Argon2 is reported by Run as
// ErrBudgetTooSmall, not here.
func (c Config) Validate() error {
	lim := verify.DefaultLimits()
	var errs []error
	if c.Target <= 0 {
		errs = append(errs, fmt.Errorf("Target must be positive, got %v", c.Target))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("Concurrency must be at least 1, got %d", c.Concurrency))
	}
	if c.MemoryBudget <= 0 {
		errs = append(errs, fmt.Errorf("MemoryBudget must be positive, got %d bytes", c.MemoryBudget))
	}
	if c.Parallelism < 1 || c.Parallelism > lim.MaxParallelism {
		errs = append(errs, fmt.Errorf("Parallelism must be in 1..%d, got %d", lim.MaxParallelism, c.Parallelism))
	}
	if c.MinIterations < 1 || c.MinIterations > lim.MaxIterations {
		errs = append(errs, fmt.Errorf("MinIterations must be in 1..%d, got %d", lim.MaxIterations, c.MinIterations))
	}
	if uint64(c.MaxMemoryKiB) < 8*uint64(c.Parallelism) {
		errs = append(errs, fmt.Errorf("MaxMemoryKiB must be at least 8 × Parallelism, got %d", c.MaxMemoryKiB))
	}
	if c.Samples < 1 {
		errs = append(errs, fmt.Errorf("Samples must be at least 1, got %d", c.Samples))
	}
	if c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("Warmup must not be negative, got %d", c.Warmup))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// PerHashKiB is the most memory one hash may have: the budget shared among
// Concurrency hashes, capped at MaxMemoryKiB, rounded down as roundDown
// does.
// It is 0 when the budget does not reach a granule.
func (c Config) PerHashKiB() uint32 {
	if c.Concurrency < 1 || c.MemoryBudget <= 0 || c.Parallelism < 1 {
		return 0
	}
	kib := c.MemoryBudget / int64(c.Concurrency) / 1024
	if kib > int64(c.MaxMemoryKiB) {
		kib = int64(c.MaxMemoryKiB)
	}
	return uint32(roundDown(kib, c.Parallelism))
}

// roundDown rounds kib down to what Argon2 actually allocates (a multiple of
// 4 × p blocks: the implementation drops the rest), and to whole MiB from
// 32 MiB on, where that costs under 1/32 of the memory, when whole MiB are
// also such multiples: the numbers read well.
func roundDown(kib int64, p uint8) int64 {
	g := 4 * int64(p)
	if kib >= 32<<10 && 1024%g == 0 {
		g = 1024
	}
	return kib / g * g
}
