package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/wellknown"
	"github.com/leveehq/levee/pkg/wellknown/wellknowntest"
)

func TestParse(t *testing.T) {
	env := map[string]string{"LEVEE_BUDGETD": "budgetd:7702", "LEVEE_CLIENT_TIMEOUT": "3s", "LEVEE_INSECURE": "true"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, sec, logJSON, err := parse([]string{"-etcd", "http://a:2379, http://b:2379", "-max-limit", "50", "-log-json"}, io.Discard, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.EtcdEndpoints, ","); got != "http://a:2379,http://b:2379" {
		t.Errorf("EtcdEndpoints = %q", got)
	}
	if cfg.Admission.Ceiling != 50 || !logJSON || cfg.BudgetTarget != "budgetd:7702" || cfg.Autopilot.ClientTimeout != 3*time.Second {
		t.Errorf("parsed %+v, logJSON %v", cfg, logJSON)
	}
	if !sec.Insecure {
		t.Errorf("LEVEE_INSECURE=true parsed as %+v", sec)
	}
	if _, sec, _, err := parse([]string{"-verifiers", "a:1", "-tls-dir", "/certs"}, io.Discard, nil); err != nil ||
		sec.Resolve(tlsIdentity) != (mtls.Files{CA: "/certs/ca.crt", Cert: "/certs/gateway.crt", Key: "/certs/gateway.key"}) {
		t.Errorf("-tls-dir /certs: %v, files %+v", err, sec.Resolve(tlsIdentity))
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-insecure"}, "no verifiers"},
		{[]string{"-insecure", "-verifiers", "a:1", "-critical-reserve", "2"}, "CriticalReserve"},
		{[]string{"-insecure", "-verifiers", "a:1", "extra"}, "unexpected argument"},
		{[]string{"-insecure", "-verifiers", "a:1", "-breaker-failure-rate", "0"}, "FailureRate"},
		// Refuses to start in plaintext unless told to, and says how.
		{[]string{"-verifiers", "a:1"}, "levee certs"},
		{[]string{"-verifiers", "a:1", "-insecure", "-tls-dir", "/certs"}, "pick one"},
		{[]string{"-verifiers", "a:1", "-tls-cert", "a.crt"}, "-tls-ca"},
	} {
		_, _, _, err := parse(tc.args, io.Discard, func(string) (string, bool) { return "", false })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%q) = %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}

// The flags other programs pass to a gateway (the lab) are ones it defines.
func TestDefinesWellKnownFlags(t *testing.T) {
	var usage strings.Builder
	if _, _, _, err := parse([]string{"-help"}, &usage, func(string) (string, bool) { return "", false }); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parse(-help) = %v, want flag.ErrHelp", err)
	}
	wellknowntest.CheckFlags(t, usage.String(), wellknown.GatewayFlags)
}
