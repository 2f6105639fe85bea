// Package calibrate picks Argon2id parameters for a latency target on the
// machine it runs on, under a given concurrency and memory budget, and states
// the result as a verifier policy.
//
// The package promises:
//
//   - Every measurement runs Concurrency hashes at once, back to back, as a
//     verifier with that many workers does under load; a latency is one
//     hash's, measured alone it would be shorter.
//   - The target is met at the 95th percentile (p95) of the measured hashes,
//     not the median: it is the tail that meets callers' deadlines.
//   - The chosen policy never exceeds the budget: m × Concurrency ≤
//     MemoryBudget, counting m as Argon2 allocates it (m KiB of 1024 bytes).
//   - Memory comes first, because memory is what makes an attack expensive:
//     m is the most the budget allows (up to MaxMemoryKiB), and only then is t
//     raised towards the target. If even MinIterations at that memory is too
//     slow, m is reduced until it fits; t never goes below MinIterations.
//   - A Result's policy validates under the limits it carries (the verifier's
//     defaults, with MaxMemoryKiB raised when the policy needs more), and
//     Result.Flags are the verifier flags that configure exactly that.
//   - Impossible requests fail with ErrBudgetTooSmall or ErrTargetTooShort,
//     never with a policy that silently misses the request.
//
// Sizes on the command line go through bytesize.Parse, which refuses a number
// without a unit: MiB and MB differ by 5 %, KiB and bytes by 1024 times, and a
// container sized with the wrong one swaps.
package calibrate
