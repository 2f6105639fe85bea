// Package lab is Levee's lab: it drives a real fleet — separate processes
// on this machine, the compose fleet, or any Verify service — through the
// triggers of a metastable failure (a stall, a CPU cut, lost capacity, a
// crash, a load spike) under open-loop client populations, and says, per
// second and as verdicts, whether the fleet came back once the trigger was
// gone. A control fleet, built from the same binaries with every defence
// off (-unguarded), runs the same experiment: a lab that cannot make the
// control fail cannot be trusted when it says Levee did not.
//
// The lab is a module beside the product's, which no product binary
// compiles.
//
// Run composes the lab's packages: drive starts fleets and acts on their
// members, observe records them second by second, experiment loads, triggers
// and judges them, sim simulates them, faults and soak are the fault suite
// and the soak, and report writes what was found.
//
// What the lab promises:
//
//   - Real parts: every fleet member is its own process (or container),
//     built from the product's source; triggers are real signals, cgroup
//     CPU quotas and the verifiers' own capacity knob, and every call is
//     real gRPC over loopback with real Argon2. The lab imports no server
//     package: it speaks to the fleet over its wire APIs only.
//   - Open loop: arrivals are a Poisson process at the experiment's rate,
//     whatever the fleet answers; a slow fleet is offered what a fast one
//     is. Only the capacity measurement is closed-loop (it asks what the
//     fleet does when it always has work).
//   - Loads are fractions of the capacity C measured at the start of each
//     experiment on the fleet under test.
//   - Every logical request is counted once, by the second it arrived and by
//     the second it ended; every attempt by the second it was sent and the
//     code it ended with. Verdicts are computed from those counts (see
//     experiment.Verdict); nothing is judged by a single sample.
//   - A trigger is always undone — resumed, restarted, lifted — before the
//     experiment returns, even when it is cancelled; members die with the
//     lab.
//   - The lab's own CPU is in every series (lab_cpu): on a small machine the
//     load generator competes with the fleet it measures.
package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/leveehq/levee/lab/drive"
	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/faults"
	"github.com/leveehq/levee/lab/report"
	"github.com/leveehq/levee/lab/sim"
	"github.com/leveehq/levee/lab/soak"
	"github.com/leveehq/levee/pkg/mtls"
)

// Mode is what Run does.
type Mode string

// The modes.
const (
	// Single runs Config.Experiment once against each fleet.
	Single Mode = "run"
	// GridMode runs Config.Grid: trigger kinds × durations × loads × seeds
	// against each fleet, each cell on a freshly started fleet.
	GridMode Mode = "grid"
	// RampMode runs Config.Ramp's triangle of load against each fleet.
	RampMode Mode = "ramp"
	// SimMode starts no fleet: it simulates Config.Sim, plain and guarded,
	// with no budget, per-process budgets and the fleet budget.
	SimMode Mode = "sim"
	// FaultsMode runs Config.Faults, the fault suite, against one Levee
	// fleet.
	FaultsMode Mode = "faults"
	// SoakMode runs Config.Soak: a long healthy load on one Levee fleet,
	// watching every member for growth.
	SoakMode Mode = "soak"
)

// Source is where the fleets come from.
type Source string

// The sources.
const (
	// Local starts the fleets as processes on this machine (drive.StartLocal).
	Local Source = "local"
	// Compose runs the fleet of docker-compose.yml (drive.StartCompose).
	Compose Source = "compose"
	// Target calls a running Verify service; triggers can only spike it.
	Target Source = "target"
)

