package verify

import "fmt"

// Floors that Limits.Validate enforces.
const (
	// minSaltFloor is the shortest salt the Argon2 reference implementation
	// accepts.
	minSaltFloor = 8
	// minKeyFloor: a shorter tag is cheap to forge by brute force on the tag
	// alone, whatever the cost parameters say.
	minKeyFloor = 16
)

// MaxRequestSize bounds one Verify or Hash request message on every hop of
// the fleet (gateway and verifier alike): a password and a stored hash fit
// in a few KiB, so nothing larger is read into memory. One bound for all
// hops, so that a request the gateway accepts is never refused by the
// verifier it forwards to (that refusal, RESOURCE_EXHAUSTED, once read as
// overload, let padded requests hold the gateway's limit at its floor).
const MaxRequestSize = 16 << 10

// Limits cap what a stored hash may ask of the machine. Parse rejects any hash
// beyond them before allocating for it.
type Limits struct {
	// MaxEncodedLen caps the length in bytes of a whole stored-hash string.
	MaxEncodedLen int
	// MaxPasswordLen caps the length in bytes of a password. bcrypt uses
	// only the first 72 bytes of what is allowed here.
	MaxPasswordLen int
	// MaxMemoryKiB caps argon2 m. Argon2's own floor, m >= 8*p, is a format
	// rule that Parse always enforces.
	MaxMemoryKiB uint32
	// MaxIterations caps argon2 t.
	MaxIterations uint32
	// MaxParallelism caps argon2 p.
	MaxParallelism uint8
	// MinSaltLen and MaxSaltLen bound the decoded argon2 salt, in bytes.
	// MaxSaltLen also caps the salt of PBKDF2 and scrypt hashes; their
	// minimum is their format's (a legacy hash is only ever verified, and
	// then replaced).
	MinSaltLen, MaxSaltLen int
	// MinKeyLen and MaxKeyLen bound the decoded argon2 and scrypt key (tag),
	// in bytes. PBKDF2 and SHA-crypt keys are exactly one digest long.
	MinKeyLen, MaxKeyLen int
	// MaxBcryptCost caps the bcrypt cost, the log2 of its rounds.
	MaxBcryptCost int

	// MaxPBKDF2Iterations caps the iterations of a PBKDF2 hash (passlib or
	// Django).
	MaxPBKDF2Iterations uint32
	// MaxScryptLogN, MaxScryptR and MaxScryptP cap scrypt's log2 N, r and p
	// one by one. Scrypt's memory, 128 × r × N bytes, is further capped by
	// MaxMemoryKiB, and its work N × r × p by MaxScryptWork.
	MaxScryptLogN uint8
	MaxScryptR    uint32
	MaxScryptP    uint32
	// MaxScryptWork caps N × r × p: x/crypto/scrypt runs its p
	// memory-hard passes one after another, so p multiplies the time but
	// not the memory.
	MaxScryptWork uint64
	// MaxShaCryptRounds caps the rounds of a SHA-crypt ($5$, $6$) hash.
	MaxShaCryptRounds uint32
	// MaxShaCryptPasswordLen caps the length of a password checked against
	// a SHA-crypt hash: each round hashes the password twice, so a long
	// password multiplies the cost that Hash.Work predicts.
	MaxShaCryptPasswordLen int
}

// Hard bounds for the legacy caps, which keep the arithmetic of the checks
// from overflowing and stay inside what x/crypto/scrypt accepts (r × p <
// 2^30).
const (
	maxScryptLogNBound = 40
	maxScryptRBound    = 1 << 16
	maxScryptPBound    = 1 << 12
	shaCryptMinRounds  = 1000      // glibc raises anything lower to this
	shaCryptMaxRounds  = 999999999 // glibc lowers anything higher to this
)

// DefaultLimits returns limits that admit the hashes real deployments
// write, with a little headroom, and no more: a caller chooses the stored
// hash it sends, so every cap is also a bound on the work one call may ask
// of a verifier. docs/verifier.md ("Caps") says where each figure comes from
// and how to raise one for a fleet whose stored hashes need it.
//
// Argon2: at most 256 MiB (libsodium's MODERATE), 8 passes (PHP writes 4,
// Keycloak 5, libsodium 3 or 4) and 16 lanes; the worst admitted hash is
// 10.7× the default policy (64 MiB, 3 passes). bcrypt: cost 13 (frameworks
// write 10 to 12). PBKDF2: 1,300,000 iterations (OWASP's figure for
// SHA-1, the highest it recommends; Django 6.0 writes 1,200,000, passlib
// 29,000 for SHA-256). scrypt: log2 N at most 18, r at most 32, p at most
// 16, at most MaxMemoryKiB of memory and N × r × p at most 2^20 (passlib
// writes ln=16,r=8,p=1, 2^19; Django ln=14,r=8,p=5, 2^19.3). SHA-crypt:
// 700,000 rounds (passlib writes 656,000 for $6$ and 535,000 for $5$,
// glibc 5,000) for passwords of at most 256 bytes.
func DefaultLimits() Limits {
	return Limits{
		MaxEncodedLen:  512,
		MaxPasswordLen: 4096,
		MaxMemoryKiB:   256 << 10, // 256 MiB
		MaxIterations:  8,
		MaxParallelism: 16,
		MinSaltLen:     8,
		MaxSaltLen:     64,
		MinKeyLen:      16,
		MaxKeyLen:      128,
		MaxBcryptCost:  13,

		MaxPBKDF2Iterations:    1_300_000,
		MaxScryptLogN:          18,
		MaxScryptR:             32,
		MaxScryptP:             16,
		MaxScryptWork:          1 << 20,
		MaxShaCryptRounds:      700_000,
		MaxShaCryptPasswordLen: 256,
	}
}

