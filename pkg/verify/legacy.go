package verify

import (
	"crypto/pbkdf2"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"math"
	"strings"

	"golang.org/x/crypto/scrypt"
)

// Legacy formats: verified so that their users can log in once and be
// rehashed with Argon2id; never written. Each is parsed strictly, so that the
// parsed string is the only encoding of its Hash and Hash.String gives it
// back.

// legacyForm tells apart the encodings of one algorithm.
type legacyForm uint8

const (
	formPasslib        legacyForm = iota // passlib's $pbkdf2…$ and $scrypt$; SHA-crypt with rounds=
	formDjango                           // Django's pbkdf2_sha256$…
	formImplicitRounds                   // SHA-crypt without rounds= (5000)
)

// ab64 is passlib's "adapted base64": the standard alphabet with '.' for '+',
// unpadded. Strict rejects non-canonical trailing bits.
var ab64 = base64.NewEncoding("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789./").WithPadding(base64.NoPadding).Strict()

// djangoB64 is the encoding of a Django PBKDF2 key: standard and padded.
var djangoB64 = base64.StdEncoding.Strict()

// pbkdf2Size is the digest size of a PBKDF2 algorithm, which is the length of
// its key in both encodings.
func pbkdf2Size(a Algorithm) int {
	switch a {
	case PBKDF2SHA1:
		return sha1.Size
	case PBKDF2SHA256:
		return sha256.Size
	default:
		return sha512.Size
	}
}

// passlibName is the passlib identifier of a legacy algorithm.
func passlibName(a Algorithm) string {
	switch a {
	case PBKDF2SHA1:
		return "pbkdf2"
	case PBKDF2SHA256:
		return "pbkdf2-sha256"
	case PBKDF2SHA512:
		return "pbkdf2-sha512"
	case Scrypt:
		return "scrypt"
	case SHA256Crypt:
		return "5"
	default:
		return "6"
	}
}

// Formats for the messages about missing or extra fields.
const (
	wantPBKDF2SHA1   = "$pbkdf2$<rounds>$<salt>$<checksum>"
	wantPBKDF2SHA256 = "$pbkdf2-sha256$<rounds>$<salt>$<checksum>"
	wantPBKDF2SHA512 = "$pbkdf2-sha512$<rounds>$<salt>$<checksum>"
	wantDjangoSHA1   = "pbkdf2_sha1$<iterations>$<salt>$<hash>"
	wantDjangoSHA256 = "pbkdf2_sha256$<iterations>$<salt>$<hash>"
	wantScrypt       = "$scrypt$ln=,r=,p=$<salt>$<checksum>"
	wantSHA256Crypt  = "$5$[rounds=<n>$]<salt>$<checksum>"
	wantSHA512Crypt  = "$6$[rounds=<n>$]<salt>$<checksum>"
)

// cutFields splits s into exactly len(fields) '$'-separated fields without
// allocating; want, a constant, describes the format in error messages.
func cutFields(a Algorithm, s string, fields []string, want string) error {
	n := len(fields)
	switch c := strings.Count(s, "$"); {
	case c < n-1:
		e := newError("missing fields: want %[4]s", "", 0, 0).in(a)
		e.label = want
		return e
	case c > n-1:
		e := newError("extra fields: want %[4]s", "", 0, 0).in(a)
		e.label = want
		return e
	}
	for i := range n - 1 {
		fields[i], s, _ = strings.Cut(s, "$")
	}
	fields[n-1] = s
	return nil
}

