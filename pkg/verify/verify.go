// Package verify parses stored password hashes, verifies candidate passwords
// against them, and hashes new passwords under a policy.
//
// It understands Argon2id and Argon2i hashes in PHC string format
// ($argon2id$v=19$m=65536,t=3,p=4$<salt>$<key>) and bcrypt hashes in modular
// crypt format ($2a$, $2b$, $2y$). It also verifies, but never writes, the
// legacy formats that systems migrating to Levee hold: PBKDF2-SHA1, -SHA256
// and -SHA512 in passlib's encoding ($pbkdf2-sha256$29000$<salt>$<key>) and
// PBKDF2-SHA1 and -SHA256 in Django's (pbkdf2_sha256$<iterations>$<salt>$<key>),
// scrypt in passlib's encoding ($scrypt$ln=16,r=8,p=1$<salt>$<key>), and
// SHA-crypt ($5$ and $6$, with or without rounds=). A legacy hash always needs
// a rehash. See Verifier.Parse for each format's rules and caps.
//
// The package promises:
//
//   - A stored hash is untrusted input. Parse checks every cap in Limits (the
//     length of the whole string first, then each cost parameter and the
//     encoded length of salt and key) before it allocates anything whose size
//     depends on the input, and it never hashes. A hash asking for 4 GiB of
//     memory or 2^32 iterations is an ErrInvalidHash costing one small
//     allocation, not an allocation of 4 GiB.
//   - Parsing is strict: parameters may come in any order, but duplicate,
//     unknown, missing or non-canonical values (leading zeros, signs, padded
//     or non-canonical base64) are rejected, so every accepted argon2 hash has
//     exactly one canonical encoding, which Hash.String returns. Every
//     accepted legacy hash is already canonical: Hash.String re-encodes it
//     byte for byte.
//   - Every error from Parse matches ErrInvalidHash with errors.Is, and its
//     message names the problem. No error message from this package contains
//     a password, a pepper key or a whole stored hash; at most a parameter
//     value, a pepper key id or an algorithm name, cut to a few dozen bytes.
//   - Verify hashes a candidate with the stored parameters and compares in
//     constant time, and reports whether the stored hash is weaker than the
//     policy so that the caller can store a fresh one.
//   - A Verifier is immutable and safe for concurrent use.
//
// An optional pepper (see Peppers and NewWithPeppers) mixes a server-side
// secret into Argon2id hashes: Argon2's password input is HMAC-SHA256 of the
// password under a versioned key, and the PHC string records the key's id in
// its keyid parameter, so that keys can rotate while old hashes still verify.
//
// bcrypt uses at most 72 bytes of a password. Verify passes a bcrypt check only
// the first 72 bytes of a longer password, which is what the systems that wrote
// such hashes did; see Verifier.Verify.
package verify

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrInvalidHash is matched by every error Parse returns and by Verify
	// when given a hash outside the limits.
	ErrInvalidHash = errors.New("invalid hash")
	// ErrUnsupportedAlgorithm is matched when a stored hash names an algorithm
	// this package does not verify (argon2d, $2x$, $1$ md5-crypt, ...). It also
	// matches ErrInvalidHash.
	ErrUnsupportedAlgorithm = fmt.Errorf("unsupported algorithm: %w", ErrInvalidHash)
	// ErrPasswordTooLong is returned for a password longer than
	// Limits.MaxPasswordLen.
	ErrPasswordTooLong = errors.New("password too long")
	// ErrInvalidLimits is matched by every error from Limits.Validate.
	ErrInvalidLimits = errors.New("invalid limits")
	// ErrInvalidPolicy is matched by every error from Policy.Validate that is
	// not a limits error.
	ErrInvalidPolicy = errors.New("invalid policy")
)

// Algorithm identifies a password-hashing algorithm.
type Algorithm uint8

