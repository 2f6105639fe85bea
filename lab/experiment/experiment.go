// Package experiment runs one experiment against a running fleet and
// judges it: open-loop client populations (naive, pkg/client with the fleet
// budget, people at a login page, callers without a deadline) offer a load
// that is a fraction of the capacity C measured on that fleet, a trigger is
// applied after a healthy baseline and undone, and a Verdict says whether
// the fleet came back. The grid (triggers × durations × loads × seeds) and
// the triangle ramp are sets of such experiments.
//
// What it promises:
//
//   - Open loop: arrivals are a Poisson process at the experiment's rate,
//     whatever the fleet answers. Only the capacity measurement is
//     closed-loop, and it returns only once the fleet has drained what it
//     left queued.
//   - Every logical request is counted once, by the second it arrived and by
//     the second it ended, and every attempt by the second it was sent and
//     how it ended; verdicts are computed from those counts, relative to the
//     baseline's share of arrivals served, never from one sample.
//   - A trigger is undone before Run returns, even when the experiment is
//     cut short, and its span runs until its undo was delivered.
package experiment

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"sync"
	"time"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/lab/drive"
	"github.com/leveehq/levee/lab/observe"
	"github.com/leveehq/levee/pkg/verify"
)

// Spec is one run against one fleet: a base load, one trigger after
// a baseline, and a watch after it.
type Spec struct {
	// Load is the offered load in logical requests per second, as a
	// fraction of the fleet's measured capacity.
	Load float64
	// Warmup runs the load before the baseline; it is not judged.
	Warmup time.Duration
	// Baseline is the healthy span the verdict compares with.
	Baseline time.Duration
	// Trigger starts when the baseline ends.
	Trigger Trigger
	// After is how long the load runs once the trigger has ended.
	After time.Duration
	// AfterWindow is the final span of arrivals "goodput after" averages.
	AfterWindow time.Duration
	// Profile, when set, replaces the constant Load: the offered load at
	// t since the start, as a fraction of capacity (the triangle ramp).
	Profile func(t time.Duration) float64
	// Seed seeds the arrivals and the choice of population and priority.
	Seed uint64
}

// DefaultSpec is a stall at 0.7 of capacity: a 5 s warm-up, a 15 s
// baseline, the default trigger (every verifier stopped 10 s), then 30 s of
// watching, the last 10 s of it judged.
func DefaultSpec() Spec {
	return Spec{Load: 0.7, Warmup: 5 * time.Second, Baseline: 15 * time.Second, Trigger: DefaultTrigger(),
		After: 30 * time.Second, AfterWindow: 10 * time.Second, Seed: 1}
}