// checkAB64 validates enc as canonical ab64 of between lo and hi bytes
// without decoding it, and returns the decoded length.
func checkAB64(a Algorithm, field, enc string, lo, hi int) (int, error) {
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '.', c == '/':
		case c == '=':
			return 0, newError("%[1]s: illegal base64 (padding not allowed)", field, 0, 0).in(a)
		default:
			return 0, newError("%[1]s: illegal base64 character at offset %[2]d", field, uint64(i), 0).in(a)
		}
	}
	if len(enc)%4 == 1 {
		return 0, newError("%[1]s: illegal base64 (impossible length %[2]d)", field, uint64(len(enc)), 0).in(a)
	}
	n := ab64.DecodedLen(len(enc))
	if n < lo || n > hi {
		return 0, legacyLenError(a, field, n, lo, hi)
	}
	if r := len(enc) % 4; r != 0 {
		mask := byte(0x0f)
		if r == 3 {
			mask = 0x03
		}
		// ab64 differs from the standard alphabet only at 62, '.'.
		c := enc[len(enc)-1]
		if c == '.' {
			c = '+'
		}
		if stdIndex(c)&mask != 0 {
			return 0, newError("%[1]s: illegal base64 (non-canonical trailing bits)", field, 0, 0).in(a)
		}
	}
	return n, nil
}

func legacyLenError(a Algorithm, field string, n, lo, hi int) error {
	if n < lo {
		return newError("%[1]s: %[2]d bytes is below minimum %[3]d", field, uint64(n), uint64(lo)).in(a)
	}
	return newError("%[1]s: %[2]d bytes exceeds limit %[3]d", field, uint64(n), uint64(hi)).in(a)
}

// checkSaltString validates a salt that the algorithm uses as a string
// (Django, SHA-crypt): printable ASCII other than '$', at most hi bytes.
func checkSaltString(a Algorithm, salt string, lo, hi int) error {
	if len(salt) < lo || len(salt) > hi {
		return legacyLenError(a, "salt", len(salt), lo, hi)
	}
	for i := 0; i < len(salt); i++ {
		if c := salt[i]; c <= ' ' || c > '~' {
			return newError("salt: illegal character at offset %[2]d (want printable ASCII)", "", uint64(i), 0).in(a)
		}
	}
	return nil
}

// inAlg attributes a parse error from a shared helper to a legacy algorithm.
func inAlg(err error, a Algorithm) error {
	if pe, ok := err.(*parseError); ok {
		pe.in(a)
	}
	return err
}

// parsePBKDF2 parses what follows "$pbkdf2$", "$pbkdf2-sha256$" or
// "$pbkdf2-sha512$": <rounds>$<salt>$<checksum>, salt and checksum in ab64.
func (v *Verifier) parsePBKDF2(a Algorithm, rest string) (*Hash, error) {
	var f [3]string
	want := wantPBKDF2SHA512
	switch a {
	case PBKDF2SHA1:
		want = wantPBKDF2SHA1
	case PBKDF2SHA256:
		want = wantPBKDF2SHA256
	}
	if err := cutFields(a, rest, f[:], want); err != nil {
		return nil, err
	}
	rounds, err := v.parseRounds(a, "iterations", f[0], 1)
	if err != nil {
		return nil, err
	}
	l := &v.limits
	saltLen, err := checkAB64(a, "salt", f[1], 0, l.MaxSaltLen)
	if err != nil {
		return nil, err
	}
	size := pbkdf2Size(a)
	if _, err := checkAB64(a, "checksum", f[2], size, size); err != nil {
		return nil, err
	}
	buf := make([]byte, saltLen+size)
	salt, key := buf[:saltLen:saltLen], buf[saltLen:]
	if _, err := ab64.Decode(salt, []byte(f[1])); err != nil {
		return nil, newError("salt: illegal base64", "", 0, 0).in(a) // unreachable after checkAB64
	}
	if _, err := ab64.Decode(key, []byte(f[2])); err != nil {
		return nil, newError("checksum: illegal base64", "", 0, 0).in(a) // unreachable after checkAB64
	}
	return &Hash{Algorithm: a, Rounds: rounds, Salt: salt, Key: key}, nil
}