// The supported algorithms. The zero Algorithm is invalid. Only Argon2id is
// ever written; the others are verified so that their users can log in once
// and be rehashed.
const (
	Argon2id Algorithm = iota + 1
	Argon2i
	Bcrypt
	PBKDF2SHA1   // passlib $pbkdf2$ and Django pbkdf2_sha1
	PBKDF2SHA256 // passlib $pbkdf2-sha256$ and Django pbkdf2_sha256
	PBKDF2SHA512 // passlib $pbkdf2-sha512$
	Scrypt       // passlib $scrypt$
	SHA256Crypt  // $5$
	SHA512Crypt  // $6$
)

// Algorithms lists every supported algorithm, for pre-creating metric series.
func Algorithms() []Algorithm {
	return []Algorithm{Argon2id, Argon2i, Bcrypt, PBKDF2SHA1, PBKDF2SHA256, PBKDF2SHA512, Scrypt, SHA256Crypt, SHA512Crypt}
}

// String returns "argon2id", "argon2i", "bcrypt", "pbkdf2-sha1",
// "pbkdf2-sha256", "pbkdf2-sha512", "scrypt", "sha256-crypt" or
// "sha512-crypt", and "unknown" for any other value, so it is safe as a
// bounded metric label. The name is the algorithm's, not the encoding's: a
// Django and a passlib PBKDF2-SHA256 hash are both "pbkdf2-sha256".
func (a Algorithm) String() string {
	switch a {
	case Argon2id:
		return "argon2id"
	case Argon2i:
		return "argon2i"
	case Bcrypt:
		return "bcrypt"
	case PBKDF2SHA1:
		return "pbkdf2-sha1"
	case PBKDF2SHA256:
		return "pbkdf2-sha256"
	case PBKDF2SHA512:
		return "pbkdf2-sha512"
	case Scrypt:
		return "scrypt"
	case SHA256Crypt:
		return "sha256-crypt"
	case SHA512Crypt:
		return "sha512-crypt"
	default:
		return "unknown"
	}
}

func (a Algorithm) isArgon2() bool { return a == Argon2id || a == Argon2i }

func (a Algorithm) isPBKDF2() bool { return a == PBKDF2SHA1 || a == PBKDF2SHA256 || a == PBKDF2SHA512 }

func (a Algorithm) isShaCrypt() bool { return a == SHA256Crypt || a == SHA512Crypt }

// argon2Version is the only Argon2 version supported: 0x13, written v=19.
const argon2Version = 19

// bcryptMaxPassword is the number of password bytes bcrypt uses.
const bcryptMaxPassword = 72

// bcryptMemoryBytes approximates the memory one bcrypt check allocates: the
// Blowfish state (four 256-entry S-boxes and the P-array) and small buffers.
const bcryptMemoryBytes = 4 << 10

// Params are Argon2 cost parameters. Memory is in KiB.
type Params struct {
	Memory      uint32
	Iterations  uint32
	Parallelism uint8
}

// ScryptParams are scrypt cost parameters: N = 2^LogN, block size R and
// parallelism P.
type ScryptParams struct {
	LogN uint8
	R, P uint32
}

// Hash is a parsed stored hash. Values returned by Parse and HashPassword are
// within the Verifier's limits; Verify re-checks the limits, so a Hash built
// or modified by hand cannot make it allocate more than the limits allow.
type Hash struct {
	Algorithm Algorithm
	Version   int    // 19 for argon2; 0 otherwise
	Params    Params // argon2 only
	Cost      int    // bcrypt only: log2 of the number of rounds
	// Salt and Key are the salt and the derived key (checksum) for every
	// algorithm but bcrypt. A Django or SHA-crypt salt is the salt string's
	// bytes, which is what those algorithms hash.
	Salt, Key []byte
	Rounds    uint32       // PBKDF2 iterations, SHA-crypt rounds
	Scrypt    ScryptParams // scrypt only
	// KeyID is the id of the pepper key an argon2 hash was made under (its
	// PHC keyid parameter, decoded), "" for an unpeppered hash. See Peppers.
	KeyID string

	// bcrypt is the whole bcrypt string; the bcrypt library takes it as is.
	bcrypt string
	// form is the encoding of a legacy hash where an algorithm has more
	// than one; the zero form is passlib's, with an explicit rounds= for
	// SHA-crypt.
	form legacyForm
}

