package experiment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/leveehq/levee/lab/drive"
)

// TriggerKind is what a trigger does to the fleet for its duration.
type TriggerKind string

// The triggers of a metastable failure.
const (
	// None: no trigger; the experiment only watches the load.
	None TriggerKind = "none"
	// Stop pauses the targets (SIGSTOP; docker pause) and resumes them at
	// the end: a failover, a GC pause, a hung host.
	Stop TriggerKind = "stop"
	// Kill kills the targets (SIGKILL; docker kill) and starts them again
	// at the end: a crash, or losing the budgetd leader or etcd members.
	Kill TriggerKind = "kill"
	// CPU caps each target at Trigger.CPU cores (a cgroup CPU quota;
	// docker update --cpus): a noisy neighbour, a throttled container.
	CPU TriggerKind = "cpu"
	// Knob lowers the verifiers' capacity through their capacity knob
	// (Trigger.WorkerFraction, Trigger.Slowdown): capacity loss without a
	// process being touched.
	Knob TriggerKind = "knob"
	// Spike multiplies the offered load by Trigger.Spike.
	Spike TriggerKind = "spike"
	// Restart restarts the targets one at a time as an operator's rolling
	// restart does: each is stopped gracefully (SIGTERM; docker stop),
	// started again and waited for until it serves, the next only then.
	// Duration is the least the whole round takes.
	Restart TriggerKind = "restart"
	// Partition cuts the targets off from every budgetd replica (packets
	// dropped both ways) for Duration: compose only.
	Partition TriggerKind = "partition"
	// RampLoad is the triangle ramp's span (RampMode): the load follows the
	// ramp, nothing else is done to the fleet.
	RampLoad TriggerKind = "ramp"
)

// triggerKinds are those ParseTrigger accepts; RampLoad comes from RampMode.
var triggerKinds = []TriggerKind{None, Stop, Kill, CPU, Knob, Spike, Restart, Partition}

// Trigger is one fault, applied for Duration once the baseline is over.
type Trigger struct {
	Kind TriggerKind
	// Targets selects the members it acts on (Fleet.Select): by default
	// "verifiers", the fleet's capacity.
	Targets  string
	Duration time.Duration
	// CPU is the cores each target may use during a CPU trigger.
	CPU float64
	// WorkerFraction and Slowdown are the knob's settings during a Knob
	// trigger (see VerifierAdminService.SetCapacity).
	WorkerFraction, Slowdown float64
	// Spike is the load multiplier during a Spike trigger.
	Spike float64
}

// DefaultTrigger is a 10 s stop of every verifier, with the other kinds'
// settings at a tenth of the fleet's capacity (CPU 0.1 core, knob slowdown
// 10) or three times its load (spike).
func DefaultTrigger() Trigger {
	return Trigger{Kind: Stop, Targets: "verifiers", Duration: 10 * time.Second, CPU: 0.1, WorkerFraction: 1, Slowdown: 10, Spike: 3}
}

// ParseTrigger reads "kind[:targets]" into a copy of base: "stop",
// "kill:budgetd-leader", "cpu:verifier-1+verifier-2", "spike".
func ParseTrigger(s string, base Trigger) (Trigger, error) {
	kind, targets, hasTargets := strings.Cut(strings.TrimSpace(s), ":")
	t := base
	t.Kind = TriggerKind(kind)
	known := false
	for _, k := range triggerKinds {
		known = known || k == t.Kind
	}
	if !known {
		return Trigger{}, fmt.Errorf("trigger %q: unknown kind %q (want none, stop, kill, cpu, knob, spike, restart or partition)", truncate(s), truncate(kind))
	}
	if hasTargets {
		if targets == "" || strings.ContainsAny(targets, " \t\n,:") {
			return Trigger{}, fmt.Errorf("trigger %q: targets must be a selector such as verifiers, budgetd-leader or verifier-1+verifier-2", truncate(s))
		}
		t.Targets = targets
	}
	if t.Targets == "" {
		t.Targets = "verifiers"
	}
	return t, t.Validate()
}

