package verifier

import "github.com/leveehq/levee/pkg/residentheap"

// WidestHash is the most Argon2 memory, in bytes, one hash on a verifier
// built from c may ask for: a stored hash at Limits.MaxMemoryKiB, or the
// policy's own m if that is larger.
func (c Config) WidestHash() int64 {
	return int64(max(c.Limits.MaxMemoryKiB, c.Policy.Params.Memory)) << 10
}

// ResidentHeapLimit is the soft memory limit for a verifier built from c,
// with the memory budget it resolves (ResolveMemoryBudget): the one place
// the verifier's soft limit and its pool's admission are reconciled.
func (c Config) ResidentHeapLimit() int64 {
	budget, _ := c.ResolveMemoryBudget()
	return residentheap.Limit(c.Workers, c.WidestHash(), budget)
}