// String returns the canonical encoding of h: for argon2,
// $argon2id$v=19$m=65536,t=3,p=4$<salt>$<key> with parameters in the order
// m, t, p, then keyid for a peppered hash, and keyid, salt and key in
// unpadded standard base64; for bcrypt, the string that was parsed; for a
// legacy hash, its re-encoding in the form it was parsed from, which is byte
// for byte the parsed string. It returns "" for a Hash of no known algorithm.
func (h *Hash) String() string {
	switch {
	case h.Algorithm.isPBKDF2(), h.Algorithm == Scrypt, h.Algorithm.isShaCrypt():
		return h.legacyString()
	case h.Algorithm.isArgon2():
		b := make([]byte, 0, 48+len(",keyid=")+b64.EncodedLen(len(h.KeyID))+b64.EncodedLen(len(h.Salt))+b64.EncodedLen(len(h.Key)))
		b = append(b, '$')
		b = append(b, h.Algorithm.String()...)
		b = append(b, "$v="...)
		b = appendInt(b, int64(h.Version))
		b = append(b, "$m="...)
		b = appendInt(b, int64(h.Params.Memory))
		b = append(b, ",t="...)
		b = appendInt(b, int64(h.Params.Iterations))
		b = append(b, ",p="...)
		b = appendInt(b, int64(h.Params.Parallelism))
		if h.KeyID != "" {
			b = append(b, ",keyid="...)
			b = b64.AppendEncode(b, []byte(h.KeyID))
		}
		b = append(b, '$')
		b = b64.AppendEncode(b, h.Salt)
		b = append(b, '$')
		b = b64.AppendEncode(b, h.Key)
		return string(b)
	case h.Algorithm == Bcrypt:
		return h.bcrypt
	default:
		return ""
	}
}

// Work is the scheduling cost of checking a password against h, in units that
// are comparable only within one algorithm: Memory (KiB) × Iterations for
// argon2, 2^Cost for bcrypt, Rounds for PBKDF2 (one block of output: the key
// is never longer than the digest) and SHA-crypt, N × R × P for scrypt. A
// scheduler keeps one time-per-unit estimate per algorithm and multiplies. It
// is 0 for a Hash of no known algorithm.
func (h *Hash) Work() float64 {
	switch {
	case h.Algorithm.isArgon2():
		return float64(h.Params.Memory) * float64(h.Params.Iterations)
	case h.Algorithm == Bcrypt:
		return math.Ldexp(1, h.Cost)
	case h.Algorithm.isPBKDF2(), h.Algorithm.isShaCrypt():
		return float64(h.Rounds)
	case h.Algorithm == Scrypt:
		return math.Ldexp(float64(h.Scrypt.R)*float64(h.Scrypt.P), int(h.Scrypt.LogN))
	default:
		return 0
	}
}

// MemoryBytes is an upper bound on the memory one check against h allocates:
// Memory × 1024 for argon2 (the implementation rounds Memory down to a
// multiple of 4 × Parallelism blocks), a constant 4 KiB for bcrypt, PBKDF2
// and SHA-crypt (SHA-crypt also copies the password twice, which
// Limits.MaxShaCryptPasswordLen bounds), and 128 × R × (N + P + 2) for scrypt
// (its V array, B and XY buffers), saturating at math.MaxInt64.
func (h *Hash) MemoryBytes() int64 {
	switch {
	case h.Algorithm.isArgon2():
		return int64(h.Params.Memory) * 1024
	case h.Algorithm == Bcrypt, h.Algorithm.isPBKDF2(), h.Algorithm.isShaCrypt():
		return bcryptMemoryBytes
	case h.Algorithm == Scrypt:
		return scryptMemoryBytes(h.Scrypt)
	default:
		return 0
	}
}

