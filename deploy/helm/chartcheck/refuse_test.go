package chartcheck

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

const goodPDB = `apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: x
spec:
  maxUnavailable: 1
  selector:
    matchLabels: {app: x}
`

// Strict decoding refuses a field the API type does not have, and a key
// given twice; the checks pass what is right.
func TestStrictDecodingRefuses(t *testing.T) {
	if _, err := decode("good", []byte(goodPDB)); err != nil {
		t.Fatalf("a good object: %v", err)
	}
	for name, doc := range map[string]string{
		"unknown field":   strings.Replace(goodPDB, "maxUnavailable: 1", "maxUnavailable: 1\n  maxUnavailabel: 2", 1),
		"duplicate key":   strings.Replace(goodPDB, "maxUnavailable: 1", "maxUnavailable: 1\n  maxUnavailable: 2", 1),
		"unknown custom":  "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: x}\n",
		"custom, bad key": "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata: {name: x}\nspec: {secretNam: y}\n",
	} {
		if _, err := decode(name, []byte(doc)); err == nil {
			t.Errorf("%s: decoded", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// The schemas refuse what strict decoding into Go types lets through or
// cannot see: a wrong type, a missing required field, a value of neither
// type an int-or-string takes; and they take null for an optional field
// and a number for a quantity, as the API server does.
func TestSchemaRefuses(t *testing.T) {
	s := loadSchemas(t)
	obj := func(doc string) Object {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(j, &m); err != nil {
			t.Fatal(err)
		}
		return Object{Template: "test", GVK: schema.FromAPIVersionAndKind(m.APIVersion, m.Kind), Name: "x", JSON: j}
	}
	pod := `apiVersion: v1
kind: Pod
metadata: {name: x, labels: null}
spec:
  containers:
    - name: c
      image: i
      resources: {limits: {cpu: 2, memory: 1Gi}}
      ports: [{containerPort: 80}]
      livenessProbe: {grpc: {port: 9701, service: liveness}}
      lifecycle: {preStop: {sleep: {seconds: 5}}}
`
	if err := s.Validate(obj(pod)); err != nil {
		t.Fatalf("a good pod: %v", err)
	}
	for name, doc := range map[string]string{
		"unknown field":         strings.Replace(pod, "image: i", "image: i\n      imag: j", 1),
		"wrong type":            strings.Replace(pod, "containerPort: 80", "containerPort: eighty", 1),
		"required field":        strings.Replace(pod, "- name: c\n      image: i", "- image: i", 1),
		"sleep without seconds": strings.Replace(pod, "sleep: {seconds: 5}", "sleep: {}", 1),
		"int-or-string":         strings.Replace(goodPDB, "maxUnavailable: 1", "maxUnavailable: [1]", 1),
	} {
		if err := s.Validate(obj(doc)); err == nil {
			t.Errorf("%s: validated", name)
		} else {
			t.Logf("%s: refused: %.200s", name, err)
		}
	}
}
