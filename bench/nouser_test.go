package bench

import (
	"context"
	"testing"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/verifier"
	"github.com/leveehq/levee/pkg/verify"
)

// BenchmarkUnknownUser compares, through gRPC on one warm verifier at the
// default policy, a Verify against a real user's stored hash (op=known, a
// wrong password) with a Verify against nobody (op=no_user): the two must
// cost the same, so that neither timing nor load says whether a login name
// exists. One caller at a time; compare with benchstat -col /op.
func BenchmarkUnknownUser(b *testing.B) {
	for _, op := range []string{"known", "no_user"} {
		b.Run("op="+op, func(b *testing.B) {
			cfg := verifier.DefaultConfig()
			cfg.Workers = 1
			s := startServer(b, cfg)
			client := verifyv1.NewVerifyServiceClient(s.conn)
			req := &verifyv1.VerifyRequest{Password: []byte("not the password")}
			if op == "known" {
				req.EncodedHash = storedHash(b, verify.DefaultPolicy().Params, benchPassword)
			} else {
				req.NoUser = true
			}
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				resp, err := client.Verify(ctx, req)
				if err != nil || resp.GetMatch() {
					b.Fatalf("Verify: %v, %v", resp, err)
				}
			}
		})
	}
}