// Verifier parses, verifies and hashes under one Policy, one set of Limits
// and, optionally, a set of pepper keys. It is immutable and safe for
// concurrent use.
type Verifier struct {
	policy  Policy
	limits  Limits
	peppers Peppers
}

// New returns a Verifier without pepper after validating l and then p
// against l. It is NewWithPeppers with the zero Peppers.
func New(p Policy, l Limits) (*Verifier, error) {
	return NewWithPeppers(p, l, Peppers{})
}

// NewWithPeppers returns a Verifier that peppers new hashes with
// peppers.Current() and verifies hashes under any of peppers' keys (see
// Peppers), after validating l, p against l, and peppers; the hashes it
// writes, keyid included, must fit Limits.MaxEncodedLen.
func NewWithPeppers(p Policy, l Limits, peppers Peppers) (*Verifier, error) {
	if err := p.Validate(l); err != nil {
		return nil, err
	}
	if err := peppers.Validate(); err != nil {
		return nil, err
	}
	if peppers.current != "" {
		h := Hash{
			Algorithm: Argon2id, Version: argon2Version, Params: p.Params, KeyID: peppers.current,
			Salt: make([]byte, p.SaltLen), Key: make([]byte, p.KeyLen),
		}
		if n := len(h.String()); n > l.MaxEncodedLen {
			return nil, fmt.Errorf("%w: encoded hashes with keyid %q would be %d bytes, over Limits.MaxEncodedLen %d",
				ErrInvalidPolicy, peppers.current, n, l.MaxEncodedLen)
		}
	}
	return &Verifier{policy: p, limits: l, peppers: peppers}, nil
}

// Policy returns the policy v hashes under.
func (v *Verifier) Policy() Policy { return v.policy }

// Limits returns the limits v enforces.
func (v *Verifier) Limits() Limits { return v.limits }

// CheckPassword returns an error wrapping ErrPasswordTooLong when password is
// longer than Limits.MaxPasswordLen. The message states lengths only.
func (v *Verifier) CheckPassword(password []byte) error {
	if len(password) > v.limits.MaxPasswordLen {
		return fmt.Errorf("%w: %d bytes exceeds limit %d", ErrPasswordTooLong, len(password), v.limits.MaxPasswordLen)
	}
	return nil
}

// Verify reports whether password matches h, comparing in constant time, and
// whether h is weaker than the policy (see NeedsRehash); needsRehash does not
// depend on match.
//
// The password is first checked with CheckPassword, and h against the limits
// (an error wrapping ErrInvalidHash), so that a Hash built by hand cannot
// exceed them either. For argon2 and scrypt the derived key has the length
// of h.Key.
//
// An argon2 hash with a KeyID is checked against HMAC-SHA256(key,
// password), as HashPassword wrote it; when the Verifier holds no key of
// that id, Verify hashes nothing and returns an error wrapping
// ErrUnknownPepper that names the id (with needsRehash true, as for any hash
// not under the current key).
//
// A legacy hash (PBKDF2, scrypt, SHA-crypt) always needs a rehash. A
// SHA-crypt check hashes the password twice per round, so its cost grows with
// the password's length: Verify refuses a password longer than
// Limits.MaxShaCryptPasswordLen for SHA-crypt with ErrPasswordTooLong rather
// than let one request cost many times its estimate.
//
// bcrypt uses only the first 72 bytes of a password: the implementations that
// wrote $2a$/$2b$/$2y$ hashes silently ignored the rest, so a longer password
// matches when its first 72 bytes do. Verify truncates explicitly rather than
// relying on the bcrypt library, whose treatment of long passwords has changed
// over time.
func (v *Verifier) Verify(h *Hash, password []byte) (match, needsRehash bool, err error) {
	if err := v.CheckPassword(password); err != nil {
		return false, false, err
	}
	if err := v.checkHash(h); err != nil {
		return false, false, err
	}
	needsRehash = v.NeedsRehash(h)
	switch h.Algorithm {
	case Bcrypt:
		if len(password) > bcryptMaxPassword {
			password = password[:bcryptMaxPassword]
		}
		err := bcrypt.CompareHashAndPassword([]byte(h.bcrypt), password)
		switch {
		case err == nil:
			return true, needsRehash, nil
		case errors.Is(err, bcrypt.ErrMismatchedHashAndPassword):
			return false, needsRehash, nil
		default:
			// Unreachable after checkHash; the library's errors name a
			// byte, a cost or an offset, never the hash.
			return false, needsRehash, fmt.Errorf("verify: bcrypt: %w: %w", ErrInvalidHash, err)
		}
	case PBKDF2SHA1, PBKDF2SHA256, PBKDF2SHA512, Scrypt, SHA256Crypt, SHA512Crypt:
		match, err := v.verifyLegacy(h, password)
		return match, needsRehash, err
	default: // argon2, by checkHash
		input, err := v.peppers.peppered(h.KeyID, password)
		if err != nil {
			return false, needsRehash, err
		}
		key := derive(h.Algorithm, input, h.Salt, h.Params, len(h.Key))
		return subtle.ConstantTimeCompare(key, h.Key) == 1, needsRehash, nil
	}
}

