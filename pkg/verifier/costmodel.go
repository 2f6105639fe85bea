package verifier

import (
	"sync"
	"time"

	"github.com/leveehq/levee/pkg/verify"
)

// costModel predicts how long a hash will hold a worker. It keeps one
// estimate of seconds per unit of work per algorithm family (Argon2 work is
// memory × iterations; bcrypt's is 2^cost), learnt as an exponentially
// weighted moving average of what workers measured, slowdowns included, so a
// node that is slow right now projects its queue honestly.
type costModel struct {
	mu      sync.Mutex
	perUnit [2]float64 // seconds per work unit: argon2, bcrypt
}

const costAlpha = 0.2 // weight of the newest observation

// bcryptPrior is the starting estimate for bcrypt: about 50 ms at cost 10.
const bcryptPrior = 50e-3 / 1024

func newCostModel() *costModel {
	// Argon2's prior (≈ 0.7 µs per KiB-pass, what x/crypto does on one
	// modern core) is replaced by the warm-up measurement at start.
	return &costModel{perUnit: [2]float64{0.7e-6, bcryptPrior}}
}

func family(a verify.Algorithm) int {
	if a == verify.Bcrypt {
		return 1
	}
	return 0
}

// estimate returns the expected service time of h.
func (m *costModel) estimate(h *verify.Hash) time.Duration {
	m.mu.Lock()
	per := m.perUnit[family(h.Algorithm)]
	m.mu.Unlock()
	return time.Duration(per * h.Work() * float64(time.Second))
}

// observe folds one measured service time into the estimate.
func (m *costModel) observe(h *verify.Hash, took time.Duration) {
	work := h.Work()
	if work <= 0 || took <= 0 {
		return
	}
	per := took.Seconds() / work
	f := family(h.Algorithm)
	m.mu.Lock()
	m.perUnit[f] += costAlpha * (per - m.perUnit[f])
	m.mu.Unlock()
}

// set replaces the estimate for h's family outright (used by warm-up).
func (m *costModel) set(h *verify.Hash, took time.Duration) {
	if work := h.Work(); work > 0 && took > 0 {
		m.mu.Lock()
		m.perUnit[family(h.Algorithm)] = took.Seconds() / work
		m.mu.Unlock()
	}
}