// Config configures Run. Start from DefaultConfig.
type Config struct {
	Mode   Mode
	Source Source
	// Fleets lists the fleets to run, in order: "levee" and "control" for
	// a local source; ignored for a target.
	Fleets []string
	// Target is the Verify address of a Target source, and TargetMetrics
	// the /metrics URLs to scrape there (optional).
	Target        string
	TargetMetrics []string
	// TargetTLSDir, when set, is a directory of certificates in
	// mtls.Settings' layout (ca.crt, NAME.crt, NAME.key) from which the
	// lab's load presents TargetIdentity to a Target source over mutual
	// TLS; empty: plaintext.
	TargetTLSDir   string
	TargetIdentity string

	Local      drive.LocalConfig
	Compose    drive.ComposeConfig
	Clients    experiment.Clients
	Capacity   experiment.CapacityConfig
	Experiment experiment.Spec
	// Seeds runs a single experiment (Mode Single) this many times,
	// seeds Experiment.Seed, Experiment.Seed+1, ...; 0 means once.
	Seeds int
	// TenantSets, when set, runs every experiment once per set, its
	// tenants replacing Clients.Tenants.
	TenantSets [][]experiment.Tenant
	// Variants, when set, runs every experiment once per variant of the
	// Levee fleet (the control runs once, as it is).
	Variants []Variant
	Grid     experiment.Grid
	Ramp     experiment.Ramp
	// Faults and Soak are the suite's and the soak's own settings; Run
	// fills in what they share with the rest (Experiment, Clients,
	// Capacity, Logger, Progress) from this Config.
	Faults faults.Config
	Soak   soak.Config
	// Sim is the simulated fleet of SimMode (its Guarded and Budget are
	// varied); Single mode also simulates each real run beside it.
	Sim sim.Config

	// Out, when set, is the directory the report is written to: a CSV of
	// each run's seconds, summary.csv, report.md and the plots.
	Out string
	// Command is how the report was made, quoted in report.md.
	Command string
	// Logger receives the lab's progress (nil: slog.Default()); Progress
	// (if set) one line per finished experiment.
	Logger   *slog.Logger
	Progress io.Writer
}

// DefaultConfig is one default experiment against the local Levee fleet and
// its control.
func DefaultConfig() Config {
	return Config{
		Mode:       Single,
		Source:     Local,
		Fleets:     []string{"levee", "control"},
		Local:      drive.DefaultLocal(),
		Clients:    experiment.DefaultClients(),
		Capacity:   experiment.DefaultCapacity(),
		Experiment: experiment.DefaultSpec(),
		Grid:       experiment.DefaultGrid(),
		Ramp:       experiment.DefaultRamp(),
		Soak:       soak.DefaultConfig(),
		Sim:        sim.FullScale(false, sim.NoBudget),
	}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	switch c.Mode {
	case Single:
		errs = append(errs, c.Experiment.Validate())
	case GridMode:
		errs = append(errs, c.Grid.Validate())
	case RampMode:
		errs = append(errs, c.Ramp.Validate())
	case SimMode:
		return c.Sim.Validate() // nothing runs for real
	case FaultsMode:
		errs = append(errs, c.Faults.Validate())
		if c.Source != Compose {
			errs = append(errs, errors.New("lab: the fault suite runs on the compose fleet (-fleet compose): a partition needs containers"))
		}
	case SoakMode:
		errs = append(errs, c.Soak.Validate())
	default:
		errs = append(errs, fmt.Errorf("lab: unknown mode %q", c.Mode))
	}
	switch c.Source {
	case Local, Compose:
		if c.Source == Local {
			errs = append(errs, c.Local.Validate())
		} else if c.Compose.Root == "" {
			errs = append(errs, errors.New("lab: the compose fleet needs the directory of docker-compose.yml: run from the source tree, or give -compose-dir"))
		}
		if len(c.Fleets) == 0 {
			errs = append(errs, errors.New("lab: no fleet to run (want levee, control or both)"))
		}
		for _, f := range c.Fleets {
			if f != "levee" && f != "control" {
				errs = append(errs, fmt.Errorf("lab: unknown fleet %q (want levee or control)", drive.Truncate(f)))
			}
		}
	case Target:
		if c.Target == "" {
			errs = append(errs, errors.New("lab: a target source needs a Target address"))
		}
	default:
		errs = append(errs, fmt.Errorf("lab: unknown fleet source %q (want local, compose or target)", c.Source))
	}
	errs = append(errs, c.Clients.Validate(), c.Capacity.Validate())
	if c.Seeds < 0 || c.Seeds > 100 {
		errs = append(errs, fmt.Errorf("lab: seeds must be in [0, 100], got %d", c.Seeds))
	}
	for _, ts := range c.TenantSets {
		cl := c.Clients
		cl.Tenants = ts
		errs = append(errs, cl.Validate())
		for _, t := range ts {
			if p := t.Params(c.Local.Params); p.Memory > maxVerifierMemoryKiB {
				errs = append(errs, fmt.Errorf("lab: tenant %s: a hash of %d KiB is above what the verifiers accept by default (%d KiB)",
					t.Name, p.Memory, maxVerifierMemoryKiB))
			}
		}
	}
	if len(c.Variants) > 0 && (c.Mode != Single && c.Mode != GridMode || c.Source != Local) {
		errs = append(errs, errors.New("lab: fleet variants (-fair-share) need a local fleet and a single experiment or the grid"))
	}
	if (len(c.TenantSets) > 0 || c.Seeds > 1) && c.Mode != Single && c.Mode != GridMode {
		errs = append(errs, errors.New("lab: tenant sets and -seeds are for a single experiment or the grid"))
	}
	return errors.Join(errs...)
}

