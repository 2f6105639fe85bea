package verify

import (
	"encoding/base64"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// b64 is the encoding of argon2 salts and keys in PHC strings. Strict rejects
// non-canonical trailing bits; Parse additionally rejects the CR and LF that
// the decoder would otherwise skip.
var b64 = base64.RawStdEncoding.Strict()

// bcryptAlphabet is bcrypt's base64 alphabet (not the standard one).
const bcryptAlphabet = "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

const (
	bcryptLen        = 60 // $2b$10$ + 22 salt + 31 checksum characters
	bcryptSaltStart  = 7
	bcryptMinCost    = 4
	bcryptMaxCost    = 31
	maxExcerptLen    = 32 // longest piece of input quoted in an error message
	maxDecimalDigits = 10 // enough for any uint32
)

// parseError is the error Parse returns. It is formatted only when Error is
// called, so that rejecting a hostile hash costs one small allocation: the
// error itself.
type parseError struct {
	sentinel error  // ErrInvalidHash or ErrUnsupportedAlgorithm
	format   string // indexed verbs only: %[1] str, %[2] n1, %[3] n2, %[4] label
	str      string // a field name, or an excerpt of the input
	n1, n2   uint64
	label    string
	alg      string // for a legacy format, the algorithm: "pbkdf2-sha256: ..."
}

func newError(format, str string, n1, n2 uint64) *parseError {
	return &parseError{sentinel: ErrInvalidHash, format: format, str: str, n1: n1, n2: n2}
}

func (e *parseError) Error() string {
	s := e.str
	if len(s) > maxExcerptLen {
		s = s[:maxExcerptLen] + "..."
	}
	prefix := "parse hash: "
	if e.alg != "" {
		prefix += e.alg + ": "
	}
	if !strings.Contains(e.format, "%") {
		return prefix + e.format
	}
	return prefix + fmt.Sprintf(e.format, s, e.n1, e.n2, e.label)
}

// in attributes e to a legacy algorithm; a.String() is a constant, so this
// does not allocate.
func (e *parseError) in(a Algorithm) *parseError {
	e.alg = a.String()
	return e
}

func (e *parseError) Unwrap() error { return e.sentinel }

// Parse parses a stored hash: an Argon2id or Argon2i PHC string, a bcrypt
// $2a$/$2b$/$2y$ string, or one of the legacy formats below. It does not hash.
//
// Every error matches ErrInvalidHash. Parse checks the length of encoded
// against Limits.MaxEncodedLen before anything else, and every cost parameter
// and the encoded length of salt and key against the limits before it
// allocates anything sized by the input; a rejected hash costs one small
// allocation.
//
// Argon2 rules: the fields are $argon2id or $argon2i, v=19, the parameters
// m, t and p each exactly once and in any order, then salt and key in unpadded
// standard base64 with canonical trailing bits. Numbers are plain decimal
// without sign or leading zero; t and p are at least 1 and m at least 8*p,
// as Argon2 requires. A hash without the v= field is rejected: that is how
// Argon2 v=16 hashes were written, and only v=19 is supported. The optional
// keyid parameter, at most once and in any position (Hash.String writes it
// after p), names the pepper key: unpadded canonical base64 of at most
// MaxPepperIDLen bytes (43 characters, checked before decoding), which must
// decode to a key id of A-Z, a-z, 0-9, '_' and '-'. Parse does not look the
// id up: a hash under a key the Verifier does not hold parses, and Verify
// reports ErrUnknownPepper. The optional data parameter is rejected as
// unsupported.
//
// bcrypt rules: exactly 60 characters, a two-digit cost of at least 4 and at
// most Limits.MaxBcryptCost, and 53 characters of bcrypt's base64 alphabet
// whose checksum part is canonical (a non-canonical checksum could never
// match). Non-canonical trailing bits in the salt are accepted, as the bcrypt
// library ignores them.
//
// Legacy formats, verify-only, each parsed as strictly (canonical decimals
// and base64, fields in a fixed order, nothing trailing), so that Hash.String
// gives back the parsed string:
//
//   - passlib PBKDF2: $pbkdf2$ (SHA-1), $pbkdf2-sha256$ or $pbkdf2-sha512$,
//     then <rounds>$<salt>$<checksum>; rounds 1..Limits.MaxPBKDF2Iterations,
//     salt and checksum in passlib's ab64 (standard base64 with '.' for '+',
//     unpadded), salt at most Limits.MaxSaltLen bytes, checksum one digest.
//   - Django PBKDF2: pbkdf2_sha256$ or pbkdf2_sha1$, then
//     <iterations>$<salt>$<hash>; the salt is a string of 1..MaxSaltLen
//     printable ASCII characters, the hash one digest in padded standard
//     base64.
//   - passlib scrypt: $scrypt$ln=<log2 N>,r=<r>,p=<p>$<salt>$<checksum>,
//     parameters in that order, each at least 1 and within MaxScryptLogN,
//     MaxScryptR and MaxScryptP, with 128·r·N bytes within MaxMemoryKiB and
//     N·r·p within MaxScryptWork; salt and checksum in unpadded standard
//     base64, the checksum MinKeyLen..MaxKeyLen bytes.
//   - SHA-crypt: $5$ or $6$, an optional rounds=<n>$ (1000..
//     MaxShaCryptRounds; 5000 when absent), a salt of at most 16 printable
//     ASCII characters, and the 43- or 86-character checksum in crypt's
//     base64, with zero unused bits.
func (v *Verifier) Parse(encoded string) (*Hash, error) {
	l := &v.limits
	switch {
	case len(encoded) == 0:
		return nil, newError("empty hash", "", 0, 0)
	case len(encoded) > l.MaxEncodedLen:
		return nil, newError("encoded length %[2]d exceeds limit %[3]d bytes", "", uint64(len(encoded)), uint64(l.MaxEncodedLen))
	case encoded[0] != '$':
		// Django's hashes alone have no leading '$'.
		switch name, rest, _ := strings.Cut(encoded, "$"); name {
		case "pbkdf2_sha256":
			return v.parseDjango(PBKDF2SHA256, rest)
		case "pbkdf2_sha1":
			return v.parseDjango(PBKDF2SHA1, rest)
		}
		return nil, newError("missing leading \"$\"", "", 0, 0)
	}
	alg, rest, _ := strings.Cut(encoded[1:], "$")
	switch alg {
	case "argon2id":
		return v.parseArgon2(Argon2id, rest)
	case "argon2i":
		return v.parseArgon2(Argon2i, rest)
	case "2a", "2b", "2y":
		return v.parseBcrypt(encoded)
	case "pbkdf2":
		return v.parsePBKDF2(PBKDF2SHA1, rest)
	case "pbkdf2-sha256":
		return v.parsePBKDF2(PBKDF2SHA256, rest)
	case "pbkdf2-sha512":
		return v.parsePBKDF2(PBKDF2SHA512, rest)
	case "scrypt":
		return v.parseScrypt(rest)
	case "5":
		return v.parseShaCrypt(SHA256Crypt, rest)
	case "6":
		return v.parseShaCrypt(SHA512Crypt, rest)
	default:
		e := newError("unsupported algorithm %[1]q", alg, 0, 0)
		e.sentinel = ErrUnsupportedAlgorithm
		return nil, e
	}
}

// parseArgon2 parses what follows "$argon2id$" or "$argon2i$".
func (v *Verifier) parseArgon2(alg Algorithm, rest string) (*Hash, error) {
	switch n := strings.Count(rest, "$"); {
	case n == 2 && !strings.HasPrefix(rest, "v="):
		return nil, newError("missing version field v=19 (a hash without one is argon2 v=16; only v=19 is supported)", "", 0, 0)
	case n < 3:
		return nil, newError("missing fields: want $%[1]s$v=19$m=,t=,p=$salt$key", alg.String(), 0, 0)
	case n > 3:
		return nil, newError("extra fields: want $%[1]s$v=19$m=,t=,p=$salt$key", alg.String(), 0, 0)
	}
	vers, rest, _ := strings.Cut(rest, "$")
	params, rest, _ := strings.Cut(rest, "$")
	saltEnc, keyEnc, _ := strings.Cut(rest, "$")

	digits, ok := strings.CutPrefix(vers, "v=")
	if !ok {
		return nil, newError("malformed version field %[1]q (want v=19)", vers, 0, 0)
	}
	const badVersion = "unsupported version %[1]s (only v=19)"
	version, e := parseDecimal("version", vers, digits, math.MaxUint32, badVersion)
	if e != nil {
		return nil, e
	}
	if version != argon2Version {
		return nil, newError(badVersion, vers, 0, 0)
	}

	p, keyID, e := v.parseParams(params)
	if e != nil {
		return nil, e
	}

	l := &v.limits
	saltLen, e := checkBase64("salt", saltEnc, l.MinSaltLen, l.MaxSaltLen)
	if e != nil {
		return nil, e
	}
	keyLen, e := checkBase64("key", keyEnc, l.MinKeyLen, l.MaxKeyLen)
	if e != nil {
		return nil, e
	}

	// Every size is now within the limits: allocate.
	buf := make([]byte, saltLen+keyLen)
	salt, key := buf[:saltLen:saltLen], buf[saltLen:]
	if _, err := b64.Decode(salt, []byte(saltEnc)); err != nil {
		return nil, newError("%[1]s: illegal base64", "salt", 0, 0) // unreachable after checkBase64
	}
	if _, err := b64.Decode(key, []byte(keyEnc)); err != nil {
		return nil, newError("%[1]s: illegal base64", "key", 0, 0) // unreachable after checkBase64
	}
	return &Hash{Algorithm: alg, Version: argon2Version, Params: p, Salt: salt, Key: key, KeyID: keyID}, nil
}

// parseParams parses "m=65536,t=3,p=4", with an optional keyid=, in any
// order, and returns the decoded key id ("" when absent).
func (v *Verifier) parseParams(s string) (Params, string, error) {
	l := &v.limits
	var p Params
	if s == "" {
		return p, "", newError("missing parameters: want m=,t=,p=", "", 0, 0)
	}
	var seen [4]bool // m, t, p, keyid
	var keyIDEnc string
	for {
		kv, more, found := strings.Cut(s, ",")
		name, val, ok := strings.Cut(kv, "=")
		if !ok {
			return p, "", newError("malformed parameter %[1]q (want name=value)", kv, 0, 0)
		}
		var i int
		switch name {
		case "m":
			i = 0
		case "t":
			i = 1
		case "p":
			i = 2
		case "keyid":
			i = 3
		case "data":
			return p, "", newError("parameter %[1]q is not supported", name, 0, 0)
		default:
			return p, "", newError("unknown parameter %[1]q", name, 0, 0)
		}
		if seen[i] {
			return p, "", newError("duplicate parameter %[1]q", name, 0, 0)
		}
		seen[i] = true
		switch i {
		case 0:
			n, e := parseDecimal("parameter", kv, val, uint64(l.MaxMemoryKiB), "memory %[1]s KiB exceeds limit %[3]d KiB")
			if e != nil {
				return p, "", e
			}
			p.Memory = uint32(n)
		case 1:
			n, e := parseDecimal("parameter", kv, val, uint64(l.MaxIterations), "iterations %[1]s exceeds limit %[3]d")
			if e != nil {
				return p, "", e
			}
			p.Iterations = uint32(n)
		case 2:
			n, e := parseDecimal("parameter", kv, val, uint64(l.MaxParallelism), "parallelism %[1]s exceeds limit %[3]d")
			if e != nil {
				return p, "", e
			}
			p.Parallelism = uint8(n)
		case 3:
			// Checked here, decoded once every parameter is.
			if _, e := checkBase64("keyid", val, 1, MaxPepperIDLen); e != nil {
				return p, "", e
			}
			keyIDEnc = val
		}
		if !found {
			break
		}
		s = more
	}
	for i, name := range [...]string{"m", "t", "p"} {
		if !seen[i] {
			return p, "", newError("missing parameter %[1]q", name, 0, 0)
		}
	}
	if err := checkMinimums(p); err != nil {
		return p, "", err
	}
	if !seen[3] {
		return p, "", nil
	}
	// At most MaxPepperIDLen bytes, by checkBase64: decode on the stack.
	var buf [MaxPepperIDLen]byte
	n, err := b64.Decode(buf[:], []byte(keyIDEnc))
	if err != nil {
		return p, "", newError("%[1]s: illegal base64", "keyid", 0, 0) // unreachable after checkBase64
	}
	if !validPepperID(buf[:n]) {
		return p, "", newError("keyid: not a key id (want 1 to %[3]d of A-Z, a-z, 0-9, '_', '-')", "", 0, MaxPepperIDLen)
	}
	return p, string(buf[:n]), nil
}

// parseDecimal parses digits, the value in kv (e.g. "t=3"), as a canonical
// decimal of at most max without ever overflowing. label names kv in messages
// ("parameter", "version"); tooBig formats the error for a value over max,
// with kv as %[1]s (all digits by then) and max as %[3]d.
func parseDecimal(label, kv, digits string, max uint64, tooBig string) (uint64, error) {
	fail := func(format string) error {
		return &parseError{sentinel: ErrInvalidHash, format: format, str: kv, label: label}
	}
	if digits == "" {
		return 0, fail("%[4]s %[1]q: empty value")
	}
	if c := digits[0]; c == '+' || c == '-' {
		return 0, fail("%[4]s %[1]q: sign not allowed")
	}
	for i := 0; i < len(digits); i++ {
		if c := digits[i]; c < '0' || c > '9' {
			return 0, fail("%[4]s %[1]q: not a decimal number")
		}
	}
	if len(digits) > 1 && digits[0] == '0' {
		return 0, fail("%[4]s %[1]q: leading zero not allowed")
	}
	var n uint64
	if len(digits) <= maxDecimalDigits {
		for i := 0; i < len(digits); i++ {
			n = n*10 + uint64(digits[i]-'0')
		}
	}
	if len(digits) > maxDecimalDigits || n > max {
		return 0, &parseError{sentinel: ErrInvalidHash, format: tooBig, str: kv, n2: max}
	}
	return n, nil
}

// checkBase64 validates enc as unpadded, canonical standard base64 of between
// lo and hi bytes, without decoding it, and returns the decoded length.
func checkBase64(field, enc string, lo, hi int) (int, error) {
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '+', c == '/':
		case c == '=':
			return 0, newError("%[1]s: illegal base64 (padding not allowed)", field, 0, 0)
		default:
			return 0, newError("%[1]s: illegal base64 character at offset %[2]d", field, uint64(i), 0)
		}
	}
	if len(enc)%4 == 1 {
		return 0, newError("%[1]s: illegal base64 (impossible length %[2]d)", field, uint64(len(enc)), 0)
	}
	n := b64.DecodedLen(len(enc))
	if err := checkLen(field, n, lo, hi); err != nil {
		return 0, err
	}
	// The last character carries 2 (length 4k+3) or 4 (4k+2) padding bits,
	// which must be zero.
	if r := len(enc) % 4; r != 0 {
		mask := byte(0x0f)
		if r == 3 {
			mask = 0x03
		}
		if stdIndex(enc[len(enc)-1])&mask != 0 {
			return 0, newError("%[1]s: illegal base64 (non-canonical trailing bits)", field, 0, 0)
		}
	}
	return n, nil
}