// parseDjango parses what follows Django's "pbkdf2_sha1$" or
// "pbkdf2_sha256$": <iterations>$<salt>$<hash>. The salt is a plain string;
// the hash is padded standard base64.
func (v *Verifier) parseDjango(a Algorithm, rest string) (*Hash, error) {
	var f [3]string
	want := wantDjangoSHA256
	if a == PBKDF2SHA1 {
		want = wantDjangoSHA1
	}
	if err := cutFields(a, rest, f[:], want); err != nil {
		return nil, err
	}
	rounds, err := v.parseRounds(a, "iterations", f[0], 1)
	if err != nil {
		return nil, err
	}
	if err := checkSaltString(a, f[1], 1, v.limits.MaxSaltLen); err != nil {
		return nil, err
	}
	size := pbkdf2Size(a)
	enc := f[2]
	if want := djangoB64.EncodedLen(size); len(enc) != want {
		return nil, newError("hash: %[2]d characters, want %[3]d (padded base64 of one digest)", "", uint64(len(enc)), uint64(want)).in(a)
	}
	unpadded := base64.RawStdEncoding.EncodedLen(size)
	if _, err := checkBase64("hash", enc[:unpadded], size, size); err != nil {
		return nil, inAlg(err, a)
	}
	if strings.Count(enc[unpadded:], "=") != len(enc)-unpadded {
		return nil, newError("hash: illegal base64 padding", "", 0, 0).in(a)
	}
	buf := make([]byte, len(f[1])+size)
	salt, key := buf[:len(f[1]):len(f[1])], buf[len(f[1]):]
	copy(salt, f[1])
	if _, err := b64.Decode(key, []byte(enc[:unpadded])); err != nil {
		return nil, newError("hash: illegal base64", "", 0, 0).in(a) // unreachable after checkBase64
	}
	return &Hash{Algorithm: a, Rounds: rounds, Salt: salt, Key: key, form: formDjango}, nil
}

// parseRounds parses a canonical decimal iteration or round count between lo
// and the algorithm's cap; what is "iterations" or "rounds".
func (v *Verifier) parseRounds(a Algorithm, what, digits string, lo uint64) (uint32, error) {
	max := v.roundsCap(a)
	tooBig := "iterations %[1]s exceeds limit %[3]d"
	if what == "rounds" {
		tooBig = "rounds %[1]s exceeds limit %[3]d"
	}
	n, err := parseDecimal(what, digits, digits, max, tooBig)
	if err != nil {
		return 0, inAlg(err, a)
	}
	if n < lo {
		return 0, newError("%[1]s %[2]d is below minimum %[3]d", what, n, lo).in(a)
	}
	return uint32(n), nil
}

func (v *Verifier) roundsCap(a Algorithm) uint64 {
	if a.isShaCrypt() {
		return uint64(v.limits.MaxShaCryptRounds)
	}
	return uint64(v.limits.MaxPBKDF2Iterations)
}

