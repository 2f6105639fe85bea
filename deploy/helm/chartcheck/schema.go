package chartcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The Kubernetes OpenAPI (v2) document ships in the kubernetes module
// (api/openapi-spec/swagger.json), which no Go program can require (its
// go.mod points its k8s.io/* modules at directories of its own tree), so
// the module is fetched through the Go module proxy like any download and
// its checksum held to SpecModuleSum, as go.sum would.
const (
	SpecModule     = "k8s.io/kubernetes@" + KubeVersion
	SpecModuleSum  = "h1:A2VDEiObzkYqFTKhSsn0ZEb0RlLEXpHWj93gi2HqEwE="
	specModuleFile = "api/openapi-spec/swagger.json"
)

// SpecPath returns the path of the Kubernetes OpenAPI document of
// KubeVersion in the module cache, downloading the module first if it is
// not there (go mod download: the module proxy, checked against
// SpecModuleSum).
func SpecPath() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", SpecModule)
	cmd.Dir = os.TempDir() // outside any module: nothing is added to a go.mod
	// SpecModuleSum pins the module as go.sum would; the checksum database
	// is not asked as well (one network dependency less).
	cmd.Env = append(os.Environ(), "GONOSUMDB=k8s.io/kubernetes")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %v: %s", SpecModule, err, stderr.Bytes())
	}
	var m struct{ Dir, Sum, Error string }
	if err := json.Unmarshal(out, &m); err != nil {
		return "", fmt.Errorf("go mod download %s: %w", SpecModule, err)
	}
	if m.Error != "" {
		return "", fmt.Errorf("go mod download %s: %s", SpecModule, m.Error)
	}
	if m.Sum != SpecModuleSum {
		return "", fmt.Errorf("%s has checksum %s, want %s", SpecModule, m.Sum, SpecModuleSum)
	}
	return filepath.Join(m.Dir, specModuleFile), nil
}

// Schemas validates objects against the Kubernetes OpenAPI schemas, made
// strict as kubeconform's are (openapi2jsonschema --strict): an object
// with properties admits no other field, int-or-string admits either,
// a quantity a string or a number, and any field may be null (the API
// server reads null as unset).
type Schemas struct {
	c     *jsonschema.Compiler
	byGVK map[schema.GroupVersionKind]string
	cache map[schema.GroupVersionKind]*jsonschema.Schema
}

const specURL = "file:///kubernetes-openapi.json"

// LoadSchemas reads the OpenAPI v2 document at path.
func LoadSchemas(path string) (*Schemas, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s := &Schemas{byGVK: map[schema.GroupVersionKind]string{}, cache: map[schema.GroupVersionKind]*jsonschema.Schema{}}
	defs := map[string]any{}
	for name, d := range doc.Definitions {
		if gvks, ok := d["x-kubernetes-group-version-kind"].([]any); ok {
			for _, g := range gvks {
				m, _ := g.(map[string]any)
				group, _ := m["group"].(string)
				version, _ := m["version"].(string)
				kind, _ := m["kind"].(string)
				s.byGVK[schema.GroupVersionKind{Group: group, Version: version, Kind: kind}] = name
			}
		}
		switch name {
		case "io.k8s.apimachinery.pkg.api.resource.Quantity":
			defs[name] = nullable(map[string]any{"oneOf": []any{
				map[string]any{"type": "string"}, map[string]any{"type": "number"}}})
		default:
			defs[name] = strictSchema(d)
		}
	}
	// The compiler wants the document as its own JSON reader gives it.
	strictDoc, err := json.Marshal(map[string]any{"definitions": defs})
	if err != nil {
		return nil, err
	}
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(strictDoc))
	if err != nil {
		return nil, err
	}
	s.c = jsonschema.NewCompiler()
	s.c.DefaultDraft(jsonschema.Draft4)
	if err := s.c.AddResource(specURL, parsed); err != nil {
		return nil, err
	}
	return s, nil
}

// strictSchema rewrites one OpenAPI schema node (and the nodes under it).
func strictSchema(n map[string]any) map[string]any {
	if n["format"] == "int-or-string" {
		return nullable(map[string]any{"oneOf": []any{
			map[string]any{"type": "string"}, map[string]any{"type": "integer"}}})
	}
	out := map[string]any{}
	for k, v := range n {
		switch k {
		case "description", "x-kubernetes-group-version-kind":
			// prose, and the map this package built from it
		case "properties":
			props := map[string]any{}
			for name, p := range v.(map[string]any) {
				props[name] = strictSchema(p.(map[string]any))
			}
			out[k] = props
		case "items":
			out[k] = strictSchema(v.(map[string]any))
		case "additionalProperties":
			if m, ok := v.(map[string]any); ok {
				out[k] = strictSchema(m)
			} else {
				out[k] = v
			}
		case "allOf", "oneOf", "anyOf":
			var l []any
			for _, e := range v.([]any) {
				l = append(l, strictSchema(e.(map[string]any)))
			}
			out[k] = l
		default:
			out[k] = v
		}
	}
	if ref, ok := out["$ref"].(string); ok {
		// Draft 4 ignores a $ref's siblings; nothing but prose stands there.
		return map[string]any{"$ref": ref}
	}
	if _, ok := out["properties"]; ok {
		if _, ok := out["additionalProperties"]; !ok {
			out["additionalProperties"] = false
		}
	}
	return nullable(out)
}

// nullable lets n also be null.
func nullable(n map[string]any) map[string]any {
	if t, ok := n["type"].(string); ok {
		n["type"] = []any{t, "null"}
		return n
	}
	if _, ok := n["oneOf"]; ok {
		n["oneOf"] = append(n["oneOf"].([]any), map[string]any{"type": "null"})
	}
	return n
}

// Validate validates o against the schema of its kind; a kind the document
// does not define (a custom resource) is an error.
func (s *Schemas) Validate(o Object) error {
	sch, ok := s.cache[o.GVK]
	if !ok {
		name, ok := s.byGVK[o.GVK]
		if !ok {
			return fmt.Errorf("%s: no schema for %s in Kubernetes %s", o, o.GVK, KubeVersion)
		}
		var err error
		if sch, err = s.c.Compile(specURL + "#/definitions/" + name); err != nil {
			return fmt.Errorf("%s: compile schema %s: %w", o, name, err)
		}
		s.cache[o.GVK] = sch
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(o.JSON))
	if err != nil {
		return fmt.Errorf("%s: %w", o, err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s: %w", o, err)
	}
	return nil
}

// Known reports whether the document defines o's kind.
func (s *Schemas) Known(o Object) bool {
	_, ok := s.byGVK[o.GVK]
	return ok
}
