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

// FuzzParseWeight feeds arbitrary levee-tenant-weight values to
// FromIncoming: no panic; a refusal is a *MalformedError naming the key in a
// bounded message; an accepted weight is in (0, MaxWeight], passes Validate,
// and is written by AppendOutgoing as a value that reads back the same.
func FuzzParseWeight(f *testing.F) {
	for _, s := range []string{"1", "0.5", "3", "1e6", "1000001", "0", "-1", "NaN", "Inf", "+Inf", "0x10", "1_0", " 2", "", "1e-320"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, weight string) {
		md := metadata.MD{WeightKey: {weight}}
		facts, err := FromIncoming(metadata.NewIncomingContext(context.Background(), md))
		if err != nil {
			var me *MalformedError
			if !errors.As(err, &me) || me.Key != WeightKey || len(err.Error()) > 300 {
				t.Fatalf("error %v: want a bounded *MalformedError naming %s", err, WeightKey)
			}
			return
		}
		if !(facts.Weight > 0 && facts.Weight <= MaxWeight) {
			t.Fatalf("accepted weight %v from %q", facts.Weight, weight)
		}
		if err := facts.Validate(); err != nil {
			t.Fatalf("accepted facts %+v fail Validate: %v", facts, err)
		}
		out, _ := metadata.FromOutgoingContext(AppendOutgoing(context.Background(), facts))
		back, err := FromIncoming(metadata.NewIncomingContext(context.Background(), out))
		if err != nil || back.Weight != facts.Weight {
			t.Fatalf("weight %v written as %q read back as %v, %v", facts.Weight, out.Get(WeightKey), back.Weight, err)
		}
	})
}
