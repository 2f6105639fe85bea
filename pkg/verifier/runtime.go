package verifier

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/leveehq/levee/pkg/verify"
)

// residentBase is the headroom, beyond the Argon2 arrays, that the heap
// limit leaves for everything else a verifier holds.
const residentBase = 64 << 20

// outsideHeap is what a container's memory limit must leave beyond the Go
// heap's soft limit: the binary's text, goroutine stacks and runtime
// metadata, and the kernel's own accounting of the process.
const outsideHeap = 64 << 20

// KeepHeapResident tunes the Go runtime of a process whose work is Argon2
// and returns the soft memory limit it set. It is process-wide, so only a
// main should call it.
//
// Argon2 allocates its whole block array (m KiB) per hash. Under the default
// GOGC the heap goal between hashes is tiny, the background scavenger hands
// the freed arrays back to the OS, and the next hash pays to fault fresh pages
// in (about 190 ms per 64 MiB on a small machine: more than the hash itself).
// With GOGC off and a soft memory limit of twice the arrays the workers can
// hold at once plus a base, garbage collection runs only when that limit
// nears, and the scavenger keeps freed arrays resident for reuse.
//
// With a memory budget (budget > 0), the limit is at most twice the budget
// plus the base: the pool's memory permits let no more than budget bytes of
// Argon2 arrays be live at once, and the freed arrays of the previous round
// wait beside them until the next collection. A limit below that makes the
// collector run and the scavenger return memory on nearly every hash, and
// each hash then faults its array in again: measured with `levee calibrate`,
// p95 went from 89 ms to 448 ms when 2 × 68 MiB arrays crossed a 320 MiB
// limit (docs/benchmarks.md). DefaultMemoryBudget sizes the budget so that
// this limit fits the container.
func KeepHeapResident(workers int, policy verify.Policy, budget int64) int64 {
	limit := ResidentHeapLimit(workers, policy.Params, budget)
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(limit)
	return limit
}

// ResidentHeapLimit is the soft memory limit KeepHeapResident sets: twice
// the Argon2 arrays that workers hashes of p (or, when smaller, the budget)
// hold at once, plus a base for everything else.
func ResidentHeapLimit(workers int, p verify.Params, budget int64) int64 {
	arrays := int64(workers) * int64(p.Memory) << 10
	if budget > 0 {
		arrays = min(arrays, budget)
	}
	return 2*arrays + residentBase
}

// memoryFiles are where DefaultMemoryBudget reads the memory it may use;
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

// errNoMemoryInfo: neither a cgroup limit nor the host's memory could be read.
var errNoMemoryInfo = errors.New("no cgroup memory limit and no /proc/meminfo")

// DefaultMemoryBudget derives a memory budget for Argon2 arrays from the
// process's environment and says where it came from. The process needs about
// twice the budget (live arrays and the previous round's garbage, see
// KeepHeapResident) plus headroom:
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
func DefaultMemoryBudget() (budget int64, source string, err error) {
	return defaultMemoryBudget(systemMemoryFiles)
}

func defaultMemoryBudget(f memoryFiles) (int64, string, error) {
	total, terr := memTotal(f.MemInfo)
	for _, c := range []struct{ path, name string }{{f.CgroupV2, "cgroup v2 memory.max"}, {f.CgroupV1, "cgroup v1 memory.limit_in_bytes"}} {
		limit, ok := cgroupLimit(c.path)
		if !ok {
			continue
		}
		if limit >= 1<<62 || terr == nil && limit >= total {
			break // no real limit: the host's memory decides
		}
		budget := max(limit-residentBase-outsideHeap, 0) / 2
		return budget, fmt.Sprintf("half of %s %s less %s headroom", c.name, ByteSize(limit).Approx(), ByteSize(residentBase+outsideHeap).Approx()), nil
	}
	if terr != nil {
		return 0, "", fmt.Errorf("%w: %v", errNoMemoryInfo, terr)
	}
	budget := max(total/2-residentBase, 0) / 2
	return budget, fmt.Sprintf("half of (half of host MemTotal %s less %s)", ByteSize(total).Approx(), ByteSize(residentBase).Approx()), nil
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
