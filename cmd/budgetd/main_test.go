package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
	"github.com/leveehq/levee/pkg/wellknown"
	"github.com/leveehq/levee/pkg/wellknown/wellknowntest"
)

func TestMain(m *testing.M) {
	// These tests measure time: not beside the lab's (see testlock).
	testlock.Shared()
	goleak.VerifyTestMain(m)
}

// TestStatusSubcommand: `budgetd status -addr A -key K` prints the
// leader's table for K.
func TestStatusSubcommand(t *testing.T) {
	r := budgetdtest.StartReplica(t, nil, nil)
	budgetdtest.WaitLeader(t, 15*time.Second, r)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Client().Lease(ctx, &budgetv1.LeaseRequest{ClientId: "gw-1", Reports: []*budgetv1.KeyReport{
		{Key: "verify", FirstAttempts: 10, TokensWanted: 1}, {Key: "other", FirstAttempts: 10}}}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"status", "-insecure", "-addr", r.Addr(), "-key", "verify"}, &out, &errOut); err != nil {
		t.Fatalf("budgetd status: %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"leader:  " + r.Addr(), "verify", "gw-1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "other") {
		t.Errorf("-key verify printed another key:\n%s", out.String())
	}
}

func TestBadArguments(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-insecure", "-election-ttl", "1s"}, "ElectionTTL"},
		{[]string{"-insecure", "-refresh-interval", "0s"}, "RefreshInterval"},
		{[]string{"-insecure", "-default-ratio", "-1"}, "atio"},
		{[]string{"-insecure", "-etcd-log-level", "loud"}, "etcd-log-level"},
		{[]string{"-no-such-flag"}, "no-such-flag"},
		{[]string{"-insecure", "serve-please"}, "unexpected argument"},
		// Refuses to start in plaintext unless told to, and says how.
		{nil, "levee certs"},
		{[]string{"-insecure", "-tls-dir", "certs"}, "pick one"},
		{[]string{"status", "-addr"}, "-addr"},
		{[]string{"status", "-insecure", "extra"}, "unexpected argument"},
		{[]string{"status"}, "levee certs"},
	} {
		err := run(ctx, tc.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("budgetd %s: %v, want an error naming %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// The flags other programs pass to budgetd (the lab) are ones it defines.
func TestDefinesWellKnownFlags(t *testing.T) {
	var usage strings.Builder
	if err := run(t.Context(), []string{"-help"}, io.Discard, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run(-help) = %v, want flag.ErrHelp", err)
	}
	wellknowntest.CheckFlags(t, usage.String(), wellknown.BudgetdFlags)
}