// WidestLimits are the widest limits Validate accepts, within what one
// request (MaxRequestSize) can carry: a hash they refuse, no verifier could
// be configured to accept. A gateway parses with them, so that it refuses
// malformed input before a hop but never a hash that a verifier with wider
// limits than the default (levee calibrate may print -max-memory-kib) would
// verify; each verifier applies its own limits.
func WidestLimits() Limits {
	const most = ^uint32(0)
	return Limits{
		MaxEncodedLen:  MaxRequestSize,
		MaxPasswordLen: MaxRequestSize,
		MaxMemoryKiB:   most,
		MaxIterations:  most,
		MaxParallelism: ^uint8(0),
		MinSaltLen:     minSaltFloor,
		MaxSaltLen:     MaxRequestSize,
		MinKeyLen:      minKeyFloor,
		MaxKeyLen:      MaxRequestSize,
		MaxBcryptCost:  bcryptMaxCost,

		MaxPBKDF2Iterations:    most,
		MaxScryptLogN:          maxScryptLogNBound,
		MaxScryptR:             maxScryptRBound,
		MaxScryptP:             maxScryptPBound,
		MaxScryptWork:          ^uint64(0),
		MaxShaCryptRounds:      shaCryptMaxRounds,
		MaxShaCryptPasswordLen: MaxRequestSize,
	}
}

// Validate returns an error wrapping ErrInvalidLimits naming the first field
// that is out of range: every maximum must be at least 1 (MaxMemoryKiB at
// least 8, Argon2's minimum for p=1), MinSaltLen at least 8, MinKeyLen at
// least 16, each minimum at most its maximum, MaxBcryptCost within
// bcrypt's 4..31, MaxScryptLogN within 1..40, MaxScryptR within 1..65536,
// MaxScryptP within 1..4096, MaxScryptWork at least 2, MaxShaCryptRounds
// within SHA-crypt's 1000..999999999, and MaxShaCryptPasswordLen at least 1.
func (l Limits) Validate() error {
	switch {
	case l.MaxEncodedLen < 1:
		return fmt.Errorf("%w: MaxEncodedLen %d is below 1", ErrInvalidLimits, l.MaxEncodedLen)
	case l.MaxPasswordLen < 1:
		return fmt.Errorf("%w: MaxPasswordLen %d is below 1", ErrInvalidLimits, l.MaxPasswordLen)
	case l.MaxMemoryKiB < 8:
		return fmt.Errorf("%w: MaxMemoryKiB %d is below 8", ErrInvalidLimits, l.MaxMemoryKiB)
	case l.MaxIterations < 1:
		return fmt.Errorf("%w: MaxIterations %d is below 1", ErrInvalidLimits, l.MaxIterations)
	case l.MaxParallelism < 1:
		return fmt.Errorf("%w: MaxParallelism %d is below 1", ErrInvalidLimits, l.MaxParallelism)
	case l.MinSaltLen < minSaltFloor:
		return fmt.Errorf("%w: MinSaltLen %d is below %d", ErrInvalidLimits, l.MinSaltLen, minSaltFloor)
	case l.MaxSaltLen < l.MinSaltLen:
		return fmt.Errorf("%w: MaxSaltLen %d is below MinSaltLen %d", ErrInvalidLimits, l.MaxSaltLen, l.MinSaltLen)
	case l.MinKeyLen < minKeyFloor:
		return fmt.Errorf("%w: MinKeyLen %d is below %d", ErrInvalidLimits, l.MinKeyLen, minKeyFloor)
	case l.MaxKeyLen < l.MinKeyLen:
		return fmt.Errorf("%w: MaxKeyLen %d is below MinKeyLen %d", ErrInvalidLimits, l.MaxKeyLen, l.MinKeyLen)
	case l.MaxBcryptCost < bcryptMinCost || l.MaxBcryptCost > bcryptMaxCost:
		return fmt.Errorf("%w: MaxBcryptCost %d is outside %d..%d", ErrInvalidLimits, l.MaxBcryptCost, bcryptMinCost, bcryptMaxCost)
	case l.MaxPBKDF2Iterations < 1:
		return fmt.Errorf("%w: MaxPBKDF2Iterations %d is below 1", ErrInvalidLimits, l.MaxPBKDF2Iterations)
	case l.MaxScryptLogN < 1 || l.MaxScryptLogN > maxScryptLogNBound:
		return fmt.Errorf("%w: MaxScryptLogN %d is outside 1..%d", ErrInvalidLimits, l.MaxScryptLogN, maxScryptLogNBound)
	case l.MaxScryptR < 1 || l.MaxScryptR > maxScryptRBound:
		return fmt.Errorf("%w: MaxScryptR %d is outside 1..%d", ErrInvalidLimits, l.MaxScryptR, maxScryptRBound)
	case l.MaxScryptP < 1 || l.MaxScryptP > maxScryptPBound:
		return fmt.Errorf("%w: MaxScryptP %d is outside 1..%d", ErrInvalidLimits, l.MaxScryptP, maxScryptPBound)
	case l.MaxScryptWork < 2:
		return fmt.Errorf("%w: MaxScryptWork %d is below 2", ErrInvalidLimits, l.MaxScryptWork)
	case l.MaxShaCryptRounds < shaCryptMinRounds || l.MaxShaCryptRounds > shaCryptMaxRounds:
		return fmt.Errorf("%w: MaxShaCryptRounds %d is outside %d..%d", ErrInvalidLimits, l.MaxShaCryptRounds, shaCryptMinRounds, shaCryptMaxRounds)
	case l.MaxShaCryptPasswordLen < 1:
		return fmt.Errorf("%w: MaxShaCryptPasswordLen %d is below 1", ErrInvalidLimits, l.MaxShaCryptPasswordLen)
	}
	return nil
}

