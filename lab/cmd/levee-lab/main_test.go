package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leveehq/levee/lab"
	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/pkg/callmeta"
)

func noEnv(string) (string, bool) { return "", false }

func TestParse(t *testing.T) {
	var stderr bytes.Buffer
	cfg, verbose, err := parse([]string{"-trigger", "cpu:verifier-1", "-duration", "20s", "-cpu", "0.2", "-load", "0.9",
		"-mix", "naive:0.5,levee:0.5", "-priorities", "critical:1", "-fleets", "levee", "-out", "o", "-v",
		"-verifier-flags", "-max-queue-wait 500ms -queue 32"}, &stderr, noEnv)
	if err != nil {
		t.Fatalf("%v (%s)", err, stderr.String())
	}
	e := cfg.Experiment
	if !verbose || cfg.Mode != lab.Single || e.Trigger.Kind != experiment.CPU || e.Trigger.Targets != "verifier-1" ||
		e.Trigger.Duration != 20*time.Second || e.Trigger.CPU != 0.2 || e.Load != 0.9 {
		t.Errorf("got mode %v, trigger %+v, load %v, verbose %v", cfg.Mode, e.Trigger, e.Load, verbose)
	}
	if cfg.Clients.Mix[experiment.Naive] != 0.5 || cfg.Clients.Mix[experiment.Levee] != 0.5 || cfg.Clients.Priorities[callmeta.Critical] != 1 {
		t.Errorf("mix %v, priorities %v", cfg.Clients.Mix, cfg.Clients.Priorities)
	}
	if strings.Join(cfg.Fleets, ",") != "levee" || cfg.Local.Dir != filepath.Join("o", "fleet") {
		t.Errorf("fleets %v, fleet dir %q", cfg.Fleets, cfg.Local.Dir)
	}
	if got := strings.Join(cfg.Local.VerifierFlags, " "); got != "-max-queue-wait 500ms -queue 32" {
		t.Errorf("verifier flags %q", got)
	}

	cfg, _, err = parse([]string{"-grid", "-grid-triggers", "stop,knob", "-grid-durations", "1s,5s", "-grid-loads", "0.5", "-grid-seeds", "1"}, &stderr, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != lab.GridMode || len(cfg.Grid.Triggers) != 2 || cfg.Grid.Triggers[1].Kind != experiment.Knob ||
		len(cfg.Grid.Durations) != 2 || cfg.Grid.Durations[1] != 5*time.Second || len(cfg.Grid.Loads) != 1 {
		t.Errorf("grid %+v", cfg.Grid)
	}

	for _, bad := range [][]string{
		{"-trigger", "melt"}, {"-mix", "robots"}, {"-load", "0"}, {"-fleets", "mine"}, {"-grid", "-ramp"},
		{"-grid", "-grid-durations", "forever"}, {"-fleet", "target"}, {"stray"}, {"-hash-parallelism", "300"},
	} {
		if _, _, err := parse(bad, &stderr, noEnv); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}

// TestStormSim runs `levee-lab -sim` end to end: no fleet is started, the
// report is written.
func TestStormSim(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, []string{"-sim", "-sim-after", "5s", "-out", out}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "sim-plain-none") || !strings.Contains(stdout.String(), "STUCK") {
		t.Errorf("output lacks the plain fleet's stuck verdict:\n%s", stdout.String())
	}
	for _, f := range []string{"report.md", "summary.csv", "sim-attempts.png", "sim-goodput.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
}

func TestReportedArgs(t *testing.T) {
	got := strings.Join(reportedArgs([]string{"-bin", "/x/bin", "-load", "0.5", "--fleet-dir=/tmp/f", "-compose-dir", "/src", "-grid"}), " ")
	if got != "-load 0.5 -grid" {
		t.Errorf("reported %q, want the experiment's flags only", got)
	}
}

func TestParseTenantFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, _, err := parse([]string{"-tenants", "a:0.3:naive,b:3:levee:cost=5", "-fair-share", "on,off", "-seeds", "3", "-fleets", "levee",
		"-trigger", "none", "-after", "0s"}, &stderr, noEnv)
	if err != nil {
		t.Fatalf("%v (%s)", err, stderr.String())
	}
	if len(cfg.TenantSets) != 1 || len(cfg.TenantSets[0]) != 2 || cfg.TenantSets[0][1].Cost != 5 || cfg.TenantSets[0][1].Kind != experiment.Levee {
		t.Errorf("tenant sets %+v", cfg.TenantSets)
	}
	if cfg.Experiment.Load != 1 || cfg.Seeds != 3 {
		t.Errorf("load %v (want 1: tenants carry their own), seeds %d", cfg.Experiment.Load, cfg.Seeds)
	}
	if len(cfg.Variants) != 2 || strings.Join(cfg.Variants[1].GatewayFlags, " ") != "-fair-share=false" {
		t.Errorf("variants %+v", cfg.Variants)
	}

	// A preset is its flags; those given beside it win.
	cfg, _, err = parse([]string{"-preset", "noisy-tenant", "-seeds", "1"}, &stderr, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.TenantSets) != 2 || cfg.TenantSets[1][1].Load != 10 || cfg.Seeds != 1 || len(cfg.Variants) != 2 ||
		cfg.Experiment.Trigger.Kind != experiment.None || strings.Join(cfg.Fleets, ",") != "levee" {
		t.Errorf("noisy-tenant: tenant sets %+v, seeds %d, variants %+v, trigger %v, fleets %v", cfg.TenantSets, cfg.Seeds, cfg.Variants,
			cfg.Experiment.Trigger, cfg.Fleets)
	}
	cfg, _, err = parse([]string{"--preset=expensive-hashes"}, &stderr, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.TenantSets) != 1 || cfg.TenantSets[0][1].Cost != 5 || cfg.Seeds != 3 {
		t.Errorf("expensive-hashes: tenant sets %+v, seeds %d", cfg.TenantSets, cfg.Seeds)
	}

	for _, bad := range [][]string{
		{"-tenants", "a:0.3,a:3"}, {"-tenants", "a"}, {"-fair-share", "maybe"}, {"-fair-share", "on,on"},
		{"-preset", "loud-tenant"}, {"-preset"}, {"-seeds", "-1"}, {"-ramp", "-fair-share", "off"},
		{"-tenants", "a:1:naive:cost=64", "-hash-memory-kib", "8192"}, // 512 MiB: above the verifiers' cap
		{"-fleet", "compose", "-fair-share", "off", "-compose-dir", "."},
	} {
		if _, _, err := parse(bad, &stderr, noEnv); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}