// Validate reports every invalid field.
func (t Trigger) Validate() error {
	var errs []error
	if t.Kind != None && t.Duration <= 0 {
		errs = append(errs, fmt.Errorf("trigger %s: duration must be positive, got %v", t.Kind, t.Duration))
	}
	if t.Duration > time.Hour {
		errs = append(errs, fmt.Errorf("trigger %s: duration must be at most an hour, got %v", t.Kind, t.Duration))
	}
	switch t.Kind {
	case CPU:
		if !(t.CPU >= 0.01 && t.CPU <= 64) {
			errs = append(errs, fmt.Errorf("trigger cpu: cores must be in [0.01, 64], got %v", t.CPU))
		}
	case Knob:
		if !(t.WorkerFraction > 0 && t.WorkerFraction <= 1) || !(t.Slowdown >= 1 && t.Slowdown <= 100) {
			errs = append(errs, fmt.Errorf("trigger knob: worker fraction must be in (0, 1] and slowdown in [1, 100], got %v and %v",
				t.WorkerFraction, t.Slowdown))
		}
	case Spike:
		if !(t.Spike > 0 && t.Spike <= 100) || math.IsInf(t.Spike, 0) {
			errs = append(errs, fmt.Errorf("trigger spike: multiplier must be in (0, 100], got %v", t.Spike))
		}
	}
	return errors.Join(errs...)
}

// String names the trigger for reports: "stop 10s", "cpu 0.1 core 5s".
func (t Trigger) String() string {
	if t.Kind == None {
		return "none"
	}
	var what string
	switch t.Kind {
	case CPU:
		what = fmt.Sprintf(" to %g core", t.CPU)
	case Knob:
		what = fmt.Sprintf(" (workers ×%g, slowdown ×%g)", t.WorkerFraction, t.Slowdown)
	case Spike:
		return fmt.Sprintf("spike ×%g for %v", t.Spike, t.Duration)
	case RampLoad:
		return fmt.Sprintf("triangle ramp over %v", t.Duration)
	}
	return fmt.Sprintf("%s %s%s for %v", t.Kind, t.Targets, what, t.Duration)
}

// loadFactor is the offered-load multiplier the trigger asks for while on.
func (t Trigger) loadFactor() float64 {
	if t.Kind == Spike {
		return t.Spike
	}
	return 1
}

// begin applies the trigger to f and returns what undoes it. The undo must
// be called, with a context of its own, even when the experiment is cut
// short: a fleet left paused or throttled poisons the next run. On error
// begin undoes what it had done.
func (t Trigger) begin(ctx context.Context, f *drive.Fleet) (undo func(context.Context) error, err error) {
	nothing := func(context.Context) error { return nil }
	if t.Kind == None || t.Kind == Spike || t.Kind == RampLoad {
		return nothing, nil
	}
	targets, err := f.Select(ctx, t.Targets)
	if err != nil {
		return nil, err
	}
	if t.Kind == Restart {
		return drive.RollingRestart(ctx, targets)
	}
	var undos []func(context.Context) error
	undoAll := func(ctx context.Context) error {
		var errs []error
		for i := len(undos) - 1; i >= 0; i-- {
			errs = append(errs, undos[i](ctx))
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, undoAll(context.WithoutCancel(ctx)))
		}
	}()
	for _, m := range targets {
		switch t.Kind {
		case Knob:
			if err := f.SetKnob(ctx, m, t.WorkerFraction, t.Slowdown, t.Duration); err != nil {
				return nil, fmt.Errorf("experiment: capacity knob of %s: %w", m.Name, err)
			}
			undos = append(undos, func(ctx context.Context) error { return f.SetKnob(ctx, m, 1, 1, 0) })
		case Stop:
			if err := m.Pause(); err != nil {
				return nil, err
			}
			undos = append(undos, func(context.Context) error { return m.Resume() })
		case Kill:
			if err := m.Kill(); err != nil {
				return nil, err
			}
			undos = append(undos, m.Restart)
		case CPU:
			if err := m.LimitCPU(t.CPU); err != nil {
				return nil, err
			}
			undos = append(undos, func(context.Context) error { return m.LimitCPU(0) })
		case Partition:
			peers := f.ByRole(drive.RoleBudgetd)
			if len(peers) == 0 {
				return nil, fmt.Errorf("experiment: the %s fleet has no budgetd to cut %s off from", f.Name, m.Name)
			}
			if err := m.Partition(peers); err != nil {
				return nil, err
			}
			undos = append(undos, func(context.Context) error { return m.Heal() })
		}
	}
	return undoAll, nil
}
