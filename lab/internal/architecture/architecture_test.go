package architecture

import (
	"bufio"
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

const product = "github.com/leveehq/levee/"

// servers are the product's packages that serve one of Levee's services.
var servers = []string{"pkg/gateway", "pkg/verifier", "pkg/budgetd"}

// labRoot is the lab module's directory (this package is lab/internal/architecture).
const labRoot = "../.."

// TestNoServerInTheLab: no non-test package of the lab depends on a server
// package, directly or through another package. A test may start a real
// server in-process; what levee-lab is built from may not.
func TestNoServerInTheLab(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = labRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), product)
		if !ok {
			continue
		}
		seen++
		for _, s := range servers {
			if rest == s || strings.HasPrefix(rest, s+"/") {
				t.Errorf("the lab depends on %s, a server package: speak to the fleet over its wire API (gen/levee/...) instead", rest)
			}
		}
	}
	if seen == 0 {
		t.Fatal("go list found none of the product's packages among the lab's dependencies: the test looks in the wrong place")
	}
}

// metricName matches a metric name spelled out as a string literal: a
// Levee server's, or the Go runtime's and the process collector's that
// every server exports.
var metricName = regexp.MustCompile(`^(levee|process|go)_[a-z0-9_]+$`)

// TestSharedNamesComeFromWellknown: the lab spells out no metric name of
// the product's, and every wellknown name it uses is in one of wellknown's
// lists, which the product's tests check against what each server exports
// (pkg/fleet) and what each command defines (cmd/*). A rename on the
// product's side then fails the product's tests instead of emptying one of
// the lab's columns.
func TestSharedNamesComeFromWellknown(t *testing.T) {
	listed := wellknownLists(t)
	used := map[string]bool{}
	files := 0
	err := filepath.WalkDir(labRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != labRoot {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ImportSpec:
				return false // an import path is no name
			case *ast.BasicLit:
				if n.Kind == token.STRING {
					if s, err := strconv.Unquote(n.Value); err == nil && metricName.MatchString(s) {
						t.Errorf("%s: metric name %q spelled out: use its wellknown constant (add one, and list it, if wellknown lacks it)", path, s)
					}
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "wellknown" {
					used[n.Sel.Name] = true
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 10 {
		t.Fatalf("read %d Go files of the lab: the test looks in the wrong place", files)
	}
	metrics, flags := 0, 0
	for name := range used {
		kind := ""
		switch {
		case strings.HasPrefix(name, "Metric") && !strings.HasPrefix(name, "Metrics"): // MetricsOffset is a port
			kind, metrics = "metric", metrics+1
		case strings.HasPrefix(name, "Flag"):
			kind, flags = "flag", flags+1
		default:
			continue
		}
		if len(listed[name]) == 0 {
			t.Errorf("the lab uses wellknown.%s, a %s name in none of wellknown's lists: no product test checks it", name, kind)
		}
	}
	if metrics == 0 || flags == 0 {
		t.Errorf("the lab uses %d wellknown metric names and %d flag names: the test looks in the wrong place", metrics, flags)
	}
}

// wellknownLists reads pkg/wellknown's source: each identifier named in
// one of its lists (GatewayMetrics, VerifierFlags, ...), with the lists it
// is in. A list built with append is followed through the lists it
// appends.
func wellknownLists(t *testing.T) map[string][]string {
	t.Helper()
	path := filepath.Join(labRoot, "..", "pkg", "wellknown", "wellknown.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	// Every package-level var of identifiers, and what it appends.
	members := map[string][]string{}
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.VAR {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					ast.Inspect(vs.Values[i], func(n ast.Node) bool {
						if id, ok := n.(*ast.Ident); ok && id.Name != "append" && id.Name != "string" {
							members[name.Name] = append(members[name.Name], id.Name)
						}
						return true
					})
				}
			}
		}
	}
	var expand func(list string, seen map[string]bool) []string
	expand = func(list string, seen map[string]bool) []string {
		if seen[list] {
			return nil
		}
		seen[list] = true
		var out []string
		for _, m := range members[list] {
			if _, isList := members[m]; isList {
				out = append(out, expand(m, seen)...)
			} else {
				out = append(out, m)
			}
		}
		return out
	}
	listed := map[string][]string{}
	for list := range members {
		// The lists the product's tests check are exported.
		if !ast.IsExported(list) {
			continue
		}
		for _, m := range expand(list, map[string]bool{}) {
			listed[m] = append(listed[m], list)
		}
	}
	if len(listed) == 0 {
		t.Fatalf("found no lists in %s", path)
	}
	return listed
}
