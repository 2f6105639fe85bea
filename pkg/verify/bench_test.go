package verify

import (
	"testing"

	"golang.org/x/crypto/argon2"
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
