package callmeta

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"
)

// FuzzParseFacts feeds arbitrary values for the three keys to FromIncoming.
// Whatever they are, it must not panic; a refusal must be a *MalformedError
// naming one of the keys in a bounded message; and accepted values must be
// canonical: the facts pass Validate and AppendOutgoing writes back exactly
// the strings that were read.
func FuzzParseFacts(f *testing.F) {
	f.Add("1", "interactive", "")
	f.Add("2", "batch", "acme-eu.prod_1")
	f.Add("100", "critical", strings.Repeat("x", MaxTenantLen))
	f.Add("0", "unspecified", "a b")
	f.Add("01", "Critical", "acmé")
	f.Add("101", "", strings.Repeat("x", MaxTenantLen+1))

	f.Fuzz(func(t *testing.T, attempt, priority, tenant string) {
		md := metadata.MD{AttemptKey: {attempt}, PriorityKey: {priority}, TenantKey: {tenant}}
		facts, err := FromIncoming(metadata.NewIncomingContext(context.Background(), md))
		if err != nil {
			var me *MalformedError
			if !errors.As(err, &me) || !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not a *MalformedError", err)
			}
			if me.Key != AttemptKey && me.Key != PriorityKey && me.Key != TenantKey {
				t.Fatalf("error names key %q", me.Key)
			}
			if len(err.Error()) > 300 {
				t.Fatalf("error message is %d bytes", len(err.Error()))
			}
			return
		}
		if err := facts.Validate(); err != nil {
			t.Fatalf("accepted facts %+v fail Validate: %v", facts, err)
		}
		out, _ := metadata.FromOutgoingContext(AppendOutgoing(context.Background(), facts))
		want := metadata.MD{AttemptKey: {attempt}, PriorityKey: {priority}}
		if tenant != "" {
			want[TenantKey] = []string{tenant}
		}
		if len(out) != len(want) {
			t.Fatalf("wrote %v, read %v", out, want)
		}
		for k, v := range want {
			if got := out.Get(k); len(got) != 1 || got[0] != v[0] {
				t.Fatalf("%s: read %q, wrote %q", k, v, got)
			}
		}
	})
}
