// Package deploy holds the fleet's deployment files beside
// docker-compose.yml: the etcd stand-in image, the Prometheus alerting rules
// and the Grafana dashboard. Its tests check that what those files ask of the
// fleet is what the fleet exports, and that the rules behave (promtool).
package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// seriesName matches a Levee series in PromQL.
var seriesName = regexp.MustCompile(`\blevee_[a-z_]+`)

// exportedNames are the metric names registered by non-test Go code under
// pkg/: every "levee_…" string literal.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	literal := regexp.MustCompile(`"(levee_[a-z_]+)"`)
	for _, dir := range []string{"pkg", "internal"} {
		err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range literal.FindAllStringSubmatch(string(src), -1) {
				names[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// checkNames fails for each series in exprs that no component exports (a
// histogram's _bucket, _sum and _count count as its name).
func checkNames(t *testing.T, what string, exprs []string, exported map[string]bool) {
	t.Helper()
	used := 0
	for _, e := range exprs {
		for _, n := range seriesName.FindAllString(e, -1) {
			used++
			base := n
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(n, suffix); ok && exported[b] {
					base = b
				}
			}
			if !exported[base] {
				t.Errorf("%s uses %s, which no Levee component exports", what, n)
			}
		}
	}
	if used == 0 {
		t.Errorf("%s names no Levee series", what)
	}
}

func TestDashboardNamesExportedSeries(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("grafana", "levee-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard: uid %q, %d panels", dash.UID, len(dash.Panels))
	}
	exported := exportedNames(t)
	var titles []string
	for _, p := range dash.Panels {
		titles = append(titles, p.Title)
		var exprs []string
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
		checkNames(t, "panel "+p.Title, exprs, exported)
	}
	// What the fleet's operators asked to see.
	for _, want := range []string{"Goodput", "Retry ratio", "Queue wait", "Admission limits"} {
		if !slices.ContainsFunc(titles, func(s string) bool { return strings.Contains(s, want) }) {
			t.Errorf("no dashboard panel about %q (panels: %q)", want, titles)
		}
	}
}

func TestRulesNameExportedSeries(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("prometheus", "levee-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	// The rules' expressions are the YAML's "expr:" values; promtool (below)
	// parses the file properly.
	var exprs []string
	lines := strings.Split(string(raw), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "expr:") {
			continue
		}
		e := strings.TrimSpace(strings.TrimPrefix(l, "expr:"))
		if e == "|" {
			indent := len(lines[i+1]) - len(strings.TrimLeft(lines[i+1], " "))
			for i+1 < len(lines) && len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) >= indent && strings.TrimSpace(lines[i+1]) != "" {
				i++
				e += " " + strings.TrimSpace(lines[i])
			}
		}
		exprs = append(exprs, e)
	}
	if len(exprs) < 10 {
		t.Fatalf("found %d rule expressions, want the alerts of levee-rules.yml", len(exprs))
	}
	checkNames(t, "levee-rules.yml", exprs, exportedNames(t))
}

// The rules load, and their unit tests (levee-rules.test.yml: the
// metastable signature, budget fallback, leadership, no verifier serving)
// pass under promtool, Prometheus's own checker.
func TestRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is required to check the alerting rules: apt-get install prometheus")
	}
	for _, args := range [][]string{
		{"check", "rules", filepath.Join("prometheus", "levee-rules.yml")},
		{"test", "rules", filepath.Join("prometheus", "levee-rules.test.yml")},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// The Helm chart (deploy/helm/levee, checked by its own module's tests)
// ships the alerting rules as a file of its own, since Helm reads no file
// outside the chart: it must be this directory's, byte for byte.
func TestChartRulesAreTheRules(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("prometheus", "levee-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("helm", "levee", "files", "levee-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Error("deploy/helm/levee/files/levee-rules.yml differs from deploy/prometheus/levee-rules.yml: copy it over")
	}
}

// The chart runs the etcd image docker-compose.yml runs (the one
// scripts/docker-etcd-image.sh can stand in for).
func TestChartEtcdImageIsCompose(t *testing.T) {
	compose, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*image: (\S+/etcd):(\S+)$`).FindSubmatch(compose)
	if m == nil {
		t.Fatal("docker-compose.yml names no etcd image")
	}
	values, err := os.ReadFile(filepath.Join("helm", "levee", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"repository: " + string(m[1]), "tag: " + string(m[2])} {
		if !strings.Contains(string(values), want+"\n") {
			t.Errorf("deploy/helm/levee/values.yaml does not say %q (the etcd image of docker-compose.yml)", want)
		}
	}
}
