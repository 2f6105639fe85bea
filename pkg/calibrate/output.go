package calibrate

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/leveehq/levee/internal/flagenv"
	"github.com/leveehq/levee/pkg/bytesize"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/wellknown"
)

// flagPairs are the verifier flags that configure r, in order: the policy,
// the workers and the memory budget, and -max-memory-kib only when the
// policy needs more than the default limit.
func (r Result) flagPairs() [][2]string {
	p := r.Policy.Params
	f := [][2]string{
		{wellknown.FlagArgon2MemoryKiB, strconv.FormatUint(uint64(p.Memory), 10)},
		{wellknown.FlagArgon2Iterations, strconv.FormatUint(uint64(p.Iterations), 10)},
		{wellknown.FlagArgon2Parallelism, strconv.FormatUint(uint64(p.Parallelism), 10)},
		{wellknown.FlagWorkers, strconv.Itoa(r.Workers)},
		{wellknown.FlagMemoryBudget, bytesize.Format(r.MemoryBudget)},
	}
	if r.Limits.MaxMemoryKiB != verify.DefaultLimits().MaxMemoryKiB {
		f = append(f, [2]string{wellknown.FlagMaxMemoryKiB, strconv.FormatUint(uint64(r.Limits.MaxMemoryKiB), 10)})
	}
	return f
}

// Flags returns the verifier's command-line flags for r: "-argon2-memory-kib
// 47104 -argon2-iterations 2 -argon2-parallelism 1 -workers 2
// -memory-budget 92MiB".
func (r Result) Flags() string {
	var b strings.Builder
	for i, kv := range r.flagPairs() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "-%s %s", kv[0], kv[1])
	}
	return b.String()
}

// Env returns the same settings as LEVEE_* environment assignments, one per
// element: "LEVEE_ARGON2_MEMORY_KIB=47104".
func (r Result) Env() []string {
	var env []string
	for _, kv := range r.flagPairs() {
		env = append(env, flagenv.Name(kv[0])+"="+kv[1])
	}
	return env
}

// WriteText writes r as a table with explicit units, then the flags and the
// environment.
func (r Result) WriteText(w io.Writer) error {
	p := r.Policy.Params
	var b strings.Builder
	fmt.Fprintf(&b, "Argon2id for p95 ≤ %s with %d hashes at once, memory budget %s (%d bytes)\n\n",
		ms(r.Target), r.Workers, bytesize.Format(r.MemoryBudget), r.MemoryBudget)
	row := func(k, format string, a ...any) { fmt.Fprintf(&b, "  %-22s %s\n", k, fmt.Sprintf(format, a...)) }
	row("memory per hash", "m = %d KiB = %s", p.Memory, mib(int64(p.Memory)))
	row("memory, all hashes", "%d × %s = %s of the %s budget", r.Workers, mib(int64(p.Memory)), mib(r.MemoryTotal>>10), mib(r.MemoryBudget>>10))
	row("iterations", "t = %d", p.Iterations)
	row("parallelism", "p = %d", p.Parallelism)
	row("latency per hash", "p50 %s, p95 %s (target %s), %d hashes measured", ms(r.P50), ms(r.P95), ms(r.Target), r.Hashes)
	row("throughput", "%.1f hashes/s with %d at once", r.Throughput, r.Workers)
	row("verifier heap limit", "%s with -resident-heap (2 × the lesser of workers × max m and the budget, + 64 MiB): the process needs this and a little more", mib(r.HeapLimit>>10))
	row("settled by", "%s", r.Bound)
	for _, warn := range r.Warnings {
		fmt.Fprintf(&b, "\nwarning: %s\n", warn)
	}
	fmt.Fprintf(&b, "\nverifier flags:\n  %s\n\nor environment:\n", r.Flags())
	for _, e := range r.Env() {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// jsonResult is Result's JSON form: sizes in bytes and KiB, durations in
// milliseconds, each named by its unit.
type jsonResult struct {
	MemoryKiB       uint32   `json:"argon2_memory_kib"`
	Iterations      uint32   `json:"argon2_iterations"`
	Parallelism     uint8    `json:"argon2_parallelism"`
	Workers         int      `json:"workers"`
	MaxMemoryKiB    uint32   `json:"max_memory_kib"`
	P50ms           float64  `json:"p50_ms"`
	P95ms           float64  `json:"p95_ms"`
	Targetms        float64  `json:"target_ms"`
	HashesPerSecond float64  `json:"hashes_per_second"`
	Hashes          int      `json:"hashes_measured"`
	MemoryPerHash   int64    `json:"memory_per_hash_bytes"`
	MemoryTotal     int64    `json:"memory_total_bytes"`
	MemoryBudget    int64    `json:"memory_budget_bytes"`
	HeapLimit       int64    `json:"verifier_heap_limit_bytes"`
	Flags           string   `json:"flags"`
	Env             []string `json:"env"`
	Bound           string   `json:"settled_by"`
	Warnings        []string `json:"warnings"`
	PointsMeasured  int      `json:"points_measured"`
}

// WriteJSON writes r as one indented JSON object.
func (r Result) WriteJSON(w io.Writer) error {
	p := r.Policy.Params
	j := jsonResult{
		MemoryKiB: p.Memory, Iterations: p.Iterations, Parallelism: p.Parallelism, Workers: r.Workers,
		MaxMemoryKiB: r.Limits.MaxMemoryKiB,
		P50ms:        float64(r.P50.Microseconds()) / 1000, P95ms: float64(r.P95.Microseconds()) / 1000,
		Targetms:        float64(r.Target.Microseconds()) / 1000,
		HashesPerSecond: r.Throughput, Hashes: r.Hashes,
		MemoryPerHash: r.MemoryPerHash, MemoryTotal: r.MemoryTotal, MemoryBudget: r.MemoryBudget, HeapLimit: r.HeapLimit,
		Flags: r.Flags(), Env: r.Env(), Bound: r.Bound, Warnings: r.Warnings, PointsMeasured: r.Probes,
	}
	if j.Warnings == nil {
		j.Warnings = []string{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(j)
}

// mib formats a KiB count as MiB for people, with two decimals unless whole.
func mib(kib int64) string {
	if kib%1024 == 0 {
		return fmt.Sprintf("%d MiB", kib/1024)
	}
	return fmt.Sprintf("%.2f MiB", float64(kib)/1024)
}
