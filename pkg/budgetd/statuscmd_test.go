package budgetd_test

import (
	"bytes"
	"context"
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
)

// statusCmd runs StatusCommand as `budgetd status` and `levee status` do:
// from its flags, args.
func statusCmd(ctx context.Context, w io.Writer, args ...string) error {
	var c budgetd.StatusCommand
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return c.Run(ctx, w)
}

// TestPrintStatus runs what `budgetd status` runs against a replica: the
// readable tables name the leader, every key with its settings and totals,
// every client and the configuration errors; -json is the StatusResponse.
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
}

// TestWriteStatusNoLeader: without a leader the output says so, and what
// clients do meanwhile.
func TestWriteStatusNoLeader(t *testing.T) {
	var buf bytes.Buffer
	err := budgetd.WriteStatus(&buf, &budgetv1.StatusResponse{Replica: "10.0.0.2:7702"}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "leader:  none (clients use their local fallback budgets)\nreplica: 10.0.0.2:7702\n\nno budgets yet\n"
	if diff := cmp.Diff(want, buf.String()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
