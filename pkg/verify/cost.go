package verify

import (
	"sync"
	"time"
)

// CostModel predicts how long hashing under a stored hash's parameters will
// take. It keeps one estimate of seconds per unit of work per algorithm family
// (Argon2 work is memory × iterations; bcrypt's is 2^cost; PBKDF2's and
// SHA-crypt's rounds; scrypt's N × r × p, see Hash.Work),
// learnt as an exponentially weighted moving average of measured service
// times, slowdowns included, so a node that is slow right now projects its
// queue honestly. A verifier feeds it what its workers measured; a gateway
// feeds it what verifiers report. It is safe for concurrent use; the zero
// value is not ready, use NewCostModel.
type CostModel struct {
	mu      sync.Mutex
	perUnit [numFamilies]float64 // seconds per work unit, by costFamily
}

// costAlpha is the weight of the newest observation.
const costAlpha = 0.2

// Cost families: Argon2id and Argon2i share one; every other algorithm has its
// own, since a PBKDF2 iteration of SHA-512 costs more than one of SHA-1 and
// a SHA-crypt round more than a PBKDF2 iteration.
const (
	familyArgon2 = iota
	familyBcrypt
	familyPBKDF2SHA1
	familyPBKDF2SHA256
	familyPBKDF2SHA512
	familyScrypt
	familySHA256Crypt
	familySHA512Crypt
	numFamilies
)

// Priors, replaced by the first measurements: Argon2 at ≈ 0.7 µs per
// KiB-pass (x/crypto on one modern core), bcrypt at about 50 ms for cost 10.
// The legacy priors are BenchmarkVerifyLegacy's ns/unit on one amd64 core
// (0.16, 0.14 and 0.67 µs per PBKDF2-SHA1/-SHA256/-SHA512 iteration, 0.28 µs
// per unit of scrypt's N × r × p, 0.11 and 0.31 µs per SHA-256/-512-crypt
// round for a short password), rounded up.
const (
	argon2Prior       = 0.7e-6
	bcryptPrior       = 50e-3 / 1024
	pbkdf2SHA1Prior   = 0.2e-6
	pbkdf2SHA256Prior = 0.15e-6
	pbkdf2SHA512Prior = 0.7e-6
	scryptPrior       = 0.3e-6
	sha256CryptPrior  = 0.12e-6
	sha512CryptPrior  = 0.32e-6
)

// NewCostModel returns a model holding the priors.
func NewCostModel() *CostModel {
	return &CostModel{perUnit: [numFamilies]float64{
		familyArgon2:       argon2Prior,
		familyBcrypt:       bcryptPrior,
		familyPBKDF2SHA1:   pbkdf2SHA1Prior,
		familyPBKDF2SHA256: pbkdf2SHA256Prior,
		familyPBKDF2SHA512: pbkdf2SHA512Prior,
		familyScrypt:       scryptPrior,
		familySHA256Crypt:  sha256CryptPrior,
		familySHA512Crypt:  sha512CryptPrior,
	}}
}

func costFamily(a Algorithm) int {
	switch a {
	case Bcrypt:
		return familyBcrypt
	case PBKDF2SHA1:
		return familyPBKDF2SHA1
	case PBKDF2SHA256:
		return familyPBKDF2SHA256
	case PBKDF2SHA512:
		return familyPBKDF2SHA512
	case Scrypt:
		return familyScrypt
	case SHA256Crypt:
		return familySHA256Crypt
	case SHA512Crypt:
		return familySHA512Crypt
	default:
		return familyArgon2
	}
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
