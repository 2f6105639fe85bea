package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	env := map[string]string{"LEVEE_BUDGETD": "budgetd:7702", "LEVEE_CLIENT_TIMEOUT": "3s"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, logJSON, err := parse([]string{"-etcd", "http://a:2379, http://b:2379", "-max-limit", "50", "-log-json"}, io.Discard, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.EtcdEndpoints, ","); got != "http://a:2379,http://b:2379" {
		t.Errorf("EtcdEndpoints = %q", got)
	}
	if cfg.Admission.Ceiling != 50 || !logJSON || cfg.BudgetTarget != "budgetd:7702" || cfg.Autopilot.ClientTimeout != 3*time.Second {
		t.Errorf("parsed %+v, logJSON %v", cfg, logJSON)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no verifiers"},
		{[]string{"-verifiers", "a:1", "-critical-reserve", "2"}, "CriticalReserve"},
		{[]string{"-verifiers", "a:1", "extra"}, "unexpected argument"},
		{[]string{"-verifiers", "a:1", "-breaker-failure-rate", "0"}, "FailureRate"},
	} {
		_, _, err := parse(tc.args, io.Discard, func(string) (string, bool) { return "", false })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%q) = %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}
