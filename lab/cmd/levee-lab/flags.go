package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leveehq/levee/internal/flagenv"
	"github.com/leveehq/levee/lab"
	"github.com/leveehq/levee/lab/drive"
	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/faults"
	"github.com/leveehq/levee/pkg/wellknown"
)

// parse turns flags (and LEVEE_* variables) into the lab's Config; it
// leaves the binaries to find when -bin is not given. verbose is -v.
func parse(args []string, stderr io.Writer, lookup func(string) (string, bool)) (cfg lab.Config, verbose bool, err error) {
	cfg = lab.DefaultConfig()
	// A preset is flags of its own, put before the command line's so that
	// those given explicitly win.
	if name, ok := presetOf(args); ok {
		pre, found := presets[name]
		if !found {
			return cfg, false, fmt.Errorf("levee-lab: unknown preset %q (want %s)", drive.Truncate(name), strings.Join(presetNames(), " or "))
		}
		args = append(append([]string(nil), pre.args...), args...)
	}
	fs := flag.NewFlagSet("levee-lab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	grid := fs.Bool("grid", false, "run the grid: -grid-triggers × -grid-durations × -grid-loads × -grid-seeds")
	simulate := fs.Bool("sim", false, "simulate a 19 s failover at full scale instead (C = 1,000/s; no fleet started): plain and Levee, with no budget, per-process budgets and the fleet budget")
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
	fs.StringVar(&cfg.TargetTLSDir, "target-tls-dir", "", "-fleet target over mutual TLS: directory with ca.crt and the caller's NAME.crt and NAME.key")
	fs.StringVar(&cfg.TargetIdentity, "target-identity", "frontend", "-fleet target over mutual TLS: the NAME of the caller's certificate in -target-tls-dir (a front end may name tenants)")
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
	adversary := fs.String("adversary", "", "one caller sending -adversary-share of the calls beside the mix, single attempts not counted with the honest clients: cheap (valid m=8 KiB hashes), tight (deadlines of -adversary-deadline) or cancel (cancelled after -adversary-cancel-after)")
	fs.Float64Var(&c.Adversary.Share, "adversary-share", c.Adversary.Share, "adversary: its share of all calls")
	fs.DurationVar(&c.Adversary.Deadline, "adversary-deadline", c.Adversary.Deadline, "tight adversary: each call's deadline")
	fs.DurationVar(&c.Adversary.CancelAfter, "adversary-cancel-after", c.Adversary.CancelAfter, "cancel adversary: how long after sending each call is cancelled")

	e := &cfg.Experiment
	fs.Float64Var(&e.Load, "load", e.Load, "offered load as a fraction of the measured capacity C")
	fs.DurationVar(&e.Warmup, "warmup", e.Warmup, "load before the baseline (not judged)")
	fs.DurationVar(&e.Baseline, "baseline", e.Baseline, "healthy span the verdict compares with")
	fs.DurationVar(&e.After, "after", e.After, "load after the trigger ends")
	fs.DurationVar(&e.AfterWindow, "after-window", e.AfterWindow, "final span of arrivals that 'goodput after' averages")
	fs.Uint64Var(&e.Seed, "seed", e.Seed, "seed of the arrivals")
	fs.IntVar(&cfg.Seeds, "seeds", 0, "run the experiment with this many seeds, -seed, -seed+1, ... (default: once)")
	tenants := fs.String("tenants", "", "client populations per tenant, each name:load[:kind][:cost=N] (load × C, kind naive by default, hash cost × the policy's, as memory), e.g. a:0.3:naive,b:3:naive:cost=5; several sets separated by ';', one experiment each. -load then multiplies every tenant's load (default 1); calls name their tenant in levee-tenant")
	fairShare := fs.String("fair-share", "", "run each experiment with the gateway's fair share by tenant on, off, or on,off (default: the gateway's own setting)")
	fs.String("preset", "", "a named experiment: "+presetUsage())
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
	v := fs.Bool("v", false, "log the lab's progress (default: warnings only)")
	if err := flagenv.Parse(fs, args, lookup); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("levee-lab: unexpected argument %q", fs.Arg(0))
	}
	if *hm > 1<<32-1 || *ht > 1<<32-1 || *hp > 255 {
		return cfg, false, errors.New("levee-lab: a hash parameter is out of range")
	}
	cfg.Local.Params.Memory, cfg.Local.Params.Iterations, cfg.Local.Params.Parallelism = uint32(*hm), uint32(*ht), uint8(*hp)
	cfg.Local.Bin = drive.Binaries{Dir: *bin}
	if cfg.Local.Dir == "" {
		cfg.Local.Dir = filepath.Join(cfg.Out, "fleet")
	}
	cfg.Source = lab.Source(*source)
	if cfg.Source == lab.Compose && cfg.Compose.Root == "" {
		if wd, err := os.Getwd(); err == nil {
			cfg.Compose.Root = drive.ModuleRoot(wd)
		}
	}
	cfg.Fleets = flagenv.List(*fleets)
	cfg.TargetMetrics = flagenv.List(*targetMetrics)
	cfg.Local.VerifierFlags, cfg.Local.GatewayFlags, cfg.Local.BudgetdFlags = strings.Fields(*vflags), strings.Fields(*gflags), strings.Fields(*bflags)
	if c.Mix, err = experiment.ParseMix(*mix); err != nil {
		return cfg, false, err
	}
	if *tenants != "" {
		if cfg.TenantSets, err = experiment.ParseTenantSets(*tenants); err != nil {
			return cfg, false, fmt.Errorf("levee-lab: -tenants: %w", err)
		}
		if !isSet(fs, "load") {
			e.Load = 1
		}
	}
	if *fairShare != "" {
		if cfg.Variants, err = parseFairShare(*fairShare); err != nil {
			return cfg, false, fmt.Errorf("levee-lab: -fair-share: %w", err)
		}
	}
	c.Adversary.Kind = experiment.AdversaryKind(*adversary)
	if *pris != "" {
		if c.Priorities, err = experiment.ParsePriorities(*pris); err != nil {
			return cfg, false, err
		}
	}
	if e.Trigger, err = experiment.ParseTrigger(*trigger, e.Trigger); err != nil {
		return cfg, false, err
	}
	if btoi(*grid)+btoi(*ramp)+btoi(*simulate)+btoi(*suite)+btoi(*soak > 0) > 1 {
		return cfg, false, errors.New("levee-lab: -grid, -ramp, -sim, -faults and -soak are different experiments; pick one")
	}
	if *soak > 0 {
		cfg.Mode = lab.SoakMode
		cfg.Soak.Duration = *soak
	}
	if *suite {
		cfg.Mode = lab.FaultsMode
		cfg.Faults.Only = flagenv.List(*faultsOnly)
	}
	if *simulate {
		cfg.Mode = lab.SimMode
	}
	if *ramp {
		cfg.Mode = lab.RampMode
	}
	if *grid {
		cfg.Mode = lab.GridMode
		cfg.Grid.Triggers = nil
		for _, t := range flagenv.List(*gridTriggers) {
			tr, err := experiment.ParseTrigger(t, e.Trigger)
			if err != nil {
				return cfg, false, fmt.Errorf("levee-lab: -grid-triggers: %w", err)
			}
			cfg.Grid.Triggers = append(cfg.Grid.Triggers, tr)
		}
		if cfg.Grid.Durations, err = parseDurations(*gridDurations); err != nil {
			return cfg, false, fmt.Errorf("levee-lab: -grid-durations: %w", err)
		}
		if cfg.Grid.Loads, err = parseFloats(*gridLoads); err != nil {
			return cfg, false, fmt.Errorf("levee-lab: -grid-loads: %w", err)
		}
	}
	return cfg, *v, cfg.Validate()
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

// isSet says whether flag name was given (on the command line, a preset or
// the environment).
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// gatewayFairShare is cmd/gateway's flag for its fair share by tenant.
const gatewayFairShare = wellknown.FlagFairShare

// parseFairShare reads "on", "off" or both, comma-separated, into the
// Levee fleet's variants.
func parseFairShare(s string) ([]lab.Variant, error) {
	var out []lab.Variant
	seen := map[string]bool{}
	for _, v := range flagenv.List(s) {
		if seen[v] {
			return nil, fmt.Errorf("%q named twice", v)
		}
		seen[v] = true
		switch v {
		case "on":
			out = append(out, lab.Variant{Name: "fair-share on", GatewayFlags: []string{"-" + gatewayFairShare + "=true"}})
		case "off":
			out = append(out, lab.Variant{Name: "fair-share off", GatewayFlags: []string{"-" + gatewayFairShare + "=false"}})
		default:
			return nil, fmt.Errorf("%q: want on, off or on,off", drive.Truncate(v))
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty")
	}
	return out, nil
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
