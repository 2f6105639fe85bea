package chartcheck

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The custom resources the chart may render, as far as it uses them: the
// fields below are those of cert-manager.io/v1 Certificate and
// monitoring.coreos.com/v1 ServiceMonitor and PrometheusRule that the chart
// sets, spelled as those APIs spell them. The client-go scheme has no types
// for them and this module does not build against their operators; a field
// the chart starts to use must be added here, so that a misspelt one still
// fails strict decoding.

type certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName  string   `json:"secretName"`
		CommonName  string   `json:"commonName"`
		Duration    string   `json:"duration"`
		RenewBefore string   `json:"renewBefore"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		URIs        []string `json:"uris,omitempty"`
		Usages      []string `json:"usages"`
		PrivateKey  struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy"`
		} `json:"privateKey"`
		IssuerRef struct {
			Name  string `json:"name"`
			Kind  string `json:"kind"`
			Group string `json:"group"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert,omitempty"`
				Record      string            `json:"record,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// decodeCustom strictly decodes a custom resource the chart renders, and
// refuses any other kind the scheme does not know.
func decodeCustom(o Object) error {
	var v any
	switch o.GVK.GroupKind().String() {
	case "Certificate.cert-manager.io":
		v = &certificate{}
	case "ServiceMonitor.monitoring.coreos.com":
		v = &serviceMonitor{}
	case "PrometheusRule.monitoring.coreos.com":
		v = &prometheusRule{}
	default:
		return fmt.Errorf("kind %s is neither a Kubernetes API type nor a custom resource this package knows", o.GVK)
	}
	if o.GVK.Version != "v1" {
		return fmt.Errorf("%s: only v1 is known", o.GVK)
	}
	if err := decodeStrictJSON(o.JSON, v); err != nil {
		return fmt.Errorf("strict decoding: %w", err)
	}
	return nil
}