// NeedsRehash reports whether h is weaker than the policy in any dimension:
// any algorithm other than Argon2id (bcrypt and every legacy format always),
// a version other than 19,
// less memory, fewer iterations, a shorter key or a shorter salt. Parallelism
// is not compared: it changes how the work is split, not how much there is.
// It also reports a hash whose pepper is not the current one: a KeyID other
// than Peppers.Current (an old key, or one not loaded at all), or no KeyID
// while a current pepper is set.
// A hash at or above the policy in every dimension, under the current
// pepper or under none when none is set, does not need a rehash.
// A nil Hash needs one.
func (v *Verifier) NeedsRehash(h *Hash) bool {
	if h == nil || h.Algorithm != Argon2id {
		return true
	}
	p := v.policy
	return h.KeyID != v.peppers.current ||
		h.Version != argon2Version ||
		h.Params.Memory < p.Params.Memory ||
		h.Params.Iterations < p.Params.Iterations ||
		len(h.Key) < p.KeyLen ||
		len(h.Salt) < p.SaltLen
}

// HashPassword hashes password with Argon2id under the policy, with a fresh
// salt of Policy.SaltLen bytes read from rand (crypto/rand.Reader when nil).
// With a current pepper, Argon2's password input is HMAC-SHA256(key,
// password) and the Hash's KeyID is the current key's id.
// It returns an error wrapping ErrPasswordTooLong for a password over the
// limit, and the read error if rand fails.
func (v *Verifier) HashPassword(password []byte, rand io.Reader) (*Hash, error) {
	if err := v.CheckPassword(password); err != nil {
		return nil, err
	}
	if rand == nil {
		rand = cryptoRand
	}
	p := v.policy
	salt := make([]byte, p.SaltLen)
	if _, err := io.ReadFull(rand, salt); err != nil {
		return nil, fmt.Errorf("hash password: read salt: %w", err)
	}
	id := v.peppers.current
	input, err := v.peppers.peppered(id, password)
	if err != nil {
		return nil, err // unreachable: the current key is always loaded
	}
	return &Hash{
		Algorithm: Argon2id,
		Version:   argon2Version,
		Params:    p.Params,
		Salt:      salt,
		Key:       derive(Argon2id, input, salt, p.Params, p.KeyLen),
		KeyID:     id,
	}, nil
}

// cryptoRand is named so that HashPassword's parameter can shadow the package.
var cryptoRand = rand.Reader

// PolicyHash returns a Hash with the policy's algorithm and parameters and no
// salt or key, for estimating the cost of hashing a new password with Work and
// MemoryBytes. It cannot be verified against.
func (v *Verifier) PolicyHash() *Hash {
	return &Hash{Algorithm: Argon2id, Version: argon2Version, Params: v.policy.Params}
}

