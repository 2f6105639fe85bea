package report

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/observe"
)

// A tenant run's report has each tenant's plot, its rows in
// summary-tenants.csv and the Tenants table, with the checks of issue 25.
func TestTenantReport(t *testing.T) {
	start := time.Now()
	s := observe.NewSeries(start, 4)
	s.SetTenants([]string{"a", "b"})
	for sec := range 4 {
		at := start.Add(time.Duration(sec) * time.Second)
		s.Add(at, func(x *observe.Second) {
			x.Offered.Add(110)
			x.Goodput.Add(95)
			x.ArrivedOK.Add(95)
			x.ArrivedEnded.Add(110)
		})
		s.AddTenant(at, 0, func(x *observe.TenantSecond) {
			x.Offered.Add(10)
			x.Goodput.Add(10)
			x.ArrivedOK.Add(10)
			x.ArrivedEnded.Add(10)
		})
		s.AddTenant(at, 1, func(x *observe.TenantSecond) {
			x.Offered.Add(100)
			x.Goodput.Add(85)
			x.ArrivedOK.Add(85)
			x.ArrivedEnded.Add(100)
			x.Codes[observe.CodeResourceExhausted].Add(15)
		})
	}
	ts := []experiment.Tenant{{Name: "a", Load: 0.1, Kind: experiment.Naive, Cost: 1}, {Name: "b", Load: 1, Kind: experiment.Naive, Cost: 1}}
	base := experiment.Window{From: 0, To: 4}
	r := &experiment.Result{Fleet: "levee", Variant: "fair-share on", Capacity: experiment.Capacity{PerSecond: 100}, Series: s,
		Spec: experiment.Spec{Load: 1, Baseline: 4 * time.Second, Trigger: experiment.Trigger{Kind: experiment.None}, Seed: 1},
		Base: base, Trig: experiment.Window{From: 4, To: 4}, Obs: experiment.Window{From: 4, To: 4}}
	r.Verdict = experiment.Judge(s, r.Base, r.Trig, r.Obs, 0)
	r.Tenants = experiment.JudgeTenants(s, ts, r.Base, r.Trig, r.Obs, 0)
	dir := t.TempDir()
	if _, err := WriteRuns(dir, Runs{Kind: Single, Results: []*experiment.Result{r}, Planned: 1, Clients: experiment.DefaultClients()}); err != nil {
		t.Fatal(err)
	}
	name := "levee-none-0s-load100-seed1-a0.1-b1-fair-share-on"
	for _, f := range []string{"runs/" + name + ".csv", name + "-tenants.png", "summary-tenants.csv"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Tenants", "| a:0.1:naive | 0.10 | 100.00 % |", "| b:1:naive | 1.00 | 85.00 % |", "resource_exhausted 60"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	f, err := os.Open(filepath.Join(dir, "summary-tenants.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || len(rows[1]) != len(tenantSummaryHeader) {
		t.Fatalf("summary-tenants.csv: %d rows of %d fields, want 3 of %d", len(rows), len(rows[1]), len(tenantSummaryHeader))
	}
	col := func(name string) int {
		for i, h := range rows[0] {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %s", name)
		return -1
	}
	if got := rows[1][col("quiet_served_ok")]; got != "true" {
		t.Errorf("quiet_served_ok = %s, want true (a served 100 %%)", got)
	}
	if got := rows[1][col("goodput_over_c")]; got != "0.9500" {
		t.Errorf("goodput_over_c = %s, want 0.9500", got)
	}
}
