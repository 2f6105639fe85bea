package calibrate_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leveehq/levee/pkg/bytesize"
	"github.com/leveehq/levee/pkg/calibrate"
	"github.com/leveehq/levee/pkg/calibrate/calibratetest"
	"github.com/leveehq/levee/pkg/verify"
)

// model is a machine on which 64 MiB × 1 pass takes 41 ms alone.
func model() *calibratetest.Model {
	return &calibratetest.Model{Base: time.Millisecond, PerKiBPass: 40 * time.Millisecond / 65536, Cores: 2, Spread: 0.1}
}

// p95 is what Run sees as the p95 of n samples of the model at (m, t).
func p95(md *calibratetest.Model, p verify.Params, c, n int) time.Duration {
	fresh := &calibratetest.Model{Base: md.Base, PerKiBPass: md.PerKiBPass, Cores: md.Cores, Spread: md.Spread}
	s, _ := fresh.Bench(context.Background(), p, c, 0, n)
	lat := s.Latencies // ascending by construction
	i := (95*n+99)/100 - 1
	return lat[i]
}

func TestRunSearch(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*calibrate.Config)
		wantM uint32 // 0: reduced to the model's largest m within the target at t=MinIterations

		wantT    uint32 // 0: the largest t within the target at wantM
		bound    string
		warnings []string
		maxMem   uint32 // the -max-memory-kib printed, 0: none
	}{
		{
			name:  "memory first, then t up to the target",
			edit:  func(c *calibrate.Config) { c.Target = 250 * time.Millisecond; c.MemoryBudget = 256 << 20 },
			wantM: 128 << 10, bound: "the memory budget, then the target",
		},
		{
			name:  "SI budget: 512 MB over 2 hashes is 244 MiB each",
			edit:  func(c *calibrate.Config) { c.Target = 500 * time.Millisecond; c.MemoryBudget = 512e6 },
			wantM: 244 << 10, bound: "the memory budget",
		},
		{
			name:  "memory capped at the verifier's 256 MiB limit",
			edit:  func(c *calibrate.Config) { c.Target = 500 * time.Millisecond; c.MemoryBudget = 1 << 30 },
			wantM: 256 << 10, bound: "the memory cap",
		},
		{
			name: "a larger cap raises -max-memory-kib",
			edit: func(c *calibrate.Config) {
				c.Target = 2 * time.Second
				c.MemoryBudget = 1 << 30
				c.MaxMemoryKiB = 1 << 20
			},
			wantM: 512 << 10, bound: "the memory budget", maxMem: 512 << 10,
		},
		{
			name:  "too slow at t=2: memory reduced",
			edit:  func(c *calibrate.Config) { c.Target = 50 * time.Millisecond; c.MemoryBudget = 256 << 20 },
			wantT: 2, bound: "memory reduced",
		},
		{
			name: "too slow at t=2, below OWASP",
			edit: func(c *calibrate.Config) {
				c.Target = 10 * time.Millisecond
				c.MemoryBudget = 256 << 20
			},
			wantT: 2, bound: "memory reduced", warnings: []string{"below OWASP"},
		},
		{
			name: "iteration cap with a long target",
			edit: func(c *calibrate.Config) {
				c.Target = 10 * time.Second
				c.MemoryBudget = 64 << 20
			},
			wantM: 32 << 10, wantT: verify.DefaultLimits().MaxIterations, bound: "iteration cap",
		},
		{
			name: "p=2 at 2 hashes on 2 cores halves the speed",
			edit: func(c *calibrate.Config) {
				c.Target = 250 * time.Millisecond
				c.MemoryBudget = 256 << 20
				c.Parallelism = 2
			},
			wantT: 2, bound: "memory reduced", warnings: []string{"4 goroutines on 2 cores"},
		},
		{
			name: "one hash at a time gets the whole budget",
			edit: func(c *calibrate.Config) {
				c.Target = 250 * time.Millisecond
				c.MemoryBudget = 100 << 20
				c.Concurrency = 1
				c.MinIterations = 1
			},
			wantM: 100 << 10,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := model()
			cfg := calibrate.DefaultConfig()
			cfg.Concurrency = 2
			cfg.Bench = md.Bench
			tt.edit(&cfg)
			var progress bytes.Buffer
			r, err := calibrate.Run(context.Background(), cfg, &progress)
			if err != nil {
				t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
			}
			p := r.Policy.Params
			if tt.wantM != 0 && p.Memory != tt.wantM {
				t.Errorf("m = %d KiB, want %d KiB\n%s", p.Memory, tt.wantM, progress.String())
			}
			if tt.wantM == 0 {
				// The largest m (in Argon2's 4p granules) within the target,
				// to the search's 1/32 and the rounding to whole MiB.
				g := 4 * uint32(cfg.Parallelism)
				exact := 8 * uint32(cfg.Parallelism)
				for {
					next := verify.Params{Memory: exact + g, Iterations: cfg.MinIterations, Parallelism: cfg.Parallelism}
					if p95(md, next, cfg.Concurrency, cfg.Samples) > cfg.Target {
						break
					}
					exact += g
				}
				if lo := exact - exact/32 - 1024; p.Memory > exact || p.Memory < lo {
					t.Errorf("m = %d KiB, want %d..%d KiB\n%s", p.Memory, lo, exact, progress.String())
				}
			}
			wantT := tt.wantT
			if wantT == 0 {
				for wantT = cfg.MinIterations; wantT < verify.DefaultLimits().MaxIterations; wantT++ {
					next := p
					next.Iterations = wantT + 1
					if p95(md, next, cfg.Concurrency, cfg.Samples) > cfg.Target {
						break
					}
				}
			}
			if p.Iterations != wantT {
				t.Errorf("t = %d, want %d\n%s", p.Iterations, wantT, progress.String())
			}
			if p.Parallelism != cfg.Parallelism {
				t.Errorf("p = %d, want %d", p.Parallelism, cfg.Parallelism)
			}
			if want := p95(md, p, cfg.Concurrency, cfg.Samples); r.P95 != want || r.P95 > cfg.Target {
				t.Errorf("P95 = %v, want the model's %v, within the %v target", r.P95, want, cfg.Target)
			}
			if r.P50 >= r.P95 {
				t.Errorf("P50 %v not below P95 %v: the model spreads its samples", r.P50, r.P95)
			}
			// The budget holds for the result and for every point measured.
			if r.MemoryTotal != int64(cfg.Concurrency)*int64(p.Memory)*1024 || r.MemoryTotal > cfg.MemoryBudget {
				t.Errorf("MemoryTotal = %d for %d × %d KiB, budget %d", r.MemoryTotal, cfg.Concurrency, p.Memory, cfg.MemoryBudget)
			}
			for _, pt := range md.Points() {
				if int64(pt.Memory)*1024*int64(cfg.Concurrency) > cfg.MemoryBudget || pt.Memory > cfg.MaxMemoryKiB {
					t.Errorf("measured m=%d KiB × %d hashes: over the %d-byte budget or the %d KiB cap", pt.Memory, cfg.Concurrency, cfg.MemoryBudget, cfg.MaxMemoryKiB)
				}
				if pt.Iterations < cfg.MinIterations {
					t.Errorf("measured t=%d below MinIterations %d", pt.Iterations, cfg.MinIterations)
				}
			}
			if r.Probes != len(md.Points()) || r.Probes > 12 {
				t.Errorf("%d probes, %d points measured: want each point once and few", r.Probes, len(md.Points()))
			}
			if err := r.Policy.Validate(r.Limits); err != nil {
				t.Errorf("policy does not validate under its limits: %v", err)
			}
			if !strings.Contains(r.Bound, tt.bound) {
				t.Errorf("Bound = %q, want it to mention %q", r.Bound, tt.bound)
			}
			warnings := strings.Join(r.Warnings, "\n")
			for _, w := range tt.warnings {
				if !strings.Contains(warnings, w) {
					t.Errorf("warnings %q lack %q", r.Warnings, w)
				}
			}
			if len(tt.warnings) == 0 && len(r.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", r.Warnings)
			}
			flags := r.Flags()
			if got := strings.Contains(flags, "-max-memory-kib"); got != (tt.maxMem != 0) {
				t.Errorf("flags %q: -max-memory-kib present %v, want %v", flags, got, tt.maxMem != 0)
			}
			if tt.maxMem != 0 && r.Limits.MaxMemoryKiB != tt.maxMem {
				t.Errorf("Limits.MaxMemoryKiB = %d, want %d", r.Limits.MaxMemoryKiB, tt.maxMem)
			}
			checkPrinted(t, r)
		})
	}
}