func derive(a Algorithm, password, salt []byte, p Params, keyLen int) []byte {
	if a == Argon2i {
		return argon2.Key(password, salt, p.Iterations, p.Memory, p.Parallelism, uint32(keyLen))
	}
	return argon2.IDKey(password, salt, p.Iterations, p.Memory, p.Parallelism, uint32(keyLen))
}

// checkHash enforces the limits on a Hash that may not have come from Parse.
func (v *Verifier) checkHash(h *Hash) error {
	if h == nil {
		return fmt.Errorf("verify: %w: nil hash", ErrInvalidHash)
	}
	if h.KeyID != "" {
		if !h.Algorithm.isArgon2() {
			return fmt.Errorf("verify: %w: keyid on a %s hash (only argon2 hashes are peppered)", ErrInvalidHash, h.Algorithm)
		}
		if !validPepperID(h.KeyID) {
			return fmt.Errorf("verify: %w: keyid is not a valid key id (1 to %d of A-Z, a-z, 0-9, '_', '-')", ErrInvalidHash, MaxPepperIDLen)
		}
	}
	switch {
	case h.Algorithm == Bcrypt:
		if !strings.HasPrefix(h.bcrypt, "$2") {
			return fmt.Errorf("verify: %w: bcrypt hash without its encoding (use Parse)", ErrInvalidHash)
		}
		_, err := v.checkBcrypt(h.bcrypt)
		return err
	case h.Algorithm.isArgon2():
		if h.Version != argon2Version {
			return newError("unsupported version v=%[2]d (only v=19)", "", uint64(h.Version), 0)
		}
		if e := v.checkParams(h.Params); e != nil {
			return e
		}
		l := v.limits
		if e := checkLen("salt", len(h.Salt), l.MinSaltLen, l.MaxSaltLen); e != nil {
			return e
		}
		if e := checkLen("key", len(h.Key), l.MinKeyLen, l.MaxKeyLen); e != nil {
			return e
		}
		return nil
	case h.Algorithm.isPBKDF2(), h.Algorithm == Scrypt, h.Algorithm.isShaCrypt():
		return v.checkLegacy(h)
	default:
		return fmt.Errorf("verify: %w: algorithm %s", ErrUnsupportedAlgorithm, h.Algorithm)
	}
}

// checkParams checks values that are already numbers; Parse checks the digits
// as it reads them, before they are numbers.
func (v *Verifier) checkParams(p Params) error {
	l := v.limits
	switch {
	case p.Memory > l.MaxMemoryKiB:
		return newError("memory m=%[2]d KiB exceeds limit %[3]d KiB", "", uint64(p.Memory), uint64(l.MaxMemoryKiB))
	case p.Iterations > l.MaxIterations:
		return newError("iterations t=%[2]d exceeds limit %[3]d", "", uint64(p.Iterations), uint64(l.MaxIterations))
	case p.Parallelism > l.MaxParallelism:
		return newError("parallelism p=%[2]d exceeds limit %[3]d", "", uint64(p.Parallelism), uint64(l.MaxParallelism))
	}
	return checkMinimums(p)
}

// checkMinimums enforces Argon2's own lower bounds.
func checkMinimums(p Params) error {
	switch {
	case p.Iterations < 1:
		return newError("iterations t=%[2]d is below minimum 1", "", uint64(p.Iterations), 0)
	case p.Parallelism < 1:
		return newError("parallelism p=%[2]d is below minimum 1", "", uint64(p.Parallelism), 0)
	case uint64(p.Memory) < 8*uint64(p.Parallelism):
		return newError("memory m=%[2]d KiB is below minimum 8*p=%[3]d KiB", "", uint64(p.Memory), 8*uint64(p.Parallelism))
	}
	return nil
}

func checkLen(field string, n, lo, hi int) error {
	switch {
	case n < lo:
		return newError("%[1]s: %[2]d bytes is below minimum %[3]d", field, uint64(n), uint64(lo))
	case n > hi:
		return newError("%[1]s: %[2]d bytes exceeds limit %[3]d", field, uint64(n), uint64(hi))
	}
	return nil
}
