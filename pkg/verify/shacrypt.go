package verify

import (
	"crypto/sha256"
	"crypto/sha512"
	"hash"
)

// SHA-crypt ($5$ and $6$) as specified by Ulrich Drepper, "Unix crypt using
// SHA-256 and SHA-512" (https://www.akkadia.org/drepper/SHA-crypt.txt), the
// algorithm of glibc's and libxcrypt's crypt(3).
//
// It is implemented here rather than imported: neither the standard library
// nor golang.org/x/crypto has it, and the third-party modules that do are
// small, single-maintainer and not reviewed like x/crypto, so taking one on
// would add a supply-chain dependency for about a hundred lines over the
// standard library's SHA-2. The interop tests check it byte for byte against
// glibc (through mkpasswd), OpenSSL and passlib.

// shaCryptSaltMax is the longest salt the algorithm uses: glibc ignores the
// rest, so no implementation writes a longer one.
const shaCryptSaltMax = 16

// shaCryptDefaultRounds applies when a hash has no rounds= field.
const shaCryptDefaultRounds = 5000

// hash64 is the crypt(3) base64 alphabet; the encoding is little-endian in
// 6-bit groups, unlike standard base64.
const hash64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// hash64Index maps a hash64 character to its value, and anything else to -1.
var hash64Index = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < len(hash64); i++ {
		t[hash64[i]] = int8(i)
	}
	return t
}()

// sha256CryptOrder and sha512CryptOrder list the digest bytes in the order
// the encoding takes them, three at a time (the first of each triple is the
// most significant); the last group has fewer bytes. They are the
// b64_from_24bit calls of the specification's reference implementation.
var sha256CryptOrder = [32]uint8{
	0, 10, 20, 21, 1, 11, 12, 22, 2, 3, 13, 23, 24, 4, 14,
	15, 25, 5, 6, 16, 26, 27, 7, 17, 18, 28, 8, 9, 19, 29,
	31, 30,
}

var sha512CryptOrder = [64]uint8{
	0, 21, 42, 22, 43, 1, 44, 2, 23, 3, 24, 45, 25, 46, 4,
	47, 5, 26, 6, 27, 48, 28, 49, 7, 50, 8, 29, 9, 30, 51,
	31, 52, 10, 53, 11, 32, 12, 33, 54, 34, 55, 13, 56, 14, 35,
	15, 36, 57, 37, 58, 16, 59, 17, 38, 18, 39, 60, 40, 61, 19,
	62, 20, 41,
	63,
}

// shaCryptOrder returns the byte order and the encoded length of the digest.
func shaCryptOrder(a Algorithm) ([]uint8, int) {
	if a == SHA256Crypt {
		return sha256CryptOrder[:], 43
	}
	return sha512CryptOrder[:], 86
}

// appendHash64 appends the encoding of digest, a SHA-256 or SHA-512 digest in
// natural order.
func appendHash64(b []byte, a Algorithm, digest []byte) []byte {
	order, _ := shaCryptOrder(a)
	for i := 0; i < len(order); i += 3 {
		var w uint32
		n := min(3, len(order)-i)
		for j := 0; j < n; j++ {
			w = w<<8 | uint32(digest[order[i+j]])
		}
		for range n + 1 { // 3 bytes → 4 characters, 2 → 3, 1 → 2
			b = append(b, hash64[w&0x3f])
			w >>= 6
		}
	}
	return b
}

// checkHash64 validates the encoded digest of a SHA-crypt hash whose length is
// known to be right: hash64 characters only, and zero unused high bits in the
// last group, so that the encoding is canonical.
func checkHash64(a Algorithm, enc string) error {
	order, _ := shaCryptOrder(a)
	for i := 0; i < len(enc); i++ {
		if hash64Index[enc[i]] < 0 {
			return newError("checksum: illegal character at offset %[2]d", "", uint64(i), 0).in(a)
		}
	}
	// The last group carries 8 × n bits in 6 × (n+1).
	n := len(order) % 3
	last := hash64Index[enc[len(enc)-1]]
	if last>>(8*n-6*n) != 0 {
		return newError("checksum: non-canonical trailing bits", "", 0, 0).in(a)
	}
	return nil
}

// decodeHash64 decodes enc, already checked by checkHash64, into digest in
// natural order.
func decodeHash64(digest []byte, a Algorithm, enc string) {
	order, _ := shaCryptOrder(a)
	for i, k := 0, 0; i < len(order); i += 3 {
		n := min(3, len(order)-i)
		var w uint32
		for j := n; j >= 0; j-- {
			w = w<<6 | uint32(hash64Index[enc[k+j]])
		}
		k += n + 1
		for j := n - 1; j >= 0; j-- {
			digest[order[i+j]] = byte(w)
			w >>= 8
		}
	}
}

// shaCrypt computes the SHA-crypt digest of password under salt (at most 16
// bytes) and rounds, steps 1 to 21 of the specification, in natural order.
func shaCrypt(a Algorithm, password, salt []byte, rounds uint32) []byte {
	var newHash func() hash.Hash = sha256.New
	if a == SHA512Crypt {
		newHash = sha512.New
	}
	h := newHash()
	size := h.Size()

	// Digest B: password, salt, password.
	h.Write(password)
	h.Write(salt)
	h.Write(password)
	b := h.Sum(make([]byte, 0, size))

	// Digest A: password, salt, B repeated to the password's length, then
	// for each bit of the length from the lowest, B for a 1 and the
	// password for a 0.
	h.Reset()
	h.Write(password)
	h.Write(salt)
	writeRepeated(h, b, len(password))
	for n := len(password); n > 0; n >>= 1 {
		if n&1 != 0 {
			h.Write(b)
		} else {
			h.Write(password)
		}
	}
	c := h.Sum(make([]byte, 0, size))

	// P: the digest of the password repeated once per byte of the password,
	// stretched to the password's length.
	h.Reset()
	for range len(password) {
		h.Write(password)
	}
	p := repeatTo(h.Sum(make([]byte, 0, size)), len(password))

	// S: the digest of the salt repeated 16 + A[0] times, stretched to the
	// salt's length.
	h.Reset()
	for range 16 + int(c[0]) {
		h.Write(salt)
	}
	s := repeatTo(h.Sum(make([]byte, 0, size)), len(salt))

	for i := range rounds {
		h.Reset()
		if i&1 != 0 {
			h.Write(p)
		} else {
			h.Write(c)
		}
		if i%3 != 0 {
			h.Write(s)
		}
		if i%7 != 0 {
			h.Write(p)
		}
		if i&1 != 0 {
			h.Write(c)
		} else {
			h.Write(p)
		}
		c = h.Sum(c[:0])
	}
	clear(p)
	return c
}

// writeRepeated writes n bytes of b repeated.
func writeRepeated(h hash.Hash, b []byte, n int) {
	for ; n > len(b); n -= len(b) {
		h.Write(b)
	}
	h.Write(b[:n])
}

// repeatTo returns n bytes of b repeated.
func repeatTo(b []byte, n int) []byte {
	out := make([]byte, n)
	for i := 0; i < n; i += len(b) {
		copy(out[i:], b)
	}
	return out
}
