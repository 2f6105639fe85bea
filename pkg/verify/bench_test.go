package verify

import (
	"testing"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/scrypt"
)

// benchParams are the default policy's parameters, and the same with one
// lane, which shows what parallelism buys on the machine at hand.
var benchParams = []struct {
	name string
	p    Params
}{
	{"m=65536,t=3,p=4", Params{Memory: 65536, Iterations: 3, Parallelism: 4}},
	{"m=65536,t=3,p=1", Params{Memory: 65536, Iterations: 3, Parallelism: 1}},
}

// BenchmarkIDKey measures the key derivation alone, in process.
func BenchmarkIDKey(b *testing.B) {
	password, salt := []byte("benchmark password"), []byte("0123456789abcdef")
	for _, bp := range benchParams {
		b.Run(bp.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				argon2.IDKey(password, salt, bp.p.Iterations, bp.p.Memory, bp.p.Parallelism, 32)
			}
		})
	}
}

// BenchmarkVerify measures Verifier.Verify of a matching password, which a
// server's service-time estimate per unit of Work should track.
func BenchmarkVerify(b *testing.B) {
	password := []byte("benchmark password")
	for _, bp := range benchParams {
		b.Run(bp.name, func(b *testing.B) {
			v := newVerifier(b, Policy{Params: bp.p, SaltLen: 16, KeyLen: 32}, DefaultLimits())
			stored, err := v.HashPassword(password, nil)
			if err != nil {
				b.Fatal(err)
			}
			h, err := v.Parse(stored.String())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if match, _, err := v.Verify(h, password); err != nil || !match {
					b.Fatalf("Verify = %v, %v", match, err)
				}
			}
		})
	}
}

// BenchmarkParseHostile measures rejecting a hash that asks for 4 GiB.
func BenchmarkParseHostile(b *testing.B) {
	v := newVerifier(b, DefaultPolicy(), DefaultLimits())
	s := argon2Hash("argon2id", "m=4194304,t=3,p=4", enc(16), enc(32))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Parse(s); err == nil {
			b.Fatal("Parse accepted a 4 GiB hash")
		}
	}
}

// BenchmarkParse measures parsing a valid default-policy hash.
func BenchmarkParse(b *testing.B) {
	v := newVerifier(b, DefaultPolicy(), DefaultLimits())
	s := argon2Hash("argon2id", "m=65536,t=3,p=4", enc(16), enc(32))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Parse(s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyLegacy measures Verifier.Verify of a matching password
// against each legacy format at the defaults of the system that writes it,
// which the CostModel priors for those families come from.
func BenchmarkVerifyLegacy(b *testing.B) {
	password := []byte("benchmark password")
	salt := []byte("0123456789abcdef")
	for _, bl := range []struct {
		name string
		h    Hash
	}{
		{"pbkdf2-sha1/passlib-131000", Hash{Algorithm: PBKDF2SHA1, Rounds: 131000}},
		{"pbkdf2-sha256/passlib-29000", Hash{Algorithm: PBKDF2SHA256, Rounds: 29000}},
		{"pbkdf2-sha256/django-1000000", Hash{Algorithm: PBKDF2SHA256, Rounds: 1_000_000, form: formDjango}},
		{"pbkdf2-sha512/passlib-25000", Hash{Algorithm: PBKDF2SHA512, Rounds: 25000}},
		{"scrypt/passlib-ln16-r8-p1", Hash{Algorithm: Scrypt, Scrypt: ScryptParams{LogN: 16, R: 8, P: 1}}},
		{"scrypt/django-ln14-r8-p5", Hash{Algorithm: Scrypt, Scrypt: ScryptParams{LogN: 14, R: 8, P: 5}}},
		{"sha256-crypt/passlib-535000", Hash{Algorithm: SHA256Crypt, Rounds: 535000}},
		{"sha256-crypt/glibc-5000", Hash{Algorithm: SHA256Crypt, Rounds: 5000, form: formImplicitRounds}},
		{"sha512-crypt/passlib-656000", Hash{Algorithm: SHA512Crypt, Rounds: 656000}},
		{"sha512-crypt/glibc-5000", Hash{Algorithm: SHA512Crypt, Rounds: 5000, form: formImplicitRounds}},
	} {
		b.Run(bl.name, func(b *testing.B) {
			v := newVerifier(b, DefaultPolicy(), DefaultLimits())
			h := bl.h
			h.Salt = salt
			var err error
			switch {
			case h.Algorithm.isPBKDF2():
				h.Key, err = pbkdf2Key(h.Algorithm, password, h.Salt, h.Rounds)
			case h.Algorithm == Scrypt:
				h.Key, err = scrypt.Key(password, h.Salt, 1<<h.Scrypt.LogN, int(h.Scrypt.R), int(h.Scrypt.P), 32)
			default:
				h.Key = shaCrypt(h.Algorithm, password, h.Salt, h.Rounds)
			}
			if err != nil {
				b.Fatal(err)
			}
			parsed, err := v.Parse(h.String())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if match, rehash, err := v.Verify(parsed, password); err != nil || !match || !rehash {
					b.Fatalf("Verify = %v, %v, %v", match, rehash, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/parsed.Work(), "ns/unit")
		})
	}
}
