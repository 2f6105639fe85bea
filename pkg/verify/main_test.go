package verify

import (
	"encoding/base64"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/leveehq/levee/internal/testlock"
)

// Argon2 with p > 1 runs goroutines inside x/crypto, and the interop tests run
// a subprocess; neither may outlive its call.
func TestMain(m *testing.M) {
	// They hash for seconds on every core and measure no time: they run
	// alone, not beside a package whose tests do (see testlock).
	testlock.Exclusive()
	goleak.VerifyTestMain(m)
}

// testPolicy is cheap enough to hash many times under the race detector.
func testPolicy() Policy {
	return Policy{Params: Params{Memory: 64, Iterations: 2, Parallelism: 2}, SaltLen: 16, KeyLen: 32}
}

func newVerifier(t testing.TB, p Policy, l Limits) *Verifier {
	t.Helper()
	v, err := New(p, l)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

func testVerifier(t testing.TB) *Verifier {
	return newVerifier(t, testPolicy(), DefaultLimits())
}

// enc returns the unpadded standard base64 of n bytes of a fixed pattern.
func enc(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return base64.RawStdEncoding.EncodeToString(b)
}

// argon2Hash builds "$alg$v=19$<params>$<salt>$<key>" from parts.
func argon2Hash(alg, params, salt, key string) string {
	return strings.Join([]string{"", alg, "v=19", params, salt, key}, "$")
}
