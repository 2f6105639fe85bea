package verify

import (
	"math/bits"
	"sync"
	"time"

	"github.com/leveehq/levee/internal/recent"
)

// CostModel predicts how long one check against a stored hash holds a
// worker on this node, from the hash's own parameters. It is safe for
// concurrent use; create it with NewCostModel.
//
// An estimate is base × work / lanes × stretch:
//
//   - work is Hash.Work (Argon2: memory × passes; bcrypt: 2^cost; …);
//   - base is this machine's seconds per unit of work for the hash's family:
//     a prior (below) until Calibrate measures it. Calibrating one family
//     rescales the priors of the uncalibrated ones by the same machine
//     factor, so a fast machine is fast for every algorithm;
//   - lanes is how many of an Argon2 hash's p lanes run at once: min(p,
//     Parallelism), Parallelism being the cores each worker has to itself
//     (x/crypto runs the lanes of a pass concurrently); 1 for every other
//     family;
//   - stretch is how much slower than calibrated this node runs now, learnt
//     from recent runs of the hash's shape (its family, and for Argon2 its
//     class of p): the median of measured ÷ predicted over the shape's
//     samples no older than StretchWindow, each weighted by its predicted
//     cost, clamped to [MinStretch, MaxStretch]; exactly 1 unless those
//     samples add up to MinStretchSamples estimates of the hash asked about.
//
// The stretch learns from callers' hashes, and a caller chooses which
// stored hashes it sends: what one caller sends must not move the estimate
// everyone else's calls are admitted by. A run counts by the work it was
// predicted to be, so a flood of tiny hashes (m = 8 KiB) weighs what its
// work weighs, which is nothing beside one real one; a shape keeps at most
// StretchSamples runs, and a new run displaces the lightest fresh one, so
// light runs displace each other and not the heavier ones; and hashes of another p learn apart, since x/crypto runs
// lanes on cores a worker does not own and a wide hash runs faster than
// predicted. To move the stretch of the policy's hashes, a caller must send
// as much work of that shape as everyone else: a share of the node, which
// is admission's business, not the estimate's.
//
// The model has no absorbing state. Nothing but base is kept for longer
// than StretchWindow: a node whose estimate rose refuses more, learns less,
// and its estimate returns to the calibrated one within StretchWindow
// whether or not any work is admitted. The median ignores a few outliers (a
// hash that spanned a stall), the clamp bounds what the rest can do, and
// callers are expected to Observe only runs that mean something: see
// Observe.
type CostModel struct {
	parallelism int
	now         func() time.Time

	mu         sync.Mutex
	base       [numFamilies]float64 // seconds per unit of work
	calibrated [numFamilies]bool
	recent     [numFamilies][numLaneClasses]recent.Samples // measured ÷ predicted, weighted by predicted seconds
}

// Stretch bounds and the learning window; see CostModel.
const (
	MinStretch        = 0.5
	MaxStretch        = 4.0
	StretchSamples    = recent.Capacity
	MinStretchSamples = 3
	StretchWindow     = 10 * time.Second
)

// numLaneClasses is how many classes of Argon2's p learn apart: p = 1, 2,
// 3–4, 5–8, 9–16 and more (laneClass).
const numLaneClasses = 6

// laneClass is the class of h's p that its runs are learnt in.
func laneClass(h *Hash) int {
	if !h.Algorithm.isArgon2() || h.Params.Parallelism <= 1 {
		return 0
	}
	return min(bits.Len8(h.Params.Parallelism-1), numLaneClasses-1)
}

// stretchOf is the weighted median ratio of r's fresh runs at now, or 1
// unless there are MinStretchSamples of them weighing at least
// MinStretchSamples × predicted seconds.
func stretchOf(r *recent.Samples, now time.Time, predicted float64) float64 {
	med, n, total := r.Median(now)
	if n < MinStretchSamples || total < MinStretchSamples*predicted {
		return 1
	}
	return min(max(med, MinStretch), MaxStretch)
}

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

