package verifier

import (
	"runtime/debug"

	"github.com/leveehq/levee/pkg/verify"
)

// residentBase is the headroom, beyond the Argon2 arrays, that the heap
// limit leaves for everything else a verifier holds.
const residentBase = 64 << 20

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
func KeepHeapResident(workers int, policy verify.Policy) int64 {
	arrays := int64(workers) * int64(policy.Params.Memory) << 10
	limit := 2*arrays + residentBase
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(limit)
	return limit
}
