package verifier

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/deadline"
	"github.com/leveehq/levee/pkg/registry"
	"github.com/leveehq/levee/pkg/verify"
)

// /metrics on the metrics listener serves the verifier's series and the gRPC
// server's, from the server's own registry.
func TestMetricsOverHTTP(t *testing.T) {
	cfg := testConfig()
	cfg.Registry = nil // the default: a private registry with the Go and process collectors
	h := start(t, cfg)
	_, err := h.verify.Hash(context.Background(), &verifyv1.HashRequest{Password: []byte("pw")})
	wantOK(t, "Hash", err)

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	resp, err := (&http.Client{Transport: transport, Timeout: 10 * time.Second}).Get(h.metrics + "/metrics")
	wantOK(t, "GET /metrics", err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	wantOK(t, "parse /metrics", err)

	for _, name := range []string{
		"levee_verifier_queue_wait_seconds",
		"levee_verifier_service_seconds",
		"levee_verifier_goodput_total",
		"levee_verifier_late_total",
		"levee_verifier_dropped_total",
		"levee_verifier_hashes_total",
		"levee_verifier_inflight",
		"levee_verifier_queue_length",
		"levee_verifier_workers_active",
		"levee_verifier_lifo",
		"levee_verifier_expected_service_seconds",
		"grpc_server_handled_total",
		"grpc_server_handling_seconds",
		"go_goroutines",
		"process_cpu_seconds_total",
	} {
		if _, ok := families[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	// The call made above is in the scraped counters.
	checks := []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"levee_verifier_hashes_total", map[string]string{"algorithm": "argon2id"}, 1},
		{"levee_verifier_goodput_total", map[string]string{"rpc": "hash"}, 1},
		{"grpc_server_handled_total", map[string]string{
			"grpc_service": "levee.verify.v1.VerifyService", "grpc_method": "Hash", "grpc_code": "OK",
		}, 1},
	}
	for _, c := range checks {
		var got float64
		if mf := families[c.family]; mf != nil {
			for _, m := range mf.GetMetric() {
				if hasLabels(m, c.labels) {
					got += value(m)
				}
			}
		}
		if got != c.want {
			t.Errorf("%s%v = %v, want %v", c.family, c.labels, got, c.want)
		}
	}
}

// Validate names every invalid field, and New refuses an invalid Config.
func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		// want lists substrings the error must contain; none means valid.
		want []string
		// is lists sentinels the error must match.
		is []error
	}{
		{name: "default", edit: func(*Config) {}},
		{name: "test config", edit: func(c *Config) { *c = testConfig() }},
		{name: "queue of one", edit: func(c *Config) { c.QueueCapacity = 1 }},
		{name: "no queue", edit: func(c *Config) { c.QueueCapacity = 0 },
			want: []string{"QueueCapacity must be at least 1, got 0"}},
		{name: "no workers", edit: func(c *Config) { c.Workers = 0 },
			want: []string{"Workers must be at least 1, got 0"}},
		{name: "zero MaxQueueWait", edit: func(c *Config) { c.MaxQueueWait = 0 },
			want: []string{"MaxQueueWait must be positive, got 0s"}},
		{name: "negative LIFOAfter", edit: func(c *Config) { c.LIFOAfter = -time.Second },
			want: []string{"LIFOAfter must be positive, got -1s"}},
		{name: "zero DrainTimeout", edit: func(c *Config) { c.DrainTimeout = 0 },
			want: []string{"DrainTimeout must be positive, got 0s"}},
		{name: "zero Deadline", edit: func(c *Config) { c.Deadline = deadline.Config{} },
			want: []string{"Deadline:"}, is: []error{deadline.ErrInvalidDefault, deadline.ErrInvalidMax}},
		{name: "policy over the limits", edit: func(c *Config) { c.Policy.Params.Memory = c.Limits.MaxMemoryKiB + 1 },
			want: []string{"Policy:", "Params.Memory"}, is: []error{verify.ErrInvalidPolicy}},
		{name: "invalid limits", edit: func(c *Config) { c.Limits.MaxBcryptCost = 32 },
			want: []string{"Policy:", "MaxBcryptCost"}, is: []error{verify.ErrInvalidLimits}},
		{name: "pepper", edit: func(c *Config) { c.Peppers = testPeppers("k1", "k1", "k0") }},
		{name: "peppered hashes over MaxEncodedLen", edit: func(c *Config) {
			c.Peppers = testPeppers(strings.Repeat("k", verify.MaxPepperIDLen), strings.Repeat("k", verify.MaxPepperIDLen))
			c.Limits.MaxEncodedLen = 100 // the policy's 97-byte hashes fit, with the keyid they do not
		}, want: []string{"Peppers:", "MaxEncodedLen"}, is: []error{verify.ErrInvalidPolicy}},
		{name: "registration", edit: func(c *Config) {
			c.EtcdEndpoints, c.AdvertiseAddr = []string{"etcd-1:2379"}, "verifier-3.levee.svc:7701"
		}},
		{name: "undialable AdvertiseAddr", edit: func(c *Config) { c.AdvertiseAddr = "0.0.0.0:7701" },
			want: []string{"AdvertiseAddr:", "unspecified"}, is: []error{registry.ErrInvalidAddr}},
		{name: "AdvertiseAddr port 0", edit: func(c *Config) { c.AdvertiseAddr = "10.0.0.7:0" },
			want: []string{"AdvertiseAddr:"}, is: []error{registry.ErrInvalidAddr}},
		{name: "no RegistryTarget", edit: func(c *Config) { c.RegistryTarget = "" },
			want: []string{"RegistryTarget:"}, is: []error{registry.ErrInvalidTarget}},
		{name: "RegistryTTL below etcd's shortest", edit: func(c *Config) { c.RegistryTTL = time.Second },
			want: []string{"RegistryTTL:", "at least 2s"}, is: []error{registry.ErrInvalidTTL}},
		{name: "fractional RegistryTTL", edit: func(c *Config) { c.RegistryTTL = 2500 * time.Millisecond },
			want: []string{"RegistryTTL:", "whole seconds"}, is: []error{registry.ErrInvalidTTL}},
		{name: "no RegistryTTL", edit: func(c *Config) { c.RegistryTTL = 0 },
			want: []string{"RegistryTTL:"}, is: []error{registry.ErrInvalidTTL}},
		{name: "zero EtcdDialTimeout", edit: func(c *Config) { c.EtcdDialTimeout = 0 },
			want: []string{"EtcdDialTimeout must be positive, got 0s"}},
		{name: "every field reported", edit: func(c *Config) {
			c.Workers, c.QueueCapacity, c.MaxQueueWait, c.LIFOAfter, c.DrainTimeout = -1, -1, -1, -1, -1
			c.Policy.Params.Iterations = 0
		}, want: []string{"Workers", "QueueCapacity", "MaxQueueWait", "LIFOAfter", "DrainTimeout", "Params.Iterations"},
			is: []error{verify.ErrInvalidPolicy}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.edit(&cfg)
			err := cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want an error naming %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %q does not contain %q", err, w)
				}
			}
			for _, target := range tt.is {
				if !errors.Is(err, target) {
					t.Errorf("Validate: %v does not match %v", err, target)
				}
			}
			if s, err := New(cfg); err == nil {
				s.Close()
				t.Errorf("New accepted a config Validate refuses")
			}
		})
	}
}

// AdvertiseAddr with an empty host is valid once the host name fills it
// (registry.Advertised): refused only on a machine without a host name.
func TestValidateAdvertisedHostName(t *testing.T) {
	hasName := false
	if name, err := os.Hostname(); err == nil && name != "" {
		hasName = true
	}
	cfg := DefaultConfig()
	cfg.EtcdEndpoints = []string{"http://127.0.0.1:2379"}
	cfg.AdvertiseAddr = ":7701"
	if err := cfg.Validate(); (err == nil) != hasName {
		t.Errorf("AdvertiseAddr :7701 (host name known: %v): Validate = %v", hasName, err)
	}
}
