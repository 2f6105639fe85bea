package budgetd_test

import (
	"strings"
	"testing"
	"time"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
)

// TestConfigThroughEtcd: settings written to etcd take effect on a running
// leader within a refresh interval (Status shows them, grants follow them);
// malformed values are rejected, reported in Status and a metric, and the
// last good settings stay; a default applies to keys without their own.
func TestConfigThroughEtcd(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	// Production timings: a change must reach the leader within one
	// refresh interval (1 s).
	r := budgetdtest.StartReplica(t, etcd, func(c *budgetd.Config) {
		c.RefreshInterval, c.LeaseValidity = time.Second, 3*time.Second
	})
	budgetdtest.WaitLeader(t, leaderWait, r)
	c := r.Client()
	ctx := ctxT(t)
	reg := r.Server().Registry()

	lease := func(first uint64, wanted uint32) *budgetv1.KeyLease {
		t.Helper()
		resp, err := c.Lease(ctx, &budgetv1.LeaseRequest{ClientId: "gw", Reports: []*budgetv1.KeyReport{report("verify", first, wanted)}})
		if err != nil {
			t.Fatalf("Lease: %v", err)
		}
		return resp.GetLeases()[0]
	}
	settingsOf := func(key string) *budgetv1.StatusResponse {
		t.Helper()
		st, err := c.Status(ctx, &budgetv1.StatusRequest{Key: key})
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		return st
	}

	if got := lease(100, 1000).GetTokens(); got < 10 || got > 11 {
		t.Fatalf("default ratio 0.1: 100 first attempts granted %d tokens, want 10", got)
	}

	// A change applies without a restart, within one refresh interval.
	budgetdtest.PutConfig(t, etcd, "", "verify", `{"ratio":0.5,"burst":10,"min_per_second":0}`)
	took := eventually(t, 5*time.Second, "new ratio in Status", func() bool {
		return settingsOf("verify").GetBudgets()[0].GetSettings().GetRatio() == 0.5
	})
	t.Logf("configuration applied %v after the put", took)
	if took > time.Second {
		t.Errorf("configuration took %v to apply; want within the refresh interval (1s)", took)
	}
	// 50 earned at ratio 0.5, plus what min_per_second 1 earned before the
	// change (a fraction of a token unless the machine is very slow).
	l := lease(100, 1000)
	if got := l.GetTokens(); got < 50 || got > 55 {
		t.Errorf("ratio 0.5: 100 first attempts granted %d tokens, want 50", got)
	}
	if got := l.GetSettings().GetRatio(); got != 0.5 {
		t.Errorf("lease carries ratio %v, want 0.5", got)
	}
	if got := metricValue(t, reg, "levee_budgetd_tokens_granted_total", "key", "verify"); got < 50 {
		t.Errorf("tokens_granted_total{key=verify} = %v: a configured key gets its own series", got)
	}

	// Malformed values are rejected; the last good value stays.
	for i, bad := range []struct{ value, why string }{
		{`{"ratio":0.2,"burst":`, "invalid JSON"},
		{`{"ratio":-1,"burst":10,"min_per_second":0}`, "ratio must be in [0, 10], got -1"},
		{`{"ratio":0.2,"burst":10}`, "missing field(s) min_per_second"},
		{`{"ratio":0.2,"burst":10,"min_per_second":0,"rate":3}`, `unknown field(s) "rate"`},
	} {
		budgetdtest.PutConfig(t, etcd, "", "verify", bad.value)
		var st *budgetv1.StatusResponse
		eventually(t, 5*time.Second, "config error for "+bad.value, func() bool {
			st = settingsOf("verify")
			return len(st.GetConfigErrors()) == 1 && strings.Contains(st.GetConfigErrors()[0], bad.why)
		})
		msg := st.GetConfigErrors()[0]
		for _, s := range []string{"/levee/budget/config/verify", "keeping the last good settings (ratio 0.5, burst 10, min_per_second 0)"} {
			if !strings.Contains(msg, s) {
				t.Errorf("config error %q lacks %q", msg, s)
			}
		}
		if got := st.GetBudgets()[0].GetSettings().GetRatio(); got != 0.5 {
			t.Errorf("after %s: ratio %v, want the last good 0.5", bad.value, got)
		}
		if got := metricValue(t, reg, "levee_budgetd_config_errors_total"); got != float64(i+1) {
			t.Errorf("config_errors_total = %v, want %d", got, i+1)
		}
	}
	if got := lease(100, 1000).GetTokens(); got < 50 || got > 52 {
		t.Errorf("after rejected values: 100 first attempts granted %d tokens, want 50 (ratio 0.5)", got)
	}
	page := httpGet(t, "http://"+r.MetricsAddr()+"/")
	if !strings.Contains(page, "config errors:") || !strings.Contains(page, "unknown field") {
		t.Errorf("status page does not show the config error:\n%s", page)
	}
	if got := metricValue(t, reg, "levee_budgetd_config_invalid"); got != 1 {
		t.Errorf("config_invalid = %v, want 1", got)
	}

	// The default in etcd applies to keys without their own settings; a
	// key whose settings are removed falls back to it, and its error goes.
	budgetdtest.PutConfig(t, etcd, "", budgetd.DefaultConfigKey, `{"ratio":0.25,"burst":50,"min_per_second":2}`)
	eventually(t, 5*time.Second, "etcd default applies", func() bool {
		return settingsOf("unconfigured").GetBudgets()[0].GetSettings().GetRatio() == 0.25
	})
	budgetdtest.DeleteConfig(t, etcd, "", "verify")
	eventually(t, 5*time.Second, "removed key falls back to the default", func() bool {
		st := settingsOf("verify")
		return st.GetBudgets()[0].GetSettings().GetRatio() == 0.25 && len(st.GetConfigErrors()) == 0
	})
	// A bad key name is reported, not applied.
	budgetdtest.PutConfig(t, etcd, "", "bad key", `{"ratio":1,"burst":1,"min_per_second":1}`)
	eventually(t, 5*time.Second, "bad key name reported", func() bool {
		errs := settingsOf("").GetConfigErrors()
		return len(errs) == 1 && strings.Contains(errs[0], "not a budget key")
	})
}

// TestConfigReadAtStart: a replica that starts after the configuration was
// written reads it (and its errors) before it grants.
func TestConfigReadAtStart(t *testing.T) {
	etcd := etcdtest.StartEtcd(t)
	budgetdtest.PutConfig(t, etcd, "/other/", "verify", `{"ratio":2,"burst":5,"min_per_second":0}`)
	budgetdtest.PutConfig(t, etcd, "/other/", "broken", `[1,2]`)
	r := budgetdtest.StartReplica(t, etcd, func(c *budgetd.Config) { c.Prefix = "/other/" })
	budgetdtest.WaitLeader(t, leaderWait, r)
	ctx := ctxT(t)
	var st *budgetv1.StatusResponse
	eventually(t, 5*time.Second, "configuration read", func() bool {
		var err error
		st, err = r.Client().Status(ctx, &budgetv1.StatusRequest{})
		return err == nil && len(st.GetConfigErrors()) == 1 && len(st.GetBudgets()) == 1
	})
	if b := st.GetBudgets()[0]; b.GetKey() != "verify" || b.GetSettings().GetRatio() != 2 {
		t.Errorf("budget %v, want verify at ratio 2", b)
	}
	if !strings.Contains(st.GetConfigErrors()[0], "/other/config/broken: invalid JSON") {
		t.Errorf("config error %q", st.GetConfigErrors()[0])
	}
}