// stdIndex returns the value of a standard base64 character already checked
// to be in the alphabet.
func stdIndex(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c - 'A'
	case 'a' <= c && c <= 'z':
		return c - 'a' + 26
	case '0' <= c && c <= '9':
		return c - '0' + 52
	case c == '+':
		return 62
	default:
		return 63
	}
}

// parseBcrypt parses a whole $2a$/$2b$/$2y$ string.
func (v *Verifier) parseBcrypt(s string) (*Hash, error) {
	cost, err := v.checkBcrypt(s)
	if err != nil {
		return nil, err
	}
	return &Hash{Algorithm: Bcrypt, Cost: cost, bcrypt: s}, nil
}

// checkBcrypt validates a bcrypt string whose prefix is known to be $2a$,
// $2b$ or $2y$, and returns its cost.
func (v *Verifier) checkBcrypt(s string) (int, error) {
	if len(s) != bcryptLen {
		return 0, newError("bcrypt: length %[2]d, want %[3]d", "", uint64(len(s)), bcryptLen)
	}
	d1, d2 := s[4], s[5]
	if d1 < '0' || d1 > '9' || d2 < '0' || d2 > '9' || s[6] != '$' {
		return 0, newError("bcrypt: malformed cost %[1]q (want two digits and \"$\")", s[4:7], 0, 0)
	}
	cost := int(d1-'0')*10 + int(d2-'0')
	switch {
	case cost < bcryptMinCost:
		return 0, newError("bcrypt: cost %[2]d is below minimum %[3]d", "", uint64(cost), bcryptMinCost)
	case cost > v.limits.MaxBcryptCost:
		return 0, newError("bcrypt: cost %[2]d exceeds limit %[3]d", "", uint64(cost), uint64(v.limits.MaxBcryptCost))
	}
	for i := bcryptSaltStart; i < len(s); i++ {
		if strings.IndexByte(bcryptAlphabet, s[i]) < 0 {
			return 0, newError("bcrypt: illegal character at offset %[2]d", "", uint64(i), 0)
		}
	}
	// 31 characters carry 186 bits for a 184-bit checksum.
	if strings.IndexByte(bcryptAlphabet, s[len(s)-1])&0x03 != 0 {
		return 0, newError("bcrypt: non-canonical checksum", "", 0, 0)
	}
	return cost, nil
}

func appendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }
