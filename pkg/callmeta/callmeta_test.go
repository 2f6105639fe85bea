package callmeta

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc/metadata"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestPriorityString(t *testing.T) {
	tests := []struct {
		p    Priority
		want string
	}{
		{PriorityUnspecified, "unspecified"},
		{Critical, "critical"},
		{Interactive, "interactive"},
		{Batch, "batch"},
		{Priority(9), "Priority(9)"},
	}
	for _, tt := range tests {
		if got := tt.p.String(); got != tt.want {
			t.Errorf("Priority(%d).String() = %q, want %q", uint8(tt.p), got, tt.want)
		}
	}
}

func TestParsePriority(t *testing.T) {
	tests := []struct {
		in      string
		want    Priority
		wantErr bool
	}{
		{in: "critical", want: Critical},
		{in: "interactive", want: Interactive},
		{in: "batch", want: Batch},
		{in: "", wantErr: true},
		{in: "unspecified", wantErr: true},
		{in: "Critical", wantErr: true},
		{in: " batch", wantErr: true},
		{in: "batch\x00", wantErr: true},
		{in: "2", wantErr: true},
		{in: strings.Repeat("batch", 1000), wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParsePriority(tt.in)
		if tt.wantErr {
			if !errors.Is(err, ErrUnknownPriority) {
				t.Errorf("ParsePriority(%.20q) error = %v, want ErrUnknownPriority", tt.in, err)
			}
			if err != nil && len(err.Error()) > 100 {
				t.Errorf("ParsePriority(%.20q) error message is %d bytes, want it bounded", tt.in, len(err.Error()))
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v, nil", tt.in, got, err, tt.want)
		}
	}
	// Every priority's wire name parses back to it.
	for _, p := range []Priority{Critical, Interactive, Batch} {
		if got, err := ParsePriority(p.String()); err != nil || got != p {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
	}
}

func TestAttemptClass(t *testing.T) {
	tests := []struct {
		attempt int
		want    string
	}{
		{0, "first"},
		{1, "first"},
		{2, "retry"},
		{100, "retry"},
	}
	for _, tt := range tests {
		if got := (Facts{Attempt: tt.attempt}).AttemptClass(); got != tt.want {
			t.Errorf("Facts{Attempt: %d}.AttemptClass() = %q, want %q", tt.attempt, got, tt.want)
		}
	}
}

func TestFactsValidate(t *testing.T) {
	tests := []struct {
		name    string
		f       Facts
		wantKey string // "" means valid
	}{
		{name: "zero", f: Facts{}},
		{name: "full", f: Facts{Attempt: 3, Priority: Batch, Tenant: "acme-eu.prod_1"}},
		{name: "max attempt", f: Facts{Attempt: MaxAttempt}},
		{name: "longest tenant", f: Facts{Tenant: strings.Repeat("t", MaxTenantLen)}},
		{name: "negative attempt", f: Facts{Attempt: -1}, wantKey: AttemptKey},
		{name: "attempt too high", f: Facts{Attempt: MaxAttempt + 1}, wantKey: AttemptKey},
		{name: "priority out of range", f: Facts{Priority: Batch + 1}, wantKey: PriorityKey},
		{name: "tenant too long", f: Facts{Tenant: strings.Repeat("t", MaxTenantLen+1)}, wantKey: TenantKey},
		{name: "tenant with space", f: Facts{Tenant: "a b"}, wantKey: TenantKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkMalformed(t, tt.f.Validate(), tt.wantKey)
		})
	}
}

// checkMalformed asserts err is nil when wantKey is "", and otherwise a
// *MalformedError for wantKey that matches ErrMalformed and names the key in
// a bounded message.
func checkMalformed(t *testing.T, err error, wantKey string) {
	t.Helper()
	if wantKey == "" {
		if err != nil {
			t.Fatalf("error = %v, want nil", err)
		}
		return
	}
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("error = %v, want one matching ErrMalformed", err)
	}
	var me *MalformedError
	if !errors.As(err, &me) || me.Key != wantKey {
		t.Fatalf("error = %#v, want a *MalformedError for %s", err, wantKey)
	}
	if msg := err.Error(); !strings.Contains(msg, wantKey) || len(msg) > 200 {
		t.Errorf("message %q should name %s and stay under 200 bytes", msg, wantKey)
	}
}

func incoming(kv ...string) context.Context {
	return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
}

func TestFromIncoming(t *testing.T) {
	long := strings.Repeat("9", 1<<16)
	tests := []struct {
		name    string
		ctx     context.Context
		want    Facts
		wantKey string // key of the expected *MalformedError; "" means success
	}{
		{name: "no metadata", ctx: context.Background(), want: Facts{Attempt: 1, Priority: Interactive}},
		{name: "no levee keys", ctx: incoming("other", "x"), want: Facts{Attempt: 1, Priority: Interactive}},
		{
			name: "all set",
			ctx:  incoming(AttemptKey, "3", PriorityKey, "batch", TenantKey, "acme-eu.prod_1"),
			want: Facts{Attempt: 3, Priority: Batch, Tenant: "acme-eu.prod_1"},
		},
		{name: "attempt only", ctx: incoming(AttemptKey, "2"), want: Facts{Attempt: 2, Priority: Interactive}},
		{name: "attempt max", ctx: incoming(AttemptKey, "100"), want: Facts{Attempt: 100, Priority: Interactive}},
		{name: "critical", ctx: incoming(PriorityKey, "critical"), want: Facts{Attempt: 1, Priority: Critical}},
		{name: "empty tenant is no tenant", ctx: incoming(TenantKey, ""), want: Facts{Attempt: 1, Priority: Interactive}},
		{
			name: "longest tenant",
			ctx:  incoming(TenantKey, strings.Repeat("a", MaxTenantLen)),
			want: Facts{Attempt: 1, Priority: Interactive, Tenant: strings.Repeat("a", MaxTenantLen)},
		},
		{
			name: "key case is ignored",
			ctx:  metadata.NewIncomingContext(context.Background(), metadata.MD{"Levee-Attempt": {"4"}}),
			want: Facts{Attempt: 4, Priority: Interactive},
		},

		{name: "attempt not a number", ctx: incoming(AttemptKey, "abc"), wantKey: AttemptKey},
		{name: "attempt zero", ctx: incoming(AttemptKey, "0"), wantKey: AttemptKey},
		{name: "attempt above max", ctx: incoming(AttemptKey, "101"), wantKey: AttemptKey},
		{name: "attempt 999", ctx: incoming(AttemptKey, "999"), wantKey: AttemptKey},
		{name: "attempt negative", ctx: incoming(AttemptKey, "-1"), wantKey: AttemptKey},
		{name: "attempt with plus", ctx: incoming(AttemptKey, "+1"), wantKey: AttemptKey},
		{name: "attempt leading zero", ctx: incoming(AttemptKey, "01"), wantKey: AttemptKey},
		{name: "attempt with space", ctx: incoming(AttemptKey, " 1"), wantKey: AttemptKey},
		{name: "attempt empty", ctx: incoming(AttemptKey, ""), wantKey: AttemptKey},
		{name: "attempt huge", ctx: incoming(AttemptKey, long), wantKey: AttemptKey},
		{name: "attempt twice", ctx: incoming(AttemptKey, "1", AttemptKey, "2"), wantKey: AttemptKey},
		{name: "priority unknown", ctx: incoming(PriorityKey, "urgent"), wantKey: PriorityKey},
		{name: "priority upper case", ctx: incoming(PriorityKey, "Batch"), wantKey: PriorityKey},
		{name: "priority unspecified", ctx: incoming(PriorityKey, "unspecified"), wantKey: PriorityKey},
		{name: "priority empty", ctx: incoming(PriorityKey, ""), wantKey: PriorityKey},
		{name: "priority huge", ctx: incoming(PriorityKey, long), wantKey: PriorityKey},
		{name: "priority twice", ctx: incoming(PriorityKey, "batch", PriorityKey, "batch"), wantKey: PriorityKey},
		{name: "tenant too long", ctx: incoming(TenantKey, strings.Repeat("a", MaxTenantLen+1)), wantKey: TenantKey},
		{name: "tenant huge", ctx: incoming(TenantKey, long), wantKey: TenantKey},
		{name: "tenant with space", ctx: incoming(TenantKey, "acme corp"), wantKey: TenantKey},
		{name: "tenant with slash", ctx: incoming(TenantKey, "acme/eu"), wantKey: TenantKey},
		{name: "tenant non-ASCII", ctx: incoming(TenantKey, "acmé"), wantKey: TenantKey},
		{name: "tenant twice", ctx: incoming(TenantKey, "a", TenantKey, "b"), wantKey: TenantKey},
		{name: "first bad key is reported", ctx: incoming(AttemptKey, "x", TenantKey, "a b"), wantKey: AttemptKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromIncoming(tt.ctx)
			checkMalformed(t, err, tt.wantKey)
			if tt.wantKey != "" {
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FromIncoming() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// sent returns what AppendOutgoing put on the wire, as the receiver would see it.
func sent(ctx context.Context) metadata.MD {
	md, _ := metadata.FromOutgoingContext(ctx)
	return md
}

func TestAppendOutgoing(t *testing.T) {
	tests := []struct {
		name  string
		start context.Context
		facts Facts
		want  metadata.MD
	}{
		{
			name:  "all set",
			start: context.Background(),
			facts: Facts{Attempt: 2, Priority: Critical, Tenant: "acme"},
			want:  metadata.MD{AttemptKey: {"2"}, PriorityKey: {"critical"}, TenantKey: {"acme"}},
		},
		{
			name:  "unset fields are left out",
			start: context.Background(),
			facts: Facts{},
			want:  metadata.MD{},
		},
		{
			name: "previous levee values are replaced, other keys kept",
			start: metadata.AppendToOutgoingContext(
				metadata.NewOutgoingContext(context.Background(), metadata.Pairs(AttemptKey, "9", "other", "kept")),
				PriorityKey, "batch", TenantKey, "old", TenantKey, "older"),
			facts: Facts{Attempt: 1, Priority: Interactive, Tenant: "new"},
			want:  metadata.MD{AttemptKey: {"1"}, PriorityKey: {"interactive"}, TenantKey: {"new"}, "other": {"kept"}},
		},
		{
			name:  "unset fields remove previous values",
			start: metadata.AppendToOutgoingContext(context.Background(), AttemptKey, "3", PriorityKey, "batch", TenantKey, "old"),
			facts: Facts{Attempt: 4},
			want:  metadata.MD{AttemptKey: {"4"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := sent(tt.start)
			got := sent(AppendOutgoing(tt.start, tt.facts))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("outgoing metadata mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, sent(tt.start)); diff != "" {
				t.Errorf("AppendOutgoing modified its argument's metadata (-before +after):\n%s", diff)
			}
		})
	}
}

func TestFromContext(t *testing.T) {
	if diff := cmp.Diff(Facts{Attempt: 1, Priority: Interactive}, FromContext(context.Background())); diff != "" {
		t.Errorf("FromContext(no facts) mismatch (-want +got):\n%s", diff)
	}
	f := Facts{Attempt: 5, Priority: Batch, Tenant: "t"}
	if diff := cmp.Diff(f, FromContext(NewContext(context.Background(), f))); diff != "" {
		t.Errorf("FromContext(NewContext(f)) mismatch (-want +got):\n%s", diff)
	}
}

func BenchmarkFromIncoming(b *testing.B) {
	ctx := incoming(AttemptKey, "2", PriorityKey, "batch", TenantKey, "acme-eu", "other", "x")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FromIncoming(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