// checkPrinted parses the flags in r's text output the way the verifier
// does and checks that they give back r's policy, valid under the limits.
func checkPrinted(t *testing.T, r calibrate.Result) {
	t.Helper()
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	out := text.String()
	for _, want := range []string{"KiB", "MiB", " ms", "hashes/s", "LEVEE_ARGON2_MEMORY_KIB=", "LEVEE_WORKERS="} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q:\n%s", want, out)
		}
	}
	_, after, ok := strings.Cut(out, "verifier flags:\n")
	if !ok {
		t.Fatalf("no flags in:\n%s", out)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(after), "\n")
	pol, lim, workers := parseVerifierFlags(t, strings.Fields(line))
	if pol.Params != r.Policy.Params || workers != r.Workers {
		t.Errorf("printed flags %q give %+v with %d workers, want %+v with %d", line, pol.Params, workers, r.Policy.Params, r.Workers)
	}
	if err := pol.Validate(lim); err != nil {
		t.Errorf("printed flags %q: %v", line, err)
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"argon2_memory_kib"`) {
		t.Errorf("WriteJSON: %v\n%s", err, js.String())
	}
}

// parseVerifierFlags reads the policy flags as cmd/verifier declares them.
func parseVerifierFlags(t *testing.T, args []string) (verify.Policy, verify.Limits, int) {
	t.Helper()
	pol, lim := verify.DefaultPolicy(), verify.DefaultLimits()
	fs := flag.NewFlagSet("verifier", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	mem := fs.Uint("argon2-memory-kib", 0, "")
	iter := fs.Uint("argon2-iterations", 0, "")
	par := fs.Uint("argon2-parallelism", 0, "")
	maxMem := fs.Uint("max-memory-kib", uint(lim.MaxMemoryKiB), "")
	var budget bytesize.Auto // what the verifier's -memory-budget accepts
	fs.Var(&budget, "memory-budget", "")
	workers := fs.Int("workers", 0, "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		t.Fatalf("verifier flags %q: %v, %d left over", args, err, fs.NArg())
	}
	pol.Params = verify.Params{Memory: uint32(*mem), Iterations: uint32(*iter), Parallelism: uint8(*par)}
	lim.MaxMemoryKiB = uint32(*maxMem)
	return pol, lim, *workers
}

func TestRunRefuses(t *testing.T) {
	tests := []struct {
		name string
		edit func(*calibrate.Config)
		want error
		msg  string
	}{
		{"no budget", func(c *calibrate.Config) { c.MemoryBudget = 0 }, calibrate.ErrInvalidConfig, "MemoryBudget"},
		{"zero target", func(c *calibrate.Config) { c.Target = 0 }, calibrate.ErrInvalidConfig, "Target"},
		{"p=0", func(c *calibrate.Config) { c.Parallelism = 0 }, calibrate.ErrInvalidConfig, "Parallelism"},
		{"t floor above the limit", func(c *calibrate.Config) { c.MinIterations = 17 }, calibrate.ErrInvalidConfig, "MinIterations"},
		{"budget below 8 KiB per hash", func(c *calibrate.Config) { c.MemoryBudget = 15 << 10 }, calibrate.ErrBudgetTooSmall, "8 KiB"},
		{"budget below 8 KiB × p", func(c *calibrate.Config) { c.MemoryBudget = 2 * 30 << 10; c.Parallelism = 4 }, calibrate.ErrBudgetTooSmall, "32 KiB"},
		{"target below the fastest point", func(c *calibrate.Config) { c.Target = 500 * time.Microsecond }, calibrate.ErrTargetTooShort, "m=8 KiB, t=2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			md := model()
			cfg := calibrate.DefaultConfig()
			cfg.Concurrency = 2
			cfg.MemoryBudget = 256 << 20
			cfg.Bench = md.Bench
			tt.edit(&cfg)
			r, err := calibrate.Run(context.Background(), cfg, nil)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Run = %+v, %v; want an error matching %v that mentions %q", r.Policy, err, tt.want, tt.msg)
			}
		})
	}
}

func TestRunStopsWithContext(t *testing.T) {
	md := model()
	cfg := calibrate.DefaultConfig()
	cfg.MemoryBudget = 256 << 20
	cfg.Bench = md.Bench
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := calibrate.Run(ctx, cfg, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run with a cancelled context: %v, want context.Canceled", err)
	}
	if n := len(md.Points()); n != 0 {
		t.Errorf("%d points measured after cancellation", n)
	}
}

// A real calibration with tiny parameters: whatever this machine's speed
// (or the race detector's), the printed flags make a valid policy within the
// budget. The target is far above the cheapest policy's ~1 ms so that one
// descheduled sample on a busy machine cannot push it over; whether the
// 4 MiB policy fits depends on the machine, and either answer is valid.
func TestRunArgon2Smoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := calibrate.DefaultConfig()
	cfg.Target = 250 * time.Millisecond
	cfg.MemoryBudget = 4 << 20
	cfg.Concurrency = 1
	cfg.Samples = 5
	cfg.Warmup = 1
	var progress bytes.Buffer
	r, err := calibrate.Run(ctx, cfg, &progress)
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, progress.String())
	}
	if r.MemoryTotal > cfg.MemoryBudget || r.Hashes != cfg.Samples || r.Throughput <= 0 {
		t.Errorf("result %+v: over budget, or not measured", r)
	}
	checkPrinted(t, r)
	t.Logf("%s\n%s", progress.String(), r.Flags())
}

func TestArgon2BenchCounts(t *testing.T) {
	p := verify.Params{Memory: 64, Iterations: 1, Parallelism: 1}
	s, err := calibrate.Argon2Bench(context.Background(), p, 3, 1, 7)
	if err != nil {
		t.Fatal(err)
	}
	// 7 hashes over 3 workers: 3 each, all measured.
	if len(s.Latencies) != 9 || s.Elapsed <= 0 {
		t.Errorf("%d latencies over %v, want 9 and a positive wall time", len(s.Latencies), s.Elapsed)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := calibrate.Argon2Bench(ctx, p, 2, 1, 4); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