// Policy is how new passwords are hashed (always Argon2id, version 19) and
// the bar below which Verify reports that a stored hash needs a rehash.
type Policy struct {
	Params  Params
	SaltLen int // bytes
	KeyLen  int // bytes
}

// DefaultPolicy returns Argon2id with m=65536 (64 MiB), t=3, p=4, the second
// recommended option of RFC 9106, with a 16-byte salt and a 32-byte key.
func DefaultPolicy() Policy {
	return Policy{
		Params:  Params{Memory: 64 << 10, Iterations: 3, Parallelism: 4},
		SaltLen: 16,
		KeyLen:  32,
	}
}

// Validate checks l with Limits.Validate, then that p fits within l (so that
// the Verifier can parse every hash it produces) and satisfies Argon2's own
// minimums. It returns an error wrapping ErrInvalidLimits or ErrInvalidPolicy
// that names the first offending field.
func (p Policy) Validate(l Limits) error {
	if err := l.Validate(); err != nil {
		return err
	}
	pp := p.Params
	switch {
	case pp.Parallelism < 1:
		return fmt.Errorf("%w: Params.Parallelism %d is below 1", ErrInvalidPolicy, pp.Parallelism)
	case pp.Parallelism > l.MaxParallelism:
		return fmt.Errorf("%w: Params.Parallelism %d exceeds Limits.MaxParallelism %d", ErrInvalidPolicy, pp.Parallelism, l.MaxParallelism)
	case pp.Iterations < 1:
		return fmt.Errorf("%w: Params.Iterations %d is below 1", ErrInvalidPolicy, pp.Iterations)
	case pp.Iterations > l.MaxIterations:
		return fmt.Errorf("%w: Params.Iterations %d exceeds Limits.MaxIterations %d", ErrInvalidPolicy, pp.Iterations, l.MaxIterations)
	case uint64(pp.Memory) < 8*uint64(pp.Parallelism):
		return fmt.Errorf("%w: Params.Memory %d KiB is below 8*Parallelism = %d KiB", ErrInvalidPolicy, pp.Memory, 8*uint64(pp.Parallelism))
	case pp.Memory > l.MaxMemoryKiB:
		return fmt.Errorf("%w: Params.Memory %d KiB exceeds Limits.MaxMemoryKiB %d", ErrInvalidPolicy, pp.Memory, l.MaxMemoryKiB)
	case p.SaltLen < l.MinSaltLen:
		return fmt.Errorf("%w: SaltLen %d is below Limits.MinSaltLen %d", ErrInvalidPolicy, p.SaltLen, l.MinSaltLen)
	case p.SaltLen > l.MaxSaltLen:
		return fmt.Errorf("%w: SaltLen %d exceeds Limits.MaxSaltLen %d", ErrInvalidPolicy, p.SaltLen, l.MaxSaltLen)
	case p.KeyLen < l.MinKeyLen:
		return fmt.Errorf("%w: KeyLen %d is below Limits.MinKeyLen %d", ErrInvalidPolicy, p.KeyLen, l.MinKeyLen)
	case p.KeyLen > l.MaxKeyLen:
		return fmt.Errorf("%w: KeyLen %d exceeds Limits.MaxKeyLen %d", ErrInvalidPolicy, p.KeyLen, l.MaxKeyLen)
	}
	h := Hash{
		Algorithm: Argon2id, Version: argon2Version, Params: pp,
		Salt: make([]byte, p.SaltLen), Key: make([]byte, p.KeyLen),
	}
	if n := len(h.String()); n > l.MaxEncodedLen {
		return fmt.Errorf("%w: encoded hashes would be %d bytes, over Limits.MaxEncodedLen %d", ErrInvalidPolicy, n, l.MaxEncodedLen)
	}
	return nil
}
