package verifier

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/crypto/argon2"
	"google.golang.org/grpc/codes"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
)

// weakerHash is an argon2id hash of password below testConfig's policy.
func weakerHash(t *testing.T, password string) string {
	t.Helper()
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		t.Fatal(err)
	}
	return strings.Join([]string{"", "argon2id", "v=19", "m=32,t=1,p=1",
		base64.RawStdEncoding.EncodeToString(salt),
		base64.RawStdEncoding.EncodeToString(argon2.IDKey([]byte(password), salt, 1, 32, 1, 32)),
	}, "$")
}

// A user who does not exist costs a hash under the policy, through the same
// queue, and never matches.
func TestVerifyNoUser(t *testing.T) {
	h := start(t, testConfig())
	ctx := as(context.Background(), "acme")
	if got, want := h.srv.dummy.Work(), h.srv.policy.Work(); got != want {
		t.Fatalf("the no_user stand-in costs %v work units, the policy %v: want equal", got, want)
	}
	if got, want := h.srv.dummy.MemoryBytes(), h.srv.policy.MemoryBytes(); got != want {
		t.Fatalf("the no_user stand-in holds %d bytes, the policy %d: want equal", got, want)
	}
	before := h.metric("levee_verifier_hashes_total", map[string]string{"algorithm": "argon2id"})
	for _, pw := range []string{"", "correct horse", "anything at all"} {
		resp, err := h.verify.Verify(ctx, &verifyv1.VerifyRequest{NoUser: true, Password: []byte(pw), Rehash: true})
		wantOK(t, "Verify no_user", err)
		if resp.GetMatch() || resp.GetNeedsRehash() || resp.GetNewHash() != "" {
			t.Errorf("no_user with %q = %v, want no match, no rehash", pw, resp)
		}
	}
	if got := h.metric("levee_verifier_hashes_total", map[string]string{"algorithm": "argon2id"}) - before; got != 3 {
		t.Errorf("no_user calls hashed %v times, want 3 (one each, like a real user)", got)
	}
	if got := h.metric("levee_verifier_verdicts_total", map[string]string{"result": "no_user", "tenant": "acme"}); got != 3 {
		t.Errorf("verdicts_total{result=no_user,tenant=acme} = %v, want 3", got)
	}
	_, err := h.verify.Verify(ctx, &verifyv1.VerifyRequest{NoUser: true, EncodedHash: weakerHash(t, "x"), Password: []byte("x")})
	if st := wantCode(t, err, codes.InvalidArgument); !strings.Contains(st.Message(), "no_user") {
		t.Errorf("no_user with a hash: %q, want a message naming no_user", st.Message())
	}
}

// Rehash in the same answer: done when the password matches a weaker hash
// and the node is idle; not needed otherwise; skipped under pressure.
func TestRehashInSameResponse(t *testing.T) {
	h := start(t, testConfig())
	ctx := as(context.Background(), "acme")
	weak := weakerHash(t, "correct horse")

	resp, err := h.verify.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: weak, Password: []byte("correct horse"), Rehash: true})
	wantOK(t, "Verify", err)
	if !resp.GetMatch() || !resp.GetNeedsRehash() || resp.GetRehashStatus() != verifyv1.RehashStatus_REHASH_STATUS_DONE {
		t.Fatalf("weaker hash, right password: %v; want match, needs_rehash, DONE", resp)
	}
	fresh := resp.GetNewHash()
	if !strings.HasPrefix(fresh, "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Fatalf("new_hash %q is not under the policy", fresh)
	}
	again, err := h.verify.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: fresh, Password: []byte("correct horse"), Rehash: true})
	wantOK(t, "Verify new_hash", err)
	if !again.GetMatch() || again.GetNeedsRehash() || again.GetNewHash() != "" ||
		again.GetRehashStatus() != verifyv1.RehashStatus_REHASH_STATUS_NOT_NEEDED {
		t.Errorf("the fresh hash: %v; want match, no rehash needed, NOT_NEEDED", again)
	}

	for _, tt := range []struct {
		name, password string
		rehash         bool
		want           verifyv1.RehashStatus
	}{
		{"wrong password", "battery staple", true, verifyv1.RehashStatus_REHASH_STATUS_NOT_NEEDED},
		{"not asked", "correct horse", false, verifyv1.RehashStatus_REHASH_STATUS_UNSPECIFIED},
	} {
		resp, err := h.verify.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: weak, Password: []byte(tt.password), Rehash: tt.rehash})
		wantOK(t, tt.name, err)
		if resp.GetRehashStatus() != tt.want || resp.GetNewHash() != "" {
			t.Errorf("%s: %v, want status %v and no new_hash", tt.name, resp, tt.want)
		}
	}

	t.Run("skipped under pressure", func(t *testing.T) {
		release, wait := h.occupy("hold")
		defer func() {
			release()
			wantOK(t, "hold", wait())
		}()
		// The only worker is busy; a second call queues, so the third
		// finds the queue not empty.
		queued := h.goHash(context.Background(), "queued")
		h.waitQueued(1)
		done := make(chan *verifyv1.VerifyResponse, 1)
		go func() {
			resp, err := h.verify.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: weak, Password: []byte("correct horse"), Rehash: true})
			if err != nil {
				t.Error(err)
			}
			done <- resp
		}()
		h.waitQueued(2)
		release()
		resp := <-done
		wantOK(t, "queued", queued())
		if !resp.GetMatch() || resp.GetRehashStatus() != verifyv1.RehashStatus_REHASH_STATUS_SKIPPED || resp.GetNewHash() != "" {
			t.Errorf("under pressure: %v; want match, SKIPPED, no new_hash", resp)
		}
	})
}

// Attempts and verdicts per algorithm and tenant, with bounded tenant labels.
func TestStuffingSignals(t *testing.T) {
	h := start(t, testConfig())
	weak := weakerHash(t, "pw")
	for i, pw := range []string{"pw", "no", "no", "no"} {
		ctx := as(context.Background(), "shop")
		if i == 0 {
			ctx = context.Background()
		}
		if _, err := h.verify.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: weak, Password: []byte(pw)}); err != nil {
			t.Fatal(err)
		}
	}
	for labels, want := range map[string]float64{"none/match": 1, "shop/no_match": 3, "shop/match": 0} {
		tenant, result, _ := strings.Cut(labels, "/")
		if got := h.metric("levee_verifier_verdicts_total", map[string]string{"tenant": tenant, "result": result, "algorithm": "argon2id"}); got != want {
			t.Errorf("verdicts{tenant=%s,result=%s} = %v, want %v", tenant, result, got, want)
		}
	}
	if got := h.metric("levee_verifier_attempts_total", map[string]string{"tenant": "shop"}); got != 3 {
		t.Errorf("attempts{tenant=shop} = %v, want 3", got)
	}
	// Tenants beyond the bound share "other".
	for i := range MaxTenantLabels + 5 {
		h.srv.metrics.tenants.Label(fmt.Sprintf("t%d", i))
	}
	if got := h.srv.metrics.tenants.Label("one-too-many"); got != "other" {
		t.Errorf("tenant beyond %d labels = %q, want other", MaxTenantLabels, got)
	}
}