// Priors, until calibrated: Argon2 at ≈ 0.7 µs per KiB-pass (x/crypto on one
// modern core), bcrypt at about 50 ms for cost 10. The legacy priors are
// BenchmarkVerifyLegacy's ns/unit on one amd64 core (0.16, 0.14 and 0.67 µs
// per PBKDF2-SHA1/-SHA256/-SHA512 iteration, 0.28 µs per unit of scrypt's
// N × r × p, 0.11 and 0.31 µs per SHA-256/-512-crypt round for a short
// password), rounded up.
var priors = [numFamilies]float64{
	familyArgon2:       0.7e-6,
	familyBcrypt:       50e-3 / 1024,
	familyPBKDF2SHA1:   0.2e-6,
	familyPBKDF2SHA256: 0.15e-6,
	familyPBKDF2SHA512: 0.7e-6,
	familyScrypt:       0.3e-6,
	familySHA256Crypt:  0.12e-6,
	familySHA512Crypt:  0.32e-6,
}

// NewCostModel returns a model holding the priors, for a node whose workers
// each have parallelism cores to themselves (at least 1), on the clock now
// (nil: time.Now).
func NewCostModel(parallelism int, now func() time.Time) *CostModel {
	if now == nil {
		now = time.Now
	}
	m := &CostModel{parallelism: max(parallelism, 1), now: now, base: priors}
	for f := range m.recent {
		for c := range m.recent[f] {
			m.recent[f][c] = recent.New(StretchWindow)
		}
	}
	return m
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

// lanes is how many of h's lanes run at once with parallelism cores.
func lanes(h *Hash, parallelism int) float64 {
	if h.Algorithm.isArgon2() && h.Params.Parallelism > 1 {
		return float64(min(int(h.Params.Parallelism), max(parallelism, 1)))
	}
	return 1
}

// Estimate returns the expected time one check against h holds a worker.
func (m *CostModel) Estimate(h *Hash) time.Duration { return m.estimate(h, true) }

// Baseline returns the calibrated estimate for h, without the stretch.
func (m *CostModel) Baseline(h *Hash) time.Duration { return m.estimate(h, false) }

func (m *CostModel) estimate(h *Hash, stretched bool) time.Duration {
	f := costFamily(h.Algorithm)
	m.mu.Lock()
	predicted := m.base[f] * h.Work() / lanes(h, m.parallelism)
	if stretched {
		predicted *= stretchOf(&m.recent[f][laneClass(h)], m.now(), predicted)
	}
	m.mu.Unlock()
	return seconds(predicted)
}

// Stretch returns the factor by which hashes of h's shape run slower than
// calibrated now, as h's estimate uses it (1: as calibrated).
func (m *CostModel) Stretch(h *Hash) float64 {
	f := costFamily(h.Algorithm)
	m.mu.Lock()
	defer m.mu.Unlock()
	return stretchOf(&m.recent[f][laneClass(h)], m.now(), m.base[f]*h.Work()/lanes(h, m.parallelism))
}

// Observe records that one check against h held a worker for took. Callers
// should observe only what tells the node's speed: not a run whose caller
// had left (its time was wasted, and learning from it is how a stall
// becomes self-sustaining), not a run that spanned a detected stall, and
// not a run that did more than h's one hash.
func (m *CostModel) Observe(h *Hash, took time.Duration) {
	work := h.Work()
	if work <= 0 || took <= 0 {
		return
	}
	f := costFamily(h.Algorithm)
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	predicted := m.base[f] * work / lanes(h, m.parallelism)
	if predicted <= 0 {
		return
	}
	m.recent[f][laneClass(h)].Add(took.Seconds()/predicted, predicted, now)
}

// Calibrate sets h's family's base from one representative time took of a
// check against h measured with concurrent cores free for its lanes (a
// warm-up hash run alone: runtime.GOMAXPROCS(0)). The recent samples of the
// family are forgotten. Families not calibrated yet have their priors
// rescaled by the same factor.
func (m *CostModel) Calibrate(h *Hash, took time.Duration, concurrent int) {
	work := h.Work()
	if work <= 0 || took <= 0 {
		return
	}
	f := costFamily(h.Algorithm)
	per := took.Seconds() * lanes(h, concurrent) / work
	m.mu.Lock()
	defer m.mu.Unlock()
	factor := per / priors[f]
	m.base[f], m.calibrated[f] = per, true
	for c := range m.recent[f] {
		m.recent[f][c].Reset()
	}
	for g := range numFamilies {
		if !m.calibrated[g] {
			m.base[g] = priors[g] * factor
		}
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