// parseScrypt parses what follows "$scrypt$": ln=<log2 N>,r=<r>,p=<p>$<salt>$<checksum>,
// the parameters in that order, salt and checksum in unpadded standard base64.
func (v *Verifier) parseScrypt(rest string) (*Hash, error) {
	const a = Scrypt
	var f [3]string
	if err := cutFields(a, rest, f[:], wantScrypt); err != nil {
		return nil, err
	}
	l := &v.limits
	var sp ScryptParams
	params := f[0]
	for i, name := range [...]string{"ln", "r", "p"} {
		kv, more, found := strings.Cut(params, ",")
		if found != (i < 2) {
			return nil, newError("malformed parameters %[1]q (want ln=,r=,p=)", f[0], 0, 0).in(Scrypt)
		}
		val, ok := strings.CutPrefix(kv, name+"=")
		if !ok {
			e := newError("malformed parameter %[1]q (want %[4]s=)", kv, 0, 0).in(Scrypt)
			e.label = name
			return nil, e
		}
		var max uint64
		switch i {
		case 0:
			max = uint64(l.MaxScryptLogN)
		case 1:
			max = uint64(l.MaxScryptR)
		default:
			max = uint64(l.MaxScryptP)
		}
		n, err := parseDecimal("parameter", kv, val, max, "parameter %[1]s exceeds limit %[3]d")
		if err != nil {
			return nil, inAlg(err, Scrypt)
		}
		if n < 1 {
			return nil, newError("parameter %[1]s is below minimum 1", kv, 0, 0).in(Scrypt)
		}
		switch i {
		case 0:
			sp.LogN = uint8(n)
		case 1:
			sp.R = uint32(n)
		default:
			sp.P = uint32(n)
		}
		params = more
	}
	if err := v.checkScrypt(sp); err != nil {
		return nil, err
	}
	// Unlike its PBKDF2 hashes, passlib's scrypt hashes use the standard
	// alphabet.
	saltLen, err := checkBase64("salt", f[1], 0, l.MaxSaltLen)
	if err != nil {
		return nil, inAlg(err, a)
	}
	keyLen, err := checkBase64("checksum", f[2], l.MinKeyLen, l.MaxKeyLen)
	if err != nil {
		return nil, inAlg(err, a)
	}
	buf := make([]byte, saltLen+keyLen)
	salt, key := buf[:saltLen:saltLen], buf[saltLen:]
	if _, err := b64.Decode(salt, []byte(f[1])); err != nil {
		return nil, newError("salt: illegal base64", "", 0, 0).in(Scrypt) // unreachable after checkBase64
	}
	if _, err := b64.Decode(key, []byte(f[2])); err != nil {
		return nil, newError("checksum: illegal base64", "", 0, 0).in(Scrypt) // unreachable after checkBase64
	}
	return &Hash{Algorithm: a, Scrypt: sp, Salt: salt, Key: key}, nil
}

// checkScrypt checks scrypt parameters that are already numbers against the
// limits, memory and work included, without overflowing.
func (v *Verifier) checkScrypt(sp ScryptParams) error {
	l := &v.limits
	switch {
	case sp.LogN < 1 || sp.R < 1 || sp.P < 1:
		return newError("ln, r and p must each be at least 1", "", 0, 0).in(Scrypt)
	case sp.LogN > l.MaxScryptLogN:
		return newError("parameter ln=%[2]d exceeds limit %[3]d", "", uint64(sp.LogN), uint64(l.MaxScryptLogN)).in(Scrypt)
	case sp.R > l.MaxScryptR:
		return newError("parameter r=%[2]d exceeds limit %[3]d", "", uint64(sp.R), uint64(l.MaxScryptR)).in(Scrypt)
	case sp.P > l.MaxScryptP:
		return newError("parameter p=%[2]d exceeds limit %[3]d", "", uint64(sp.P), uint64(l.MaxScryptP)).in(Scrypt)
	}
	// LogN <= 40, R <= 2^16 and P <= 2^12 by Limits.Validate: no overflow.
	if mem := uint64(128*sp.R) << sp.LogN; mem > uint64(l.MaxMemoryKiB)*1024 {
		return newError("memory 128*r*N = %[2]d KiB exceeds limit %[3]d KiB", "", mem/1024, uint64(l.MaxMemoryKiB)).in(Scrypt)
	}
	if work := uint64(sp.R) * uint64(sp.P) << sp.LogN; work > l.MaxScryptWork {
		return newError("work N*r*p = %[2]d exceeds limit %[3]d", "", work, l.MaxScryptWork).in(Scrypt)
	}
	return nil
}

// scryptMemoryBytes is what x/crypto/scrypt allocates: V of 128·r·N bytes,
// XY of 256·r and B of 128·r·p, saturating.
func scryptMemoryBytes(sp ScryptParams) int64 {
	if sp.LogN > 62 {
		return math.MaxInt64
	}
	blocks := uint64(1)<<sp.LogN + uint64(sp.P) + 2
	per := uint64(128) * uint64(sp.R)
	if per != 0 && blocks > math.MaxInt64/per {
		return math.MaxInt64
	}
	return int64(blocks * per)
}

