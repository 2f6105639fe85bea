package fleetctl_test

import (
	"bytes"
	"context"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
	"github.com/leveehq/levee/pkg/fleetctl"
)

// Every test runs real servers (budgetd, etcd, HTTP); none of their
// goroutines may outlive the tests.
func TestMain(m *testing.M) {
	// budgetd's elections time out: not beside the lab's tests (testlock).
	testlock.Shared()
	goleak.VerifyTestMain(m)
}

// leaderWait bounds the wait for a first election (one round trip to etcd).
const leaderWait = 15 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func report(key string, first uint64, wanted uint32) *budgetv1.KeyReport {
	return &budgetv1.KeyReport{Key: key, FirstAttempts: first, TokensWanted: wanted}
}

// statusCmd runs StatusCommand as `budgetd status` and `levee status` do:
// from its flags, args.
func statusCmd(ctx context.Context, w io.Writer, args ...string) error {
	var c fleetctl.StatusCommand
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return c.Run(ctx, w)
}

// TestPrintStatus runs what `budgetd status` runs against a replica: the
// readable tables name the leader, every key with its settings and totals,
// every client and the configuration errors; -json is the StatusResponse;
// -addr's default is budgetd's own listen address.
func TestPrintStatus(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	budgetdtest.PutConfig(t, etcd, "", "verify", `{"ratio":0.2,"burst":40,"min_per_second":0}`)
	budgetdtest.PutConfig(t, etcd, "", "typo", `{"ratio":0.2,"burst":40,"min_per_sec":0}`)
	r := budgetdtest.StartReplica(t, etcd, nil)
	budgetdtest.WaitLeader(t, leaderWait, r)
	ctx := ctxT(t)
	for _, id := range []string{"gateway-a/1", "gateway-b/2"} {
		if _, err := r.Client().Lease(ctx, &budgetv1.LeaseRequest{ClientId: id, Reports: []*budgetv1.KeyReport{
			report("verify", 100, 7), report("login/tenant-x", 10, 1)}}); err != nil {
			t.Fatalf("Lease: %v", err)
		}
	}

	var buf bytes.Buffer
	if err := statusCmd(ctx, &buf, "-addr", r.Addr(), "-insecure"); err != nil {
		t.Fatalf("status: %v", err)
	}
	out := buf.String()
	t.Logf("budgetd status:\n%s", out)
	for _, want := range []string{
		"leader:  " + r.Addr(),
		"KEY", "RATIO", "TOKENS", "RETRY RATIO", "GRANTED",
		"login/tenant-x  0.1    100",
		"verify          0.2    40",
		"clients of verify:", "gateway-a/1", "gateway-b/2",
		"config errors:", `/levee/budget/config/typo: unknown field(s) "min_per_sec" (known: ratio, burst, min_per_second); the default applies`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q", want)
		}
	}

	buf.Reset()
	if err := statusCmd(ctx, &buf, "-addr", r.Addr(), "-insecure", "-key", "verify", "-json"); err != nil {
		t.Fatalf("status -json: %v", err)
	}
	var got budgetv1.StatusResponse
	if err := protojson.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("-json output does not parse: %v\n%s", err, buf.String())
	}
	want, err := r.Client().Status(ctx, &budgetv1.StatusRequest{Key: "verify"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, &got, protocmp.Transform(),
		protocmp.IgnoreFields(&budgetv1.BudgetStatus{}, "tokens_available", "first_attempts_per_second", "retries_per_second", "retry_ratio"),
		protocmp.IgnoreFields(&budgetv1.ClientStatus{}, "since_report", "first_attempts_per_second")); diff != "" {
		t.Errorf("-json (-Status +printed):\n%s", diff)
	}
	if !strings.Contains(buf.String(), `"tokens_granted_total"`) {
		t.Errorf("-json uses proto field names: %s", buf.String())
	}

	if err := statusCmd(ctx, &buf, "-addr", r.Addr(), "-insecure", "-key", "bad key"); err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Errorf("status with a bad key: %v, want InvalidArgument", err)
	}

	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	new(fleetctl.StatusCommand).AddFlags(fs)
	if got, want := fs.Lookup("addr").DefValue, budgetd.DefaultConfig().ListenAddr; got != want {
		t.Errorf("-addr defaults to %s, budgetd listens on %s", got, want)
	}
}