// Variant is a Levee fleet run with flags of its own beside the lab's.
type Variant struct {
	// Name says how the fleet differs in reports ("fair-share off");
	// empty for the fleet as the lab starts it.
	Name string
	// GatewayFlags are appended to the gateway's (after
	// Local.GatewayFlags, so they win).
	GatewayFlags []string
}

// Report is what Run found.
type Report struct {
	Results []*experiment.Result
	// Faults are the fault suite's results (FaultsMode).
	Faults []faults.Result
	// Soak is the soak's result (SoakMode).
	Soak *soak.Result
	// Planned is the number of runs the experiment asked for; fewer
	// Results means it was interrupted.
	Planned int
	// Files are the paths written under Config.Out.
	Files []string
}

// Failed says which checks of a fault suite or a soak failed (nil: none,
// or no suite or soak ran), so that a program can exit non-zero as a test
// would.
func (r *Report) Failed() error {
	if r == nil {
		return nil
	}
	var failed []string
	for _, fr := range r.Faults {
		if !fr.OK() {
			failed = append(failed, fr.Name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("lab: %d of %d faults failed a check: %s", len(failed), len(r.Faults), strings.Join(failed, ", "))
	}
	if r.Soak != nil && !r.Soak.OK() {
		return errors.New("lab: the soak failed a check (see its report)")
	}
	return nil
}

// Run runs the configured experiments, writes the report if Config.Out is
// set, and returns it. Fleets are started and stopped by Run (one at a time:
// two fleets on one small machine would measure each other).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Local.Logger == nil {
		cfg.Local.Logger = cfg.Logger
	}
	if cfg.Source == Local && cfg.Mode != SimMode {
		if err := os.MkdirAll(cfg.Local.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("lab: %w", err)
		}
	}
	if cfg.Mode == SimMode {
		return runSims(cfg)
	}
	q, err := experiment.NewRequest(cfg.Local.Params)
	if err != nil {
		return nil, err
	}
	if cfg.Mode == SoakMode {
		rep := &Report{Planned: 1}
		sc := cfg.Soak
		sc.Base, sc.Clients, sc.Capacity, sc.Logger = cfg.Experiment, cfg.Clients, cfg.Capacity, cfg.Logger
		rep.Soak, err = runSoak(ctx, cfg, sc, q)
		if cfg.Out != "" && rep.Soak != nil {
			files, werr := report.WriteSoak(cfg.Out, report.Soak{Command: cfg.Command, Fleet: string(cfg.Source), Config: sc, Result: rep.Soak})
			rep.Files, err = files, errors.Join(err, werr)
		}
		return rep, err
	}
	if cfg.Mode == FaultsMode {
		fc := cfg.Faults
		fc.Base, fc.Clients, fc.Capacity, fc.Logger, fc.Progress = cfg.Experiment, cfg.Clients, cfg.Capacity, cfg.Logger, cfg.Progress
		rep := &Report{Planned: fc.Planned()}
		rep.Faults, err = runFaults(ctx, cfg, fc, q)
		if cfg.Out != "" && len(rep.Faults) > 0 {
			files, werr := report.WriteFaults(cfg.Out, report.Faults{Command: cfg.Command, Fleet: string(cfg.Source),
				Callers: cfg.Capacity.Callers, Results: rep.Faults})
			rep.Files, err = files, errors.Join(err, werr)
		}
		return rep, err
	}
	var exps []experiment.Spec
	switch cfg.Mode {
	case Single:
		for s := range max(cfg.Seeds, 1) {
			e := cfg.Experiment
			e.Seed += uint64(s)
			exps = append(exps, e)
		}
	case GridMode:
		exps = cfg.Grid.Cells(cfg.Experiment)
	case RampMode:
		exps = []experiment.Spec{cfg.Ramp.Spec(cfg.Experiment)}
	}
	fleets := cfg.Fleets
	if cfg.Source == Target {
		fleets = []string{"target"}
	}
	runs := plan(cfg, exps, fleets)
	rep := &Report{Planned: len(runs)}
	for i, pr := range runs {
		res, err := runOne(ctx, pr.cfg, pr.fleet, q, pr.spec)
		if err != nil {
			err = fmt.Errorf("lab: %s fleet, %s at %.2f C: %w", pr.fleet, pr.spec.Trigger, pr.spec.Load, err)
			// Interrupted (Ctrl-C, a deadline): hours of a grid are not
			// thrown away; the report holds the runs that completed.
			if ctx.Err() != nil && cfg.Out != "" && len(rep.Results) > 0 {
				err = errors.Join(err, rep.write(cfg))
			}
			return rep, err
		}
		res.Variant = pr.variant
		rep.Results = append(rep.Results, res)
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "[%d/%d] %s\n", i+1, len(runs), res.Line())
		}
	}
	if cfg.Out != "" {
		if err := rep.write(cfg); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// maxVerifierMemoryKiB is the largest Argon2 memory a verifier accepts in
// a stored hash by default (verify.DefaultLimits): a tenant's costlier
// hash must stay within it.
const maxVerifierMemoryKiB = 256 << 10

// plannedRun is one run of an experiment: which fleet, which variant of
// it, and the configuration (tenants, gateway flags) it runs with.
type plannedRun struct {
	fleet, variant string
	spec           experiment.Spec
	cfg            Config
}

// plan orders the runs: per tenant set, per experiment (seeds innermost
// in a grid cell), per variant, per fleet, so that the variants of one seed
// run back to back and share the machine's conditions.
func plan(cfg Config, exps []experiment.Spec, fleets []string) []plannedRun {
	sets := cfg.TenantSets
	if len(sets) == 0 {
		sets = [][]experiment.Tenant{cfg.Clients.Tenants}
	}
	variants := cfg.Variants
	if len(variants) == 0 {
		variants = []Variant{{}}
	}
	var out []plannedRun
	for _, ts := range sets {
		for _, e := range exps {
			for vi, v := range variants {
				for _, name := range fleets {
					if name == "control" && vi > 0 {
						continue // the control has no defence to vary
					}
					c := cfg
					c.Clients.Tenants = ts
					variant := ""
					if name != "control" {
						c.Local.GatewayFlags = append(append([]string(nil), cfg.Local.GatewayFlags...), v.GatewayFlags...)
						variant = v.Name
					}
					out = append(out, plannedRun{fleet: name, variant: variant, spec: e, cfg: c})
				}
			}
		}
	}
	return out
}

// write writes the report of rep's runs under cfg.Out.
func (rep *Report) write(cfg Config) error {
	kind := map[Mode]report.Kind{Single: report.Single, GridMode: report.Grid, RampMode: report.Ramp, SimMode: report.Sim}[cfg.Mode]
	runs := report.Runs{Kind: kind, Results: rep.Results, Planned: rep.Planned, Command: cfg.Command, Clients: cfg.Clients,
		Ramp: cfg.Ramp, Sim: cfg.Sim}
	if cfg.Source == Local {
		runs.Local = &cfg.Local
	}
	files, err := report.WriteRuns(cfg.Out, runs)
	rep.Files = append(rep.Files, files...)
	return err
}

// runSims simulates cfg.Sim for both fleets under each budget.
func runSims(cfg Config) (*Report, error) {
	rep := &Report{}
	for _, guarded := range []bool{false, true} {
		for _, b := range []sim.BudgetMode{sim.NoBudget, sim.ProcessBudget, sim.FleetBudget} {
			c := cfg.Sim
			c.Guarded, c.Budget = guarded, b
			if b == sim.FleetBudget && c.Burst == sim.FullScale(false, sim.ProcessBudget).Burst {
				c.Burst = sim.FullScale(false, sim.FleetBudget).Burst
			}
			r, err := sim.Run(c)
			if err != nil {
				return rep, err
			}
			rep.Results = append(rep.Results, r)
			if cfg.Progress != nil {
				fmt.Fprintln(cfg.Progress, r.Line())
			}
		}
	}
	if cfg.Out != "" {
		if err := rep.write(cfg); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// runOne starts the named fleet, measures it, runs e and stops the fleet.
func runOne(ctx context.Context, cfg Config, name string, q experiment.Request, e experiment.Spec) (_ *experiment.Result, err error) {
	f, err := startFleet(ctx, cfg, name)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	capacity, err := experiment.MeasureCapacity(ctx, f, q, cfg.Capacity)
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("capacity", "fleet", f.Name, "per_second", fmt.Sprintf("%.1f", capacity.PerSecond),
		"unloaded_p50", capacity.UnloadedP50, "unloaded_p99", capacity.UnloadedP99, "warmed", capacity.Warmed.Round(time.Millisecond))
	if capacity.Cold > 0 {
		cfg.Logger.Warn("capacity measured before every verifier was warm: C may read low", "fleet", f.Name,
			"cold_verifiers", capacity.Cold, "warmed", capacity.Warmed.Round(time.Millisecond))
	}
	// Let what the measurement left queued drain before the experiment.
	if err := drive.Sleep(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	return experiment.Run(ctx, f, cfg.Clients, q, capacity, e, cfg.Logger)
}

// runFaults runs the fault suite against one Levee fleet, started once.
func runFaults(ctx context.Context, cfg Config, fc faults.Config, q experiment.Request) (_ []faults.Result, err error) {
	f, err := startFleet(ctx, cfg, "levee")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	return faults.Run(ctx, f, q, fc)
}

// startFleet starts the named fleet from cfg's source.
func startFleet(ctx context.Context, cfg Config, name string) (*drive.Fleet, error) {
	switch cfg.Source {
	case Local:
		return drive.StartLocal(ctx, cfg.Local, name == "control")
	case Compose:
		if cfg.Compose.Logger == nil {
			cfg.Compose.Logger = cfg.Logger
		}
		return drive.StartCompose(ctx, cfg.Compose, name == "control")
	}
	f := drive.Target(cfg.Target, cfg.TargetMetrics)
	if cfg.TargetTLSDir != "" {
		id := cfg.TargetIdentity
		if id == "" {
			id = mtls.IdentityFrontend
		}
		src, err := mtls.Settings{Dir: cfg.TargetTLSDir}.Load(id, mtls.Options{})
		if err != nil {
			return nil, fmt.Errorf("lab: the target's caller identity: %w", err)
		}
		f.Caller = src
	}
	return f, nil
}

// runSoak soaks one Levee fleet, started for it.
func runSoak(ctx context.Context, cfg Config, sc soak.Config, q experiment.Request) (_ *soak.Result, err error) {
	f, err := startFleet(ctx, cfg, "levee")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	return soak.Run(ctx, f, q, sc)
}