// parseShaCrypt parses what follows "$5$" or "$6$": [rounds=<n>$]<salt>$<checksum>.
func (v *Verifier) parseShaCrypt(a Algorithm, rest string) (*Hash, error) {
	rounds, form := uint32(shaCryptDefaultRounds), formImplicitRounds
	if r, ok := strings.CutPrefix(rest, "rounds="); ok {
		digits, more, found := strings.Cut(r, "$")
		if !found {
			e := newError("missing fields: want %[4]s", "", 0, 0).in(a)
			e.label = wantSHA512Crypt
			if a == SHA256Crypt {
				e.label = wantSHA256Crypt
			}
			return nil, e
		}
		n, err := v.parseRounds(a, "rounds", digits, shaCryptMinRounds)
		if err != nil {
			return nil, err
		}
		rounds, form, rest = n, formPasslib, more
	}
	var f [2]string
	want := wantSHA512Crypt
	if a == SHA256Crypt {
		want = wantSHA256Crypt
	}
	if err := cutFields(a, rest, f[:], want); err != nil {
		return nil, err
	}
	if err := checkSaltString(a, f[0], 0, shaCryptSaltMax); err != nil {
		return nil, err
	}
	_, encLen := shaCryptOrder(a)
	if len(f[1]) != encLen {
		return nil, newError("checksum: %[2]d characters, want %[3]d", "", uint64(len(f[1])), uint64(encLen)).in(a)
	}
	if err := checkHash64(a, f[1]); err != nil {
		return nil, err
	}
	size := sha256.Size
	if a == SHA512Crypt {
		size = sha512.Size
	}
	buf := make([]byte, len(f[0])+size)
	salt, key := buf[:len(f[0]):len(f[0])], buf[len(f[0]):]
	copy(salt, f[0])
	decodeHash64(key, a, f[1])
	return &Hash{Algorithm: a, Rounds: rounds, Salt: salt, Key: key, form: form}, nil
}

// legacyString re-encodes a legacy hash in its form.
func (h *Hash) legacyString() string {
	a := h.Algorithm
	b := make([]byte, 0, 64+2*len(h.Salt)+2*len(h.Key))
	switch {
	case a.isPBKDF2() && h.form == formDjango:
		if a == PBKDF2SHA1 {
			b = append(b, "pbkdf2_sha1$"...)
		} else {
			b = append(b, "pbkdf2_sha256$"...)
		}
		b = appendInt(b, int64(h.Rounds))
		b = append(b, '$')
		b = append(b, h.Salt...)
		b = append(b, '$')
		b = djangoB64.AppendEncode(b, h.Key)
	case a.isPBKDF2():
		b = append(b, '$')
		b = append(b, passlibName(a)...)
		b = append(b, '$')
		b = appendInt(b, int64(h.Rounds))
		b = append(b, '$')
		b = ab64.AppendEncode(b, h.Salt)
		b = append(b, '$')
		b = ab64.AppendEncode(b, h.Key)
	case a == Scrypt:
		b = append(b, "$scrypt$ln="...)
		b = appendInt(b, int64(h.Scrypt.LogN))
		b = append(b, ",r="...)
		b = appendInt(b, int64(h.Scrypt.R))
		b = append(b, ",p="...)
		b = appendInt(b, int64(h.Scrypt.P))
		b = append(b, '$')
		b = b64.AppendEncode(b, h.Salt)
		b = append(b, '$')
		b = b64.AppendEncode(b, h.Key)
	default: // SHA-crypt
		b = append(b, '$')
		b = append(b, passlibName(a)...)
		b = append(b, '$')
		if h.form != formImplicitRounds || h.Rounds != shaCryptDefaultRounds {
			b = append(b, "rounds="...)
			b = appendInt(b, int64(h.Rounds))
			b = append(b, '$')
		}
		b = append(b, h.Salt...)
		b = append(b, '$')
		if order, _ := shaCryptOrder(a); len(h.Key) == len(order) {
			b = appendHash64(b, a, h.Key)
		}
	}
	return string(b)
}

