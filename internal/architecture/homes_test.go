package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/leveehq/levee/pkg/wellknown"
)

// literals calls f for every string and integer literal in the
// repository's non-test, non-generated Go files (the lab's module's too),
// with the file's path relative to root.
func literals(t *testing.T, root string, f func(path string, lit *ast.BasicLit)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "gen") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok {
				f(filepath.ToSlash(rel), lit)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Each metric name has one home: the one line of code that names it, in
// the component that registers it or, for a name other programs read, in
// pkg/wellknown. A second literal of the same name is a second home that
// can drift from the first.
func TestMetricNamesHaveOneHome(t *testing.T) {
	name := regexp.MustCompile(`^levee_[a-z0-9_]+$`)
	homes := map[string][]string{}
	literals(t, moduleRoot(t), func(path string, lit *ast.BasicLit) {
		if lit.Kind != token.STRING {
			return
		}
		if s, err := strconv.Unquote(lit.Value); err == nil && name.MatchString(s) {
			homes[s] = append(homes[s], path)
		}
	})
	if len(homes) < 50 {
		t.Fatalf("found %d metric names in the product's code; the scan is broken", len(homes))
	}
	for n, paths := range homes {
		if len(paths) > 1 {
			t.Errorf("metric %s is named in %d places (%s): name it once, in pkg/wellknown if another program reads it", n, len(paths), strings.Join(paths, ", "))
		}
	}
}

// The default ports live in pkg/wellknown alone.
func TestDefaultPortsHaveOneHome(t *testing.T) {
	ports := map[string]bool{}
	for _, p := range []int{wellknown.GatewayPort, wellknown.VerifierPort, wellknown.BudgetdPort, wellknown.LocalVerifierPort,
		wellknown.EtcdClientPort, wellknown.EtcdPeerPort} {
		ports[strconv.Itoa(p)] = true
		ports[strconv.Itoa(p+wellknown.MetricsOffset)] = true
	}
	// An address or URL with a port, as a literal of its own (help text,
	// which names them in prose, is left alone).
	hostPort := regexp.MustCompile(`^(\w+://)?[\w.\-\[\]]*:(\d+)(/\S*)?$`)
	seen := 0
	literals(t, moduleRoot(t), func(path string, lit *ast.BasicLit) {
		var found string
		switch lit.Kind {
		case token.INT:
			if ports[lit.Value] {
				found = lit.Value
			}
		case token.STRING:
			v, err := strconv.Unquote(lit.Value)
			if m := hostPort.FindStringSubmatch(v); err == nil && m != nil && ports[m[2]] {
				found = m[2]
			}
		}
		if found == "" {
			return
		}
		if path == "pkg/wellknown/wellknown.go" {
			seen++
			return
		}
		t.Errorf("%s names default port %s: use the constant in pkg/wellknown", path, found)
	})
	if seen == 0 {
		t.Fatal("no default port found in pkg/wellknown: the scan is broken")
	}
}
