// Package chartcheck renders Levee's Helm chart offline, with Helm's own
// Go packages and no cluster, and checks what it renders: every object
// decodes strictly into its Kubernetes API type (an unknown or duplicated
// field fails) and validates against the Kubernetes OpenAPI schema of the
// release this module builds against. Its tests hold the chart's policies
// (probes, disruption budgets, resources against flags, security contexts,
// network policies, the autoscaler's metric).
//
// It is a module of its own so that the product and the lab never compile
// Helm or the Kubernetes API.
package chartcheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// KubeVersion is the Kubernetes release the chart is rendered for and
// validated against: that of k8s.io/api in go.mod and of the OpenAPI
// schema (SpecModule).
const KubeVersion = "v1.37.2"

// Object is one rendered Kubernetes object.
type Object struct {
	// Template is the chart file it came from (templates/verifier.yaml).
	Template string
	// GVK is its apiVersion and kind.
	GVK schema.GroupVersionKind
	// Name is metadata.name.
	Name string
	// JSON is the object as rendered, converted from YAML.
	JSON []byte
	// Typed is the object decoded into its Go API type; nil for kinds the
	// client-go scheme does not hold (custom resources).
	Typed runtime.Object
}

func (o Object) String() string { return fmt.Sprintf("%s %s (%s)", o.GVK.Kind, o.Name, o.Template) }

// Render renders the chart in dir with the values files given (later ones
// win, as with helm -f), as release name in namespace, and returns every
// object, hooks included, in template order. Helm's strict mode is on: a
// template that reads a value that is not there fails.
func Render(dir string, valueFiles []string, name, namespace string) ([]Object, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	vals := map[string]any{}
	for _, f := range valueFiles {
		v, err := common.ReadValuesFile(f)
		if err != nil {
			return nil, fmt.Errorf("values %s: %w", f, err)
		}
		vals = mergeMaps(vals, v)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = common.KubeVersion{Version: KubeVersion, Major: "1", Minor: "37"}
	top, err := chartutil.ToRenderValues(ch, vals, common.ReleaseOptions{Name: name, Namespace: namespace,
		Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	out, err := engine.Engine{Strict: true}.Render(ch, top)
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	files := make([]string, 0, len(out))
	for f := range out {
		files = append(files, f)
	}
	slices.Sort(files)
	var objs []Object
	for _, f := range files {
		base := path.Base(f)
		if strings.HasPrefix(base, "_") || strings.HasSuffix(base, ".txt") {
			continue
		}
		docs, err := splitYAML(out[f])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, d := range docs {
			o, err := decode(strings.TrimPrefix(f, ch.Name()+"/"), d)
			if err != nil {
				return nil, err
			}
			objs = append(objs, o)
		}
	}
	return objs, nil
}

// mergeMaps merges b into a, recursing into maps as helm -f does.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// splitYAML returns the non-empty documents of a multi-document stream.
func splitYAML(s string) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(s)))
	var docs [][]byte
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var v any
		if err := yaml.Unmarshal(d, &v); err != nil {
			return nil, err
		}
		if v != nil {
			docs = append(docs, d)
		}
	}
}

// strict decodes JSON into the client-go scheme's types, refusing unknown
// and duplicated fields.
var strict = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	json.SerializerOptions{Strict: true})

// decode converts a YAML document to JSON (duplicate keys fail) and
// decodes it strictly into its API type when the scheme has one.
func decode(template string, doc []byte) (Object, error) {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return Object{}, fmt.Errorf("%s: %w", template, err)
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(j, &meta); err != nil {
		return Object{}, fmt.Errorf("%s: %w", template, err)
	}
	o := Object{Template: template, GVK: schema.FromAPIVersionAndKind(meta.APIVersion, meta.Kind), Name: meta.Metadata.Name, JSON: j}
	if o.GVK.Kind == "" || o.GVK.Version == "" || o.Name == "" {
		return Object{}, fmt.Errorf("%s: a document without apiVersion, kind or metadata.name", template)
	}
	if !scheme.Scheme.Recognizes(o.GVK) {
		if err := decodeCustom(o); err != nil {
			return Object{}, fmt.Errorf("%s: %w", o, err)
		}
		return o, nil
	}
	typed, _, err := strict.Decode(j, nil, nil)
	if err != nil {
		return Object{}, fmt.Errorf("%s: strict decoding: %w", o, err)
	}
	o.Typed = typed
	return o, nil
}

// Find returns the objects of kind, optionally only the one named name.
func Find(objs []Object, kind, name string) []Object {
	var out []Object
	for _, o := range objs {
		if o.GVK.Kind == kind && (name == "" || o.Name == name) {
			out = append(out, o)
		}
	}
	return out
}

// decodeStrictJSON decodes j into v, refusing unknown fields.
func decodeStrictJSON(j []byte, v any) error {
	return yaml.UnmarshalStrict(bytes.TrimSpace(j), v)
}
