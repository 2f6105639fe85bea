package chartcheck

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const chartDir = "../levee"

// valueSets are the values the chart must render cleanly with.
var valueSets = map[string][]string{
	"default":    nil,
	"production": {filepath.Join(chartDir, "values-production.yaml")},
	// Every optional part on, the chart's own etcd off.
	"external-etcd": {filepath.Join(chartDir, "values-production.yaml"), filepath.Join("testdata", "external-etcd.yaml")},
	"fixed-fleet":   {filepath.Join("testdata", "fixed-fleet.yaml")},
}

var (
	schemasOnce sync.Once
	schemas     *Schemas
	schemasErr  error
)

func loadSchemas(t *testing.T) *Schemas {
	t.Helper()
	schemasOnce.Do(func() {
		var p string
		if p, schemasErr = SpecPath(); schemasErr == nil {
			schemas, schemasErr = LoadSchemas(p)
		}
	})
	if schemasErr != nil {
		t.Fatal(schemasErr)
	}
	return schemas
}

func render(t *testing.T, files []string) []Object {
	t.Helper()
	objs, err := Render(chartDir, files, "levee", "levee")
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// With each set of values the chart renders, every object decodes strictly
// into its API type (Render) and validates against the Kubernetes OpenAPI
// schema, and every rule holds.
func TestChart(t *testing.T) {
	wk := readWellKnown(t)
	s := loadSchemas(t)
	for name, files := range valueSets {
		t.Run(name, func(t *testing.T) {
			objs := render(t, files)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.GVK.Kind]++
				if o.Typed == nil {
					continue // a custom resource: strictly decoded by Render
				}
				if err := s.Validate(o); err != nil {
					t.Error(err)
				}
			}
			t.Logf("%d objects: %v", len(objs), kinds)
			for _, r := range rules {
				for _, b := range r.check(objs, wk) {
					t.Errorf("rule %s: %s", r.name, b)
				}
			}
		})
	}
}

// Each rule fails on the values file that breaks it, and only that rule's
// file is needed to see it: the rules are not vacuous.
func TestRuleBreaks(t *testing.T) {
	wk := readWellKnown(t)
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			objs := render(t, []string{breakFile(r)})
			bad := r.check(objs, wk)
			if len(bad) == 0 {
				t.Fatalf("rule %s holds with %s, which breaks it", r.name, breakFile(r))
			}
			for _, b := range bad {
				t.Logf("as it should: %s", b)
			}
		})
	}
}

// The chart's ports and probe services are pkg/wellknown's.
func TestPortsAreWellKnown(t *testing.T) {
	wk := readWellKnown(t)
	for _, w := range Workloads(render(t, nil)) {
		want, ok := wk.ports[w.Component()]
		if !ok {
			continue
		}
		for _, c := range w.Pod.Spec.Containers {
			got := map[string]int32{}
			for _, p := range c.Ports {
				got[p.Name] = p.ContainerPort
			}
			if got["grpc"] != int32(want) || got["metrics"] != int32(want+wk.metricsOffset) {
				t.Errorf("%s: ports %v, want grpc %d and metrics %d", w.Object, got, want, want+wk.metricsOffset)
			}
			listen, _ := Arg(c.Args, "listen")
			if !strings.HasSuffix(listen, fmt.Sprintf(":%d", want)) {
				t.Errorf("%s: -listen=%s, want port %d", w.Object, listen, want)
			}
		}
	}
}

// The verifier advertises its own pod IP from the downward API, bracketed
// so that an IPv6 pod IP makes a host:port too (registry.Advertised drops
// the brackets from an IPv4 one).
func TestVerifierAdvertisesPodIP(t *testing.T) {
	for _, w := range Workloads(render(t, nil)) {
		if w.Component() != "verifier" {
			continue
		}
		c := w.Pod.Spec.Containers[0]
		adv, _ := Arg(c.Args, "advertise")
		if !strings.HasPrefix(adv, "[$(POD_IP)]:") {
			t.Errorf("-advertise=%s, want [$(POD_IP)]:port", adv)
		}
		var env *corev1.EnvVar
		for i := range c.Env {
			if c.Env[i].Name == "POD_IP" {
				env = &c.Env[i]
			}
		}
		if env == nil || env.ValueFrom == nil || env.ValueFrom.FieldRef == nil || env.ValueFrom.FieldRef.FieldPath != "status.podIP" {
			t.Errorf("POD_IP is not the downward API's status.podIP: %+v", env)
		}
	}
}