// checkLegacy enforces the limits on a legacy Hash that may not have come
// from Parse.
func (v *Verifier) checkLegacy(h *Hash) error {
	a, l := h.Algorithm, &v.limits
	switch {
	case a.isPBKDF2():
		if h.Rounds < 1 || uint64(h.Rounds) > v.roundsCap(a) {
			return newError("iterations %[2]d outside 1..%[3]d", "", uint64(h.Rounds), v.roundsCap(a)).in(a)
		}
		if len(h.Salt) > l.MaxSaltLen {
			return legacyLenError(a, "salt", len(h.Salt), 0, l.MaxSaltLen)
		}
		if size := pbkdf2Size(a); len(h.Key) != size {
			return legacyLenError(a, "key", len(h.Key), size, size)
		}
	case a == Scrypt:
		if err := v.checkScrypt(h.Scrypt); err != nil {
			return err
		}
		if len(h.Salt) > l.MaxSaltLen {
			return legacyLenError(a, "salt", len(h.Salt), 0, l.MaxSaltLen)
		}
		if len(h.Key) < l.MinKeyLen || len(h.Key) > l.MaxKeyLen {
			return legacyLenError(a, "key", len(h.Key), l.MinKeyLen, l.MaxKeyLen)
		}
	default: // SHA-crypt
		if h.Rounds < shaCryptMinRounds || uint64(h.Rounds) > v.roundsCap(a) {
			return newError("rounds %[2]d outside 1000..%[3]d", "", uint64(h.Rounds), v.roundsCap(a)).in(a)
		}
		if len(h.Salt) > shaCryptSaltMax {
			return legacyLenError(a, "salt", len(h.Salt), 0, shaCryptSaltMax)
		}
		size := sha256.Size
		if a == SHA512Crypt {
			size = sha512.Size
		}
		if len(h.Key) != size {
			return legacyLenError(a, "key", len(h.Key), size, size)
		}
	}
	return nil
}

// pbkdf2Key derives a PBKDF2 key one digest long, as both encodings store.
func pbkdf2Key(a Algorithm, password, salt []byte, rounds uint32) ([]byte, error) {
	switch a {
	case PBKDF2SHA1:
		return pbkdf2.Key(sha1.New, string(password), salt, int(rounds), sha1.Size)
	case PBKDF2SHA256:
		return pbkdf2.Key(sha256.New, string(password), salt, int(rounds), sha256.Size)
	default:
		return pbkdf2.Key(sha512.New, string(password), salt, int(rounds), sha512.Size)
	}
}

// verifyLegacy derives the key of a legacy hash already checked by
// checkLegacy and compares it in constant time.
func (v *Verifier) verifyLegacy(h *Hash, password []byte) (bool, error) {
	var key []byte
	var err error
	switch a := h.Algorithm; {
	case a.isPBKDF2():
		key, err = pbkdf2Key(a, password, h.Salt, h.Rounds)
	case a == Scrypt:
		key, err = scrypt.Key(password, h.Salt, 1<<h.Scrypt.LogN, int(h.Scrypt.R), int(h.Scrypt.P), len(h.Key))
	default: // SHA-crypt
		if max := v.limits.MaxShaCryptPasswordLen; len(password) > max {
			return false, fmt.Errorf("%w: %d bytes exceeds the %s limit %d", ErrPasswordTooLong, len(password), a, max)
		}
		key = shaCrypt(a, password, h.Salt, h.Rounds)
	}
	if err != nil {
		// pbkdf2 refuses parameters only in FIPS 140-only mode; scrypt
		// never after checkLegacy. Neither names the password.
		return false, fmt.Errorf("verify: %s: %w", h.Algorithm, err)
	}
	return subtle.ConstantTimeCompare(key, h.Key) == 1, nil
}
