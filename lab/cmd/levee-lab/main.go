// Command levee-lab is Levee's lab: it drives a real fleet through the
// triggers of a metastable failure and reports whether it came back
// (docs/lab.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leveehq/levee/internal/flagenv"
	"github.com/leveehq/levee/lab/drive"
	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/faults"
	"github.com/leveehq/levee/lab/storm"
)

const stormUsage = `usage: levee-lab [flags]

Drives a real fleet through the triggers of a metastable failure and says
whether it came back. By default: the local Levee fleet (separate processes)
and its control (the same binaries, -unguarded), each measured for its
capacity C, then loaded at 0.7 C by naive clients (three immediate attempts,
2 s timeout each) while every verifier is stopped (SIGSTOP) for 10 s; report
in ./storm-out.

  levee-lab                                         the default experiment
  levee-lab -trigger cpu -duration 20s -load 0.9    a CPU cut of the verifiers
  levee-lab -trigger kill:budgetd-leader -mix levee:1
  levee-lab -grid                                   the whole grid (hours)
  levee-lab -ramp                                   0.2 C → 10 C → 0.2 C: any hysteresis?
  levee-lab -sim                                    a 19 s failover at C = 1,000/s, simulated
  levee-lab -fleet compose -faults                  the fault suite on the compose fleet (docs/faults.md)
  levee-lab -soak 30m                               30 minutes at 0.8 C: does any member grow?
  levee-lab -fleet target -target host:7700 -trigger spike -spike 3

See docs/lab.md for every experiment and verdict.

flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "levee-lab:", err)
		}
		os.Exit(1)
	}
}

// run runs the lab.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, verbose, err := parseStorm(args, stderr, nil)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg.Progress = stdout
	cfg.Command = strings.Join(append([]string{"levee-lab"}, reportedArgs(args)...), " ")
	if cfg.Source == storm.Local && cfg.Local.Bin.Dir == "" {
		bin, err := stormBinaries(ctx, stderr)
		if err != nil {
			return err
		}
		cfg.Local.Bin = bin
	}
	if cfg.Source == storm.Local {
		if err := os.MkdirAll(cfg.Local.Dir, 0o755); err != nil {
			return err
		}
	}
	rep, err := storm.Run(ctx, cfg)
	if rep != nil && len(rep.Files) > 0 {
		fmt.Fprintf(stdout, "report: %s\n", filepath.Join(cfg.Out, "report.md"))
	}
	if err != nil || rep == nil {
		return err
	}
	// A suite or a soak whose checks failed exits non-zero, as a test
	// would: scripts and CI read the status.
	var failed []string
	for _, fr := range rep.Faults {
		if !fr.OK() {
			failed = append(failed, fr.Name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("storm: %d of %d faults failed a check: %s", len(failed), len(rep.Faults), strings.Join(failed, ", "))
	}
	if rep.Soak != nil && !rep.Soak.OK() {
		return errors.New("storm: the soak failed a check (see its report)")
	}
	return nil
}

// parseStorm turns flags (and LEVEE_* variables) into a lab Config; it
// leaves the binaries to find when -bin is not given.
func parseStorm(args []string, stderr io.Writer, lookup func(string) (string, bool)) (storm.Config, bool, error) {
	cfg := storm.DefaultConfig()
	fs := flag.NewFlagSet("levee-lab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, stormUsage)
		fs.PrintDefaults()
	}
	grid := fs.Bool("grid", false, "run the grid: -grid-triggers × -grid-durations × -grid-loads × -grid-seeds")
	sim := fs.Bool("sim", false, "simulate the seed's fleet at full scale instead (no fleet started): plain and Levee, with no budget, per-process budgets and the fleet budget")
	fs.Float64Var(&cfg.Sim.Load, "sim-load", cfg.Sim.Load, "sim: offered load (× C)")
	fs.DurationVar(&cfg.Sim.TriggerDuration, "sim-stall", cfg.Sim.TriggerDuration, "sim: how long every verifier stalls")
	fs.IntVar(&cfg.Sim.Processes, "sim-processes", cfg.Sim.Processes, "sim: client processes")
	fs.Float64Var(&cfg.Sim.Ratio, "sim-ratio", cfg.Sim.Ratio, "sim: budget ratio (retries per first attempt)")
	fs.DurationVar(&cfg.Sim.After, "sim-after", cfg.Sim.After, "sim: how long to watch after the stall")
	soak := fs.Duration("soak", 0, "soak: this long at -soak-load on one Levee fleet, watching every member's memory, goroutines and open files for growth (e.g. 30m)")
	fs.Float64Var(&cfg.Soak.Load, "soak-load", cfg.Soak.Load, "soak: offered load (× C)")
	suite := fs.Bool("faults", false, "run the fault suite against one Levee fleet ("+strings.Join(faults.Names, ", ")+"); with -fleet compose (docs/faults.md)")
	fs.BoolVar(&cfg.Faults.Short, "faults-short", false, "fault suite: every fault briefly (what CI runs)")
	faultsOnly := fs.String("faults-only", "", "fault suite: only these faults, comma-separated")
	ramp := fs.Bool("ramp", false, "run the triangle ramp -ramp-low → -ramp-high → -ramp-low (× C) instead of a trigger")
	fs.Float64Var(&cfg.Ramp.Low, "ramp-low", cfg.Ramp.Low, "ramp: lowest load (× C)")
	fs.Float64Var(&cfg.Ramp.High, "ramp-high", cfg.Ramp.High, "ramp: highest load (× C)")
	fs.DurationVar(&cfg.Ramp.Up, "ramp-up", cfg.Ramp.Up, "ramp: time from low to high")
	fs.DurationVar(&cfg.Ramp.Down, "ramp-down", cfg.Ramp.Down, "ramp: time from high back to low")
	fs.DurationVar(&cfg.Ramp.Hold, "ramp-hold", cfg.Ramp.Hold, "ramp: time held at low before and after")
	source := fs.String("fleet", string(cfg.Source), "where the fleet comes from: local (processes started here), compose (docker-compose.yml; scripts/docker-up.sh builds its images) or target (-target)")
	fs.StringVar(&cfg.Compose.Root, "compose-dir", "", "compose fleet: the directory of docker-compose.yml (default: the source tree here)")
	fs.StringVar(&cfg.Compose.Project, "compose-project", "", "compose fleet: the compose project name (default: compose's own, as scripts/docker-up.sh)")
	fleets := fs.String("fleets", strings.Join(cfg.Fleets, ","), "local fleets to run, in order: levee, control, or both")
	fs.StringVar(&cfg.Target, "target", "", "Verify service to call with -fleet target (host:port)")
	targetMetrics := fs.String("target-metrics", "", "comma-separated /metrics URLs to scrape with -fleet target")
	fs.StringVar(&cfg.Out, "out", "storm-out", "directory for the report (CSV, report.md, plots)")
	bin := fs.String("bin", "", "directory holding the verifier, gateway, budgetd and levee binaries (default: next to this program, else built from the source tree here)")
	fs.StringVar(&cfg.Local.Dir, "fleet-dir", "", "directory for the local fleets' logs and etcd data (default: <out>/fleet)")

	fs.IntVar(&cfg.Local.Verifiers, "verifiers", cfg.Local.Verifiers, "local fleet: verifiers")
	fs.IntVar(&cfg.Local.Workers, "workers", cfg.Local.Workers, "local fleet: -workers of each verifier")
	fs.IntVar(&cfg.Local.Budgetds, "budgetds", cfg.Local.Budgetds, "local fleet: budgetd replicas")
	fs.BoolVar(&cfg.Local.Insecure, "insecure", false, "local fleet: run Levee in plaintext, as the control (default: mutual TLS from a development CA made for the run)")
	hm := fs.Uint("hash-memory-kib", uint(cfg.Local.Params.Memory), "Argon2id memory of the verifiers' policy and the lab's stored hash, KiB")
	ht := fs.Uint("hash-iterations", uint(cfg.Local.Params.Iterations), "Argon2id iterations of the policy and the stored hash")
	hp := fs.Uint("hash-parallelism", uint(cfg.Local.Params.Parallelism), "Argon2id lanes of the policy and the stored hash")
	vflags := fs.String("verifier-flags", "", "extra flags for every verifier, space-separated (your configuration)")
	gflags := fs.String("gateway-flags", "", "extra flags for the gateway, space-separated")
	bflags := fs.String("budgetd-flags", "", "extra flags for every budgetd, space-separated")

	mix := fs.String("mix", "naive", "client populations by share: naive, levee, human, nodeadline, e.g. naive:0.6,levee:0.3,human:0.1")
	pris := fs.String("priorities", "", "priorities by share, sent as levee-priority, e.g. critical:0.1,interactive:0.7,batch:0.2 (default: none sent)")
	c := &cfg.Clients
	fs.IntVar(&c.Naive.Attempts, "naive-attempts", c.Naive.Attempts, "naive clients: attempts per request")
	fs.DurationVar(&c.Naive.Timeout, "naive-timeout", c.Naive.Timeout, "naive clients: timeout of each attempt")
	fs.DurationVar(&c.Levee.Deadline, "levee-deadline", c.Levee.Deadline, "levee clients: deadline of a whole call")
	fs.IntVar(&c.Levee.MaxAttempts, "levee-attempts", c.Levee.MaxAttempts, "levee clients: most attempts per call")
	fs.IntVar(&c.Levee.Processes, "levee-processes", c.Levee.Processes, "levee clients: client processes (budget clients) they stand for")
	fs.StringVar(&c.Levee.BudgetKey, "levee-budget-key", c.Levee.BudgetKey, "levee clients: budget key")
	fs.DurationVar(&c.Human.Patience, "human-patience", c.Human.Patience, "human clients: how long one try is waited for")
	fs.DurationVar(&c.Human.Think, "human-think", c.Human.Think, "human clients: pause before trying again")
	fs.IntVar(&c.Human.Tries, "human-tries", c.Human.Tries, "human clients: tries per request")
	fs.DurationVar(&c.NoDeadline.Cap, "nodeadline-cap", c.NoDeadline.Cap, "nodeadline clients: the lab gives up after this")

	e := &cfg.Experiment
	fs.Float64Var(&e.Load, "load", e.Load, "offered load as a fraction of the measured capacity C")
	fs.DurationVar(&e.Warmup, "warmup", e.Warmup, "load before the baseline (not judged)")
	fs.DurationVar(&e.Baseline, "baseline", e.Baseline, "healthy span the verdict compares with")
	fs.DurationVar(&e.After, "after", e.After, "load after the trigger ends")
	fs.DurationVar(&e.AfterWindow, "after-window", e.AfterWindow, "final span of arrivals that 'goodput after' averages")
	fs.Uint64Var(&e.Seed, "seed", e.Seed, "seed of the arrivals")
	trigger := fs.String("trigger", "stop:verifiers", "trigger kind[:targets]: none, stop, kill, cpu, knob, spike; targets verifiers, gateways, budgetds, budgetd-leader, etcd-majority, all, or names joined by +")
	fs.DurationVar(&e.Trigger.Duration, "duration", e.Trigger.Duration, "how long the trigger lasts")
	fs.Float64Var(&e.Trigger.CPU, "cpu", e.Trigger.CPU, "cpu trigger: cores each target may use")
	fs.Float64Var(&e.Trigger.WorkerFraction, "knob-fraction", e.Trigger.WorkerFraction, "knob trigger: fraction of workers kept")
	fs.Float64Var(&e.Trigger.Slowdown, "knob-slowdown", e.Trigger.Slowdown, "knob trigger: service time multiplier")
	fs.Float64Var(&e.Trigger.Spike, "spike", e.Trigger.Spike, "spike trigger: load multiplier")

	fs.Float64Var(&cfg.Capacity.Fixed, "capacity", 0, "use this capacity C (logical requests/s) instead of measuring it")
	fs.IntVar(&cfg.Capacity.Callers, "capacity-callers", cfg.Capacity.Callers, "closed-loop callers that measure C")
	fs.DurationVar(&cfg.Capacity.Measure, "capacity-measure", cfg.Capacity.Measure, "how long C is measured")

	gridTriggers := fs.String("grid-triggers", "stop,cpu,knob", "grid: trigger kinds[:targets]")
	gridDurations := fs.String("grid-durations", "1s,3s,5s,10s,20s,30s,60s", "grid: trigger durations")
	gridLoads := fs.String("grid-loads", "0.5,0.7,0.9", "grid: loads as fractions of C")
	fs.IntVar(&cfg.Grid.Seeds, "grid-seeds", cfg.Grid.Seeds, "grid: seeds per cell")
	verbose := fs.Bool("v", false, "log the lab's progress (default: warnings only)")
	if err := flagenv.Parse(fs, args, lookup); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("storm: unexpected argument %q", fs.Arg(0))
	}
	if *hm > 1<<32-1 || *ht > 1<<32-1 || *hp > 255 {
		return cfg, false, errors.New("storm: a hash parameter is out of range")
	}
	cfg.Local.Params.Memory, cfg.Local.Params.Iterations, cfg.Local.Params.Parallelism = uint32(*hm), uint32(*ht), uint8(*hp)
	cfg.Local.Bin = drive.Binaries{Dir: *bin}
	if cfg.Local.Dir == "" {
		cfg.Local.Dir = filepath.Join(cfg.Out, "fleet")
	}
	cfg.Source = storm.Source(*source)
	if cfg.Source == storm.Compose && cfg.Compose.Root == "" {
		if wd, err := os.Getwd(); err == nil {
			cfg.Compose.Root = drive.ModuleRoot(wd)
		}
	}
	cfg.Fleets = flagenv.List(*fleets)
	cfg.TargetMetrics = flagenv.List(*targetMetrics)
	cfg.Local.VerifierFlags, cfg.Local.GatewayFlags, cfg.Local.BudgetdFlags = strings.Fields(*vflags), strings.Fields(*gflags), strings.Fields(*bflags)
	var err error
	if c.Mix, err = experiment.ParseMix(*mix); err != nil {
		return cfg, false, err
	}
	if *pris != "" {
		if c.Priorities, err = experiment.ParsePriorities(*pris); err != nil {
			return cfg, false, err
		}
	}
	if e.Trigger, err = experiment.ParseTrigger(*trigger, e.Trigger); err != nil {
		return cfg, false, err
	}
	if btoi(*grid)+btoi(*ramp)+btoi(*sim)+btoi(*suite)+btoi(*soak > 0) > 1 {
		return cfg, false, errors.New("storm: -grid, -ramp, -sim, -faults and -soak are different experiments; pick one")
	}
	if *soak > 0 {
		cfg.Mode = storm.SoakMode
		cfg.Soak.Duration = *soak
	}
	if *suite {
		cfg.Mode = storm.FaultsMode
		cfg.Faults.Only = flagenv.List(*faultsOnly)
	}
	if *sim {
		cfg.Mode = storm.SimMode
	}
	if *ramp {
		cfg.Mode = storm.RampMode
	}
	if *grid {
		cfg.Mode = storm.GridMode
		cfg.Grid.Triggers = nil
		for _, t := range flagenv.List(*gridTriggers) {
			tr, err := experiment.ParseTrigger(t, e.Trigger)
			if err != nil {
				return cfg, false, fmt.Errorf("storm: -grid-triggers: %w", err)
			}
			cfg.Grid.Triggers = append(cfg.Grid.Triggers, tr)
		}
		if cfg.Grid.Durations, err = parseDurations(*gridDurations); err != nil {
			return cfg, false, fmt.Errorf("storm: -grid-durations: %w", err)
		}
		if cfg.Grid.Loads, err = parseFloats(*gridLoads); err != nil {
			return cfg, false, fmt.Errorf("storm: -grid-loads: %w", err)
		}
	}
	return cfg, *verbose, cfg.Validate()
}

// reportedArgs are the arguments a report quotes: those that shape the
// experiment, without the ones naming this machine's directories.
func reportedArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		switch name {
		case "bin", "fleet-dir", "compose-dir":
			if !hasValue {
				i++ // the value is the next argument
			}
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// stormBinaries finds the fleet's programs next to this one (an install of
// every command, the container image), or builds them from the source tree
// holding the working directory (go run ./cmd/levee-lab in the lab module).
func stormBinaries(ctx context.Context, stderr io.Writer) (drive.Binaries, error) {
	if exe, err := os.Executable(); err == nil {
		if b := (drive.Binaries{Dir: filepath.Dir(exe)}); b.Check() == nil {
			return b, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return drive.Binaries{}, err
	}
	root := drive.ModuleRoot(wd)
	if root == "" {
		return drive.Binaries{}, errors.New("storm: no verifier, gateway and budgetd next to this program and no Levee source tree here: " +
			"give -bin DIR, or run from the source tree (go -C lab run ./cmd/levee-lab)")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "levee", "storm-bin")
	fmt.Fprintf(stderr, "building the fleet's binaries into %s ...\n", dir)
	return drive.BuildBinaries(ctx, root, dir)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func parseDurations(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, p := range flagenv.List(s) {
		d, err := time.ParseDuration(p)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, p := range flagenv.List(s) {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}
