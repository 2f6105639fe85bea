// Package residentheap tunes the Go runtime of a process whose work is
// Argon2, so that freed block arrays stay resident for the next hash instead
// of being handed back to the OS and faulted in again, and derives the
// memory budget for those arrays from the container's limit or the host's
// memory. The verifier, levee calibrate and the benchmarks share it, so the
// limit calibrate prints is the one a verifier sets.
package residentheap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/leveehq/levee/pkg/bytesize"
)

// Base is the headroom, beyond the Argon2 arrays, that the heap
// limit leaves for everything else a verifier holds.
const Base = 64 << 20

// outsideHeap is what a container's memory limit must leave beyond the Go
// heap's soft limit: the binary's text, goroutine stacks and runtime
// metadata, and the kernel's own accounting of the process.
const outsideHeap = 64 << 20

// Keep tunes the Go runtime of a process whose work is Argon2
// and returns the soft memory limit it set: Limit(workers,
// widest, budget). It is process-wide, so only a main should call it; a
// verifier's main passes what its Config.ResidentHeapLimit returns.
//
// Argon2 allocates its whole block array (m KiB) per hash. Under the default
// GOGC the heap goal between hashes is tiny, the background scavenger hands
// the freed arrays back to the OS, and the next hash pays to fault fresh pages
// in (about 190 ms per 64 MiB on a small machine: more than the hash itself).
// With GOGC off and a soft memory limit of twice the arrays that may live at
// once plus a base, garbage collection runs only when that limit nears, and
// the scavenger keeps freed arrays resident for reuse.
//
// A limit below twice the arrays the pool admits makes the collector run and
// the scavenger return memory on nearly every hash, and each hash then
// faults its array in again: measured with `levee calibrate`, p95 went from
// 89 ms to 448 ms when 2 × 68 MiB arrays crossed a 320 MiB limit
// (docs/benchmarks.md). DefaultBudget sizes the budget so that this
// limit fits the container.
func Keep(workers int, widest, budget int64) int64 {
	limit := Limit(workers, widest, budget)
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(limit)
	return limit
}

// Limit is the soft memory limit Keep sets: twice
// the Argon2 arrays that may live at once (AdmittedArrays: the running
// hashes' and the previous round's, freed but not yet collected), plus a
// base for everything else.
func Limit(workers int, widest, budget int64) int64 {
	return 2*AdmittedArrays(workers, widest, budget) + Base
}

// AdmittedArrays is the most Argon2 array memory a pool of workers lets
// live at once when each hash may ask for up to widest bytes: a hash per
// worker, and with a memory budget (budget > 0) no more than the budget,
// which the pool's memory permits hold the running hashes to (a hash wider
// than the whole budget is refused). For a verifier, widest is what a stored
// hash may ask (Config.WidestHash), not the policy's m: verifying old or
// imported hashes with a larger m is what fills the budget.
func AdmittedArrays(workers int, widest, budget int64) int64 {
	arrays := int64(max(workers, 1)) * max(widest, 0)
	if budget > 0 {
		arrays = min(arrays, budget)
	}
	return arrays
}

// memoryFiles are where DefaultBudget reads the memory it may use;
// tests point them at temporary files.
type memoryFiles struct {
	CgroupV2 string // cgroup v2 memory.max: bytes, or "max"
	CgroupV1 string // cgroup v1 memory.limit_in_bytes: bytes, near 2^63 for none
	MemInfo  string // /proc/meminfo, for MemTotal
}

var systemMemoryFiles = memoryFiles{
	CgroupV2: "/sys/fs/cgroup/memory.max",
	CgroupV1: "/sys/fs/cgroup/memory/memory.limit_in_bytes",
	MemInfo:  "/proc/meminfo",
}

// ErrNoMemoryInfo is returned by DefaultBudget when neither a cgroup limit
// nor the host's memory could be read.
var ErrNoMemoryInfo = errors.New("no cgroup memory limit and no /proc/meminfo")

// DefaultBudget derives a memory budget for Argon2 arrays from the
// process's environment and says where it came from. The process needs about
// twice the budget (live arrays and the previous round's garbage, see
// Keep) plus headroom:
//
//   - Under a cgroup memory limit L (v2 memory.max, else v1
//     memory.limit_in_bytes): (L − 128 MiB) / 2, where 128 MiB is 64 MiB of
//     Go heap beyond the arrays (the soft limit's base) and 64 MiB outside
//     the Go heap. "max", a value of 2^62 or more, or one at least the host's
//     memory means no limit.
//   - Else (half the host's memory (MemTotal) − 64 MiB) / 2: a verifier
//     shares a host, and the soft limit lands at exactly the half.
//
// A limit too small for the headroom gives a budget of zero, which
// Validate refuses with the limit in its message. It returns an error when
// nothing could be read (not Linux).
func DefaultBudget() (budget int64, source string, err error) {
	return defaultBudget(systemMemoryFiles)
}

func defaultBudget(f memoryFiles) (int64, string, error) {
	total, terr := memTotal(f.MemInfo)
	for _, c := range []struct{ path, name string }{{f.CgroupV2, "cgroup v2 memory.max"}, {f.CgroupV1, "cgroup v1 memory.limit_in_bytes"}} {
		limit, ok := cgroupLimit(c.path)
		if !ok {
			continue
		}
		if limit >= 1<<62 || terr == nil && limit >= total {
			break // no real limit: the host's memory decides
		}
		budget := max(limit-Base-outsideHeap, 0) / 2
		return budget, fmt.Sprintf("half of %s %s less %s headroom", c.name, bytesize.Size(limit).Approx(), bytesize.Size(Base+outsideHeap).Approx()), nil
	}
	if terr != nil {
		return 0, "", fmt.Errorf("%w: %v", ErrNoMemoryInfo, terr)
	}
	budget := max(total/2-Base, 0) / 2
	return budget, fmt.Sprintf("half of (half of host MemTotal %s less %s)", bytesize.Size(total).Approx(), bytesize.Size(Base).Approx()), nil
}

// cgroupLimit reads a cgroup memory limit file; ok is false when the file
// is absent, unreadable, says "max" or holds no positive number.
func cgroupLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// memTotal reads MemTotal (in kB, which the kernel means as KiB) from a
// meminfo file.
func memTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("%s: malformed MemTotal line %q", path, sc.Text())
		}
		kib, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kib <= 0 || kib > 1<<52 {
			return 0, fmt.Errorf("%s: malformed MemTotal line %q", path, sc.Text())
		}
		return kib << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no MemTotal line", path)
}
