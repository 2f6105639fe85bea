package verifier

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/verify"
)

// TestPepperOverGRPC: a verifier with Config.Peppers writes hashes under the
// current key, verifies hashes under every loaded key (those under an old
// one with needs_rehash), and refuses a hash under a key it does not hold
// with FAILED_PRECONDITION, naming the key id only.
func TestPepperOverGRPC(t *testing.T) {
	cfg := testConfig()
	cfg.Peppers = testPeppers("k2", "k1", "k2")
	h := start(t, cfg)
	ctx := context.Background()

	resp, err := h.verify.Hash(ctx, &verifyv1.HashRequest{Password: []byte("pw")})
	wantOK(t, "Hash", err)
	stored := resp.GetEncodedHash()
	if !strings.Contains(stored, ",keyid=azI$") { // base64("k2")
		t.Fatalf("Hash wrote %q, want keyid=azI (k2): Config.Peppers does not reach verify.NewWithPeppers in New (server.go)", stored)
	}
	v, err := h.verify.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
	wantOK(t, "Verify(current key)", err)
	if !v.GetMatch() || v.GetNeedsRehash() {
		t.Errorf("Verify(current key) = match %v, needs_rehash %v; want true, false", v.GetMatch(), v.GetNeedsRehash())
	}

	// The same password under the old key k1, and under a key not loaded.
	old := hashUnder(t, cfg, testPeppers("k1", "k1"), "pw")
	v, err = h.verify.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: old, Password: []byte("pw")})
	wantOK(t, "Verify(old key)", err)
	if !v.GetMatch() || !v.GetNeedsRehash() {
		t.Errorf("Verify(old key) = match %v, needs_rehash %v; want true, true", v.GetMatch(), v.GetNeedsRehash())
	}
	v, err = h.verify.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: old, Password: []byte("not pw")})
	wantOK(t, "Verify(old key, wrong password)", err)
	if v.GetMatch() {
		t.Errorf("Verify(old key, wrong password) matched")
	}

	unknown := hashUnder(t, cfg, testPeppers("k9", "k9"), "pw")
	_, err = h.verify.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: unknown, Password: []byte("pw")})
	st := wantCode(t, err, codes.FailedPrecondition)
	if !strings.Contains(st.Message(), `pepper key id "k9" not loaded`) {
		t.Errorf("message %q does not name the missing key id", st.Message())
	}
	for _, id := range []string{"k1", "k2", "k9"} {
		if showsKey(st.Message(), pepperKeyFor(id)) {
			t.Errorf("message %q shows key material", st.Message())
		}
	}
}

// hashUnder hashes password under cfg's policy with peppers, as another
// verifier (or an earlier configuration) would have.
func hashUnder(t *testing.T, cfg Config, peppers verify.Peppers, password string) string {
	t.Helper()
	v, err := verify.NewWithPeppers(cfg.Policy, cfg.Limits, peppers)
	if err != nil {
		t.Fatal(err)
	}
	h, err := v.HashPassword([]byte(password), nil)
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// pepperKeyFor returns a 32-byte key derived from id, distinct per id.
func pepperKeyFor(id string) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = byte(i*29) ^ byte(len(id)) ^ id[i%len(id)]
	}
	return k
}

// testPeppers holds a key for each id, current among them.
func testPeppers(current string, ids ...string) verify.Peppers {
	var keys []verify.Pepper
	for _, id := range ids {
		keys = append(keys, verify.Pepper{ID: id, Key: pepperKeyFor(id)})
	}
	p, err := verify.NewPeppers(current, keys...)
	if err != nil {
		panic(err)
	}
	return p
}

// showsKey reports whether s shows key in any common rendering.
func showsKey(s string, key []byte) bool {
	for _, form := range []string{
		string(key), hex.EncodeToString(key), fmt.Sprint(key),
		base64.StdEncoding.EncodeToString(key), base64.RawStdEncoding.EncodeToString(key),
	} {
		if strings.Contains(s, form) {
			return true
		}
	}
	return false
}
