package lab

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/pkg/verifier"
	"github.com/leveehq/levee/pkg/verify"
)

// cancelOnLine cancels when the first progress line arrives: the first run
// of an experiment has completed.
type cancelOnLine struct {
	once   sync.Once
	cancel context.CancelFunc
}

func (c *cancelOnLine) Write(p []byte) (int, error) {
	c.once.Do(c.cancel)
	return len(p), nil
}

// An interrupted grid (Ctrl-C hours into it) keeps its report: the runs that
// completed are written, and report.md says how many of those planned.
func TestInterruptedGridKeepsItsReport(t *testing.T) {
	vcfg := verifier.DefaultConfig()
	vcfg.ListenAddr, vcfg.MetricsAddr = "", ""
	vcfg.Workers = 1
	vcfg.Policy = verify.Policy{Params: verify.Params{Memory: 64, Iterations: 1, Parallelism: 1}, SaltLen: 16, KeyLen: 32}
	vcfg.Logger = quietLogger()
	vcfg.Registry = prometheus.NewRegistry()
	srv, err := verifier.New(vcfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	vctx, vcancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(vctx, lis, nil) }()
	defer func() {
		vcancel()
		if err := <-served; err != nil {
			t.Errorf("verifier: %v", err)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	cfg := DefaultConfig()
	cfg.Mode, cfg.Source, cfg.Target = GridMode, Target, lis.Addr().String()
	cfg.Local.Params = vcfg.Policy.Params
	cfg.Capacity.Fixed = 20
	cfg.Experiment.Warmup, cfg.Experiment.Baseline, cfg.Experiment.After, cfg.Experiment.AfterWindow = 0, 2*time.Second, 3*time.Second, time.Second
	cfg.Grid = experiment.Grid{Triggers: []experiment.Trigger{{Kind: experiment.Spike, Targets: "verifiers", Spike: 2}}, Durations: []time.Duration{time.Second}, Loads: []float64{0.3, 0.4, 0.5}, Seeds: 1}
	cfg.Out = filepath.Join(t.TempDir(), "out")
	cfg.Logger = quietLogger()
	cfg.Progress = &cancelOnLine{cancel: interrupt}
	rep, err := Run(runCtx, cfg)
	if err == nil {
		t.Fatalf("Run returned no error after an interrupt; %d results", len(rep.Results))
	}
	if len(rep.Results) != 1 || rep.Planned != 3 {
		t.Fatalf("%d results of %d planned, want 1 of 3 (err: %v)", len(rep.Results), rep.Planned, err)
	}
	md, err := os.ReadFile(filepath.Join(cfg.Out, "report.md"))
	if err != nil {
		t.Fatalf("no report after the interrupt: %v", err)
	}
	if !strings.Contains(string(md), "Interrupted: 1 of the 3 runs planned completed") {
		t.Errorf("report.md does not say it was interrupted:\n%s", md)
	}
	summary, err := os.ReadFile(filepath.Join(cfg.Out, "summary.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.TrimSpace(string(summary)), "\n"); n != 1 {
		t.Errorf("summary.csv has %d result lines, want 1:\n%s", n, summary)
	}
}
