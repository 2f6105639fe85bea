package chartcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// wellKnown are the facts of the product's pkg/wellknown the chart must
// agree with, read from its source (this module does not build the
// product).
type wellKnown struct {
	ports          map[string]int // gRPC port by component
	metricsOffset  int
	etcdClientPort int
	probeLiveness  string
	probeReadiness string
	demandMetric   string
	verifierMetric []string // the constants' values named in VerifierMetrics
}

func (w wellKnown) port(component string) int { return w.ports[component] }

func (w wellKnown) verifierExports(name string) bool { return slices.Contains(w.verifierMetric, name) }

var wellKnownFile = filepath.Join("..", "..", "..", "pkg", "wellknown", "wellknown.go")

func readWellKnown(t *testing.T) wellKnown {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), wellKnownFile, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	var verifierMetrics []string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if i >= len(vs.Values) {
				continue
			}
			if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
				consts[name.Name] = lit.Value
			}
			if name.Name == "VerifierMetrics" {
				ast.Inspect(vs.Values[i], func(n ast.Node) bool {
					if id, ok := n.(*ast.Ident); ok {
						verifierMetrics = append(verifierMetrics, id.Name)
					}
					return true
				})
			}
		}
		return true
	})
	str := func(name string) string {
		s, err := strconv.Unquote(consts[name])
		if err != nil {
			t.Fatalf("pkg/wellknown: %s is not a string constant (%q)", name, consts[name])
		}
		return s
	}
	num := func(name string) int {
		n, err := strconv.Atoi(consts[name])
		if err != nil {
			t.Fatalf("pkg/wellknown: %s is not an integer constant (%q)", name, consts[name])
		}
		return n
	}
	wk := wellKnown{
		ports:          map[string]int{"gateway": num("GatewayPort"), "verifier": num("VerifierPort"), "budgetd": num("BudgetdPort")},
		metricsOffset:  num("MetricsOffset"),
		etcdClientPort: num("EtcdClientPort"),
		probeLiveness:  str("ProbeLiveness"),
		probeReadiness: str("ProbeReadiness"),
		demandMetric:   str("MetricVerifierDemand"),
	}
	for _, id := range verifierMetrics {
		if v, ok := consts[id]; ok {
			if s, err := strconv.Unquote(v); err == nil {
				wk.verifierMetric = append(wk.verifierMetric, s)
			}
		}
	}
	return wk
}