// Validate reports every invalid field.
func (e Spec) Validate() error {
	var errs []error
	if e.Profile == nil && !(e.Load > 0 && e.Load <= 100) {
		errs = append(errs, fmt.Errorf("experiment: load must be in (0, 100] × capacity, got %v", e.Load))
	}
	if e.Warmup < 0 || e.Baseline < 2*time.Second || e.After < 0 || e.AfterWindow < 0 {
		errs = append(errs, fmt.Errorf("experiment: want warmup ≥ 0, baseline ≥ 2s, after and its window ≥ 0; got %v, %v, %v, %v",
			e.Warmup, e.Baseline, e.After, e.AfterWindow))
	}
	if e.Trigger.Kind != None && e.After < RecoveryWindow*time.Second {
		errs = append(errs, fmt.Errorf("experiment: after must be at least %ds to judge recovery, got %v", RecoveryWindow, e.After))
	}
	if e.total() > 4*time.Hour {
		errs = append(errs, fmt.Errorf("experiment: %v is longer than 4h", e.total()))
	}
	if err := e.Trigger.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// TriggerDuration is how long the trigger is on; 0 when there is none.
func (e Spec) TriggerDuration() time.Duration {
	if e.Trigger.Kind == None {
		return 0
	}
	return e.Trigger.Duration
}

func (e Spec) total() time.Duration {
	return e.Warmup + e.Baseline + e.TriggerDuration() + e.After
}

// rate is the offered load at t in logical requests per second.
func (e Spec) rate(capacity float64) func(time.Duration) float64 {
	start := e.Warmup + e.Baseline
	end := start + e.TriggerDuration()
	return func(t time.Duration) float64 {
		if e.Profile != nil {
			return e.Profile(t) * capacity
		}
		r := e.Load * capacity
		if t >= start && t < end {
			r *= e.Trigger.loadFactor()
		}
		return r
	}
}

// Result is one experiment's record.
type Result struct {
	Fleet string
	Spec  Spec
	// Capacity is what was measured before the load: C, logical requests
	// per second, that Load is a fraction of, and the unloaded latency.
	Capacity Capacity
	Series   *observe.Series
	Verdict  Verdict
	// Spans are the judged windows in seconds since the start.
	Base, Trig, Obs Window
	// Applied is when the trigger was in force, since the start: when its
	// signals were delivered or its limits set, which is later than
	// Trig's first second by however long that took (a loaded Docker
	// takes seconds). Zero without a trigger.
	Applied time.Duration
	// Lifted is when the trigger's undo had been delivered, since the
	// start; Trig ends in the second it did, if that is later than
	// scheduled. Zero without a trigger.
	Lifted time.Duration
	// Adversary is how the adversary's calls ended; nil without one.
	Adversary *AdversaryCounts
	// Tenants are the tenants' own verdicts (Clients.Tenants), in order;
	// nil without tenants.
	Tenants []TenantVerdict
	// Variant names how the fleet differed from its defaults in this run
	// ("fair-share off"); empty for none.
	Variant string
}

// Line is the result in one line: fleet, trigger, load, C, verdict.
func (r *Result) Line() string {
	v := r.Verdict
	rec := v.String()
	if v.Stuck {
		rec = "STUCK"
	}
	line := fmt.Sprintf("%-7s %-32s load %.2f C (C = %.0f/s): baseline %.0f/s (%.1f %% ok), after %.0f/s (%.1f %% of baseline), %s, wasted %.0f, baseline p99 %v (unloaded p99 + 3 p50: %v)",
		r.Fleet, r.Spec.Trigger.String(), r.Spec.Load, r.Capacity.PerSecond, v.Baseline, 100*v.BaselineRatio,
		v.After, 100*v.AfterFraction, rec, v.Wasted, v.LatencyP99.Round(100*time.Microsecond), r.Capacity.HealthyP99Bound().Round(100*time.Microsecond))
	if r.Adversary != nil {
		line += "; " + r.Adversary.String()
	}
	if r.Variant != "" {
		line += "; " + r.Variant
	}
	if len(r.Tenants) > 0 {
		line += fmt.Sprintf("; goodput %.2f C", r.GoodputOverC())
		for _, t := range r.Tenants {
			line += fmt.Sprintf("; tenant %s: %.2f C offered, %.2f %% served, hashing share %.3f", t.Tenant.Name,
				t.Offered/r.Capacity.PerSecond, 100*t.ServedFraction, t.WorkShare)
			if !math.IsNaN(t.VerifierWorkShare) {
				line += fmt.Sprintf(" (verifiers: %.3f)", t.VerifierWorkShare)
			}
		}
	}
	return line
}

// NewRequest makes the lab's stored hash: a fresh Argon2id hash of a fixed
// password under params, so that verifying it costs what the fleet's own
// policy hashes cost and never needs a rehash.
func NewRequest(params verify.Params) (Request, error) {
	v, err := verify.New(verify.Policy{Params: params, SaltLen: 16, KeyLen: 32}, verify.DefaultLimits())
	if err != nil {
		return Request{}, fmt.Errorf("experiment: hash parameters: %w", err)
	}
	pw := []byte("levee storm: correct horse battery staple")
	h, err := v.HashPassword(pw, rand.Reader)
	if err != nil {
		return Request{}, fmt.Errorf("experiment: %w", err)
	}
	return Request{hash: h.String(), password: pw, params: params}, nil
}

// Run runs e against f at capacity (C, logical requests per
// second) with the clients, and judges it. The trigger is undone before it
// returns, whatever happened.
func Run(ctx context.Context, f *drive.Fleet, clients Clients, q Request, capacity Capacity, e Spec, log *slog.Logger) (*Result, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	if f.Target == "" {
		return nil, errNoTarget
	}
	total := e.total()
	// Room after the load for the last arrivals to end.
	secs := int(math.Ceil((total + clients.patience()).Seconds())) + 2
	start := time.Now().Add(200 * time.Millisecond).Truncate(time.Millisecond)
	s := observe.NewSeries(start, secs)
	pop, err := newPopulation(clients, q, f.Target, f.Budgetd, f.Caller, s, log)
	if err != nil {
		return nil, err
	}
	defer pop.close()

	base := Window{int(e.Warmup / time.Second), int((e.Warmup + e.Baseline) / time.Second)}
	trig := Window{base.To, base.To + int(math.Ceil(e.TriggerDuration().Seconds()))}
	obs := Window{trig.To, int(math.Ceil(total.Seconds()))}
	for i := range secs {
		phase := "drain"
		switch {
		case i < base.From:
			phase = "warmup"
		case i < base.To:
			phase = "baseline"
		case i < trig.To:
			phase = "trigger"
		case i < obs.To:
			phase = "after"
		}
		s.SetPhase(i, phase)
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	scrapeDone := make(chan struct{})
	keys := []string{clients.Levee.BudgetKey, "gateway"}
	wg.Add(1)
	go func() { // once a second, the fleet's metrics
		defer wg.Done()
		sc := observe.NewScraper(f, keys)
		sc.SetTenants(s.Tenants())
		sc.Read(rctx, 400*time.Millisecond) // the first read only sets the counters' zero
		for i := 0; i < secs; i++ {
			wait := time.Until(start.Add(time.Duration(i+1) * time.Second))
			t := time.NewTimer(wait)
			select {
			case <-rctx.Done():
				t.Stop()
				return
			case <-scrapeDone:
				t.Stop()
				return
			case <-t.C:
			}
			s.SetScraped(i, sc.Read(rctx, 400*time.Millisecond))
		}
	}()

	var trigErr error
	var applied, lifted time.Duration
	if e.Trigger.Kind != None {
		wg.Add(1)
		go func() { // the trigger, on schedule, always undone
			defer wg.Done()
			at := start.Add(time.Duration(trig.From) * time.Second)
			t := time.NewTimer(time.Until(at))
			defer t.Stop()
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			log.Info("trigger on", "fleet", f.Name, "trigger", e.Trigger.String())
			undo, err := e.Trigger.begin(rctx, f)
			if err != nil {
				trigErr = err
				cancel()
				return
			}
			applied = time.Since(start)
			t.Reset(time.Until(at.Add(e.Trigger.Duration)))
			select {
			case <-rctx.Done():
			case <-t.C:
			}
			uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer ucancel()
			if err := undo(uctx); err != nil {
				trigErr = fmt.Errorf("experiment: undoing the trigger: %w", err)
				cancel()
			}
			lifted = time.Since(start)
			log.Info("trigger off", "fleet", f.Name)
		}()
	}

	var adv *adversary
	if clients.Adversary.Kind != NoAdversary {
		adv = &adversary{cfg: clients.Adversary, q: q}
		if adv.cfg.Kind == Cheap {
			if adv.q, err = cheapRequest(); err != nil {
				cancel()
				wg.Wait()
				return nil, err
			}
		}
		for _, cc := range pop.conns {
			adv.rpcs = append(adv.rpcs, verifyv1.NewVerifyServiceClient(cc))
		}
	}

	// With tenants, the experiment's Load multiplies each tenant's own.
	scale := capacity.PerSecond
	if len(clients.Tenants) > 0 {
		scale *= tenantLoad(clients.Tenants)
	}
	if wait := time.Until(start); wait > 0 {
		time.Sleep(wait)
	}
	if adv != nil {
		arng := mrand.New(mrand.NewPCG(e.Seed, 0x616476))
		wg.Go(func() { adv.drive(rctx, arng, start, e.rate(scale), total) })
	}
	rng := mrand.New(mrand.NewPCG(e.Seed, 0x73746f726d))
	pop.drive(rctx, rng, e.rate(scale), total)
	close(scrapeDone)
	cancel()
	wg.Wait()
	if trigErr != nil {
		return nil, trigErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The trigger lasted until its undo was delivered (a loaded Docker
	// takes seconds to unpause or restart), and no fleet can recover before
	// that: the trigger's span runs to the second the undo completed in,
	// and recovery is counted from there.
	if t, o := untilLifted(trig, obs, lifted); t != trig {
		for i := trig.To; i < t.To; i++ {
			s.SetPhase(i, "trigger")
		}
		trig, obs = t, o
	}
	afterWindow := int(e.AfterWindow / time.Second)
	res := &Result{Fleet: f.Name, Spec: e, Capacity: capacity, Series: s, Base: base, Trig: trig, Obs: obs,
		Applied: applied, Lifted: lifted}
	if adv != nil {
		res.Adversary = adv.counts()
	}
	res.Verdict = Judge(s, base, trig, obs, afterWindow)
	res.Tenants = JudgeTenants(s, clients.Tenants, base, trig, obs, afterWindow)
	return res, nil
}

// untilLifted extends the trigger's span trig to the second its undo was
// delivered in (lifted, since the start), and starts the watch obs there,
// when that is later than scheduled and still inside the watch.
func untilLifted(trig, obs Window, lifted time.Duration) (Window, Window) {
	if l := int(lifted / time.Second); l > trig.To && l < obs.To {
		trig.To, obs.From = l, l
	}
	return trig, obs
}
