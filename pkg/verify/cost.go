package verify

import (
	"sync"
	"time"
)

// CostModel predicts how long hashing under a stored hash's parameters will
// take. It keeps one estimate of seconds per unit of work per algorithm family
// (Argon2 work is memory × iterations; bcrypt's is 2^cost, see Hash.Work),
// learnt as an exponentially weighted moving average of measured service
// times, slowdowns included, so a node that is slow right now projects its
// queue honestly. A verifier feeds it what its workers measured; a gateway
// feeds it what verifiers report. It is safe for concurrent use; the zero
// value is not ready, use NewCostModel.
type CostModel struct {
	mu      sync.Mutex
	perUnit [2]float64 // seconds per work unit: argon2, bcrypt
}

// costAlpha is the weight of the newest observation.
const costAlpha = 0.2

// Priors, replaced by the first measurements: Argon2 at ≈ 0.7 µs per
// KiB-pass (x/crypto on one modern core), bcrypt at about 50 ms for cost 10.
const (
	argon2Prior = 0.7e-6
	bcryptPrior = 50e-3 / 1024
)

// NewCostModel returns a model holding the priors.
func NewCostModel() *CostModel {
	return &CostModel{perUnit: [2]float64{argon2Prior, bcryptPrior}}
}

func costFamily(a Algorithm) int {
	if a == Bcrypt {
		return 1
	}
	return 0
}

// Estimate returns the expected service time of a hash with h's parameters.
func (m *CostModel) Estimate(h *Hash) time.Duration {
	m.mu.Lock()
	per := m.perUnit[costFamily(h.Algorithm)]
	m.mu.Unlock()
	return time.Duration(per * h.Work() * float64(time.Second))
}

// Observe folds one measured service time into the estimate.
func (m *CostModel) Observe(h *Hash, took time.Duration) {
	work := h.Work()
	if work <= 0 || took <= 0 {
		return
	}
	per := took.Seconds() / work
	f := costFamily(h.Algorithm)
	m.mu.Lock()
	m.perUnit[f] += costAlpha * (per - m.perUnit[f])
	m.mu.Unlock()
}

// Set replaces the estimate for h's family outright (a warm-up measurement).
func (m *CostModel) Set(h *Hash, took time.Duration) {
	if work := h.Work(); work > 0 && took > 0 {
		m.mu.Lock()
		m.perUnit[costFamily(h.Algorithm)] = took.Seconds() / work
		m.mu.Unlock()
	}
}
