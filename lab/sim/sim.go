// Package sim is the lab's discrete-event simulator: a fleet and its
// clients, at any scale, in virtual time. The guarded fleet runs Levee's own
// admission limiter, breakers and budget ledger (pkg/admission, pkg/breaker,
// pkg/ledger) on the virtual clock; the plain fleet is one FIFO queue per
// verifier that hashes whatever it queued.
//
// What it promises: a run is a function of its Config (one seed, one
// history); it is recorded in the same per-second Series and judged by the
// same verdict as a real experiment, so the two can be read side by side. It
// models Levee's design, not its bugs: where a real run falls below its
// simulation, a control loop misbehaves.
package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/leveehq/levee/lab/drive"
	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/observe"
	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/ledger"
)

// BudgetMode is how the simulated clients fund their retries.
type BudgetMode string

// The budget modes.
const (
	// NoBudget: every attempt a client allows itself is sent (naive
	// clients: three immediate attempts).
	NoBudget BudgetMode = "none"
	// ProcessBudget: each client process keeps its own budget, Ratio of its
	// own first attempts plus MinPerSecond, at most Burst saved (Finagle's
	// RetryBudget, gRPC's retry throttling): each bound is sound for one
	// process, and their minimums add up across a fleet of processes.
	ProcessBudget BudgetMode = "process"
	// FleetBudget: every process leases tokens from one ledger (budgetd's
	// own Ledger), reporting its first attempts once a second: retries ≤
	// Ratio × the fleet's first attempts, plus one MinPerSecond for all.
	FleetBudget BudgetMode = "fleet"
)

// Config is a fleet and its clients, at any scale, in virtual time. The
// clients are naive (Attempts attempts of Timeout each, retried at once on
// any error) except that, under a budget, each retry needs a token.
type Config struct {
	// Verifiers × Workers hashes run at once, each taking Service (±
	// Jitter, a fraction): capacity C = Verifiers × Workers / Service.
	Verifiers, Workers int
	Service            time.Duration
	Jitter             float64
	// Guarded runs Levee's defences: the gateway's admission limiter
	// (pkg/admission) and a slot per worker, its per-verifier breakers
	// (pkg/breaker), and the verifiers' deadline checks at arrival and
	// dequeue. Unguarded is the plain server: one FIFO queue per verifier,
	// every queued job hashed, caller or not.
	Guarded bool
	Budget  BudgetMode
	// Ratio, Burst and MinPerSecond are the budget's settings (per process
	// or fleet-wide, as Budget says).
	Ratio, Burst, MinPerSecond float64
	// Processes is how many client processes share the load.
	Processes int
	Attempts  int
	Timeout   time.Duration

	// Load is the offered load (× C); the trigger stalls every verifier
	// (Slowdown 0: a failover, a pause) or stretches every hash by
	// Slowdown, for Duration after Warmup + Baseline.
	Load                            float64
	Warmup, Baseline, After         time.Duration
	AfterWindow                     time.Duration
	TriggerDuration                 time.Duration
	Slowdown                        float64
	Seed                            uint64
	name                            string
	reportEvery, leaseFor, timeSkew time.Duration
}

// FullScale is a 19 s failover at full scale: C = 1,000/s (10 verifiers ×
// 10 workers × 100 ms), A = 800/s from 500 client processes with 2 s
// timeouts and 3 attempts, every verifier stalled for 19 s,
// ratio 0.1 and a minimum of 1 retry a second (per process or for the
// fleet), a burst of 10 per process or 100 for the fleet; watched for 5
// minutes after the stall, since a plain fleet under a budget that removes
// the congested state still has the stall's backlog to work off at C − L.
func FullScale(guarded bool, b BudgetMode) Config {
	c := Config{
		Verifiers: 10, Workers: 10, Service: 100 * time.Millisecond, Jitter: 0.1,
		Guarded: guarded, Budget: b, Ratio: 0.1, MinPerSecond: 1, Burst: 10,
		Processes: 500, Attempts: 3, Timeout: 2 * time.Second,
		Load: 0.8, Warmup: 10 * time.Second, Baseline: 20 * time.Second, After: 5 * time.Minute,
		AfterWindow: 20 * time.Second, TriggerDuration: 19 * time.Second, Seed: 1,
	}
	if b == FleetBudget {
		c.Burst = 100
	}
	return c
}

// Capacity is C, hashes per second.
func (c Config) Capacity() float64 {
	return float64(c.Verifiers*c.Workers) / c.Service.Seconds()
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.Verifiers < 1 || c.Workers < 1 || c.Service <= 0 || c.Jitter < 0 || c.Jitter >= 1 {
		errs = append(errs, fmt.Errorf("sim: want verifiers, workers ≥ 1, service > 0, jitter in [0, 1); got %d, %d, %v, %v",
			c.Verifiers, c.Workers, c.Service, c.Jitter))
	}
	switch c.Budget {
	case NoBudget, ProcessBudget, FleetBudget:
	default:
		errs = append(errs, fmt.Errorf("sim: unknown budget %q (want none, process or fleet)", c.Budget))
	}
	if err := (ledger.Settings{Ratio: c.Ratio, Burst: c.Burst, MinPerSecond: c.MinPerSecond}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("sim: budget: %w", err))
	}
	if c.Processes < 1 || c.Processes > 100000 || c.Attempts < 1 || c.Attempts > callmeta.MaxAttempt || c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("sim: want 1–100000 processes, 1–%d attempts, timeout > 0; got %d, %d, %v",
			callmeta.MaxAttempt, c.Processes, c.Attempts, c.Timeout))
	}
	if !(c.Load > 0 && c.Load <= 100) || c.Baseline < 2*time.Second || c.After < experiment.RecoveryWindow*time.Second ||
		c.Warmup < 0 || c.TriggerDuration < 0 || c.Slowdown < 0 {
		errs = append(errs, errors.New("sim: want load in (0, 100], baseline ≥ 2s, after ≥ 3s, warmup, trigger and slowdown ≥ 0"))
	}
	if rate := c.Load * c.Capacity() * c.total().Seconds(); rate > 5e7 {
		errs = append(errs, fmt.Errorf("sim: %.0f arrivals is too many to simulate", rate))
	}
	return errors.Join(errs...)
}

func (c Config) total() time.Duration {
	return c.Warmup + c.Baseline + c.TriggerDuration + c.After
}

// Name labels a simulated fleet: sim-plain-none, sim-levee-fleet, ...
func (c Config) Name() string {
	if c.name != "" {
		return c.name
	}
	g := "plain"
	if c.Guarded {
		g = "levee"
	}
	return "sim-" + g + "-" + string(c.Budget)
}

// Run simulates c in virtual time and returns its record and verdict, as a
// real experiment's: the same series, the same judge. It takes seconds of
// real time for minutes of simulated load at C = 1,000/s.
func Run(c Config) (*experiment.Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.reportEvery == 0 {
		c.reportEvery = time.Second
	}
	if c.leaseFor == 0 {
		c.leaseFor = 3 * time.Second
	}
	s, err := newSim(c)
	if err != nil {
		return nil, err
	}
	s.run()
	e := experiment.Spec{Load: c.Load, Warmup: c.Warmup, Baseline: c.Baseline, After: c.After, AfterWindow: c.AfterWindow, Seed: c.Seed,
		Trigger: experiment.Trigger{Kind: experiment.Stop, Targets: "verifiers", Duration: c.TriggerDuration}}
	if c.Slowdown > 0 {
		e.Trigger = experiment.Trigger{Kind: experiment.Knob, Targets: "verifiers", Duration: c.TriggerDuration, WorkerFraction: 1, Slowdown: c.Slowdown}
	}
	base := experiment.Window{From: int(c.Warmup / time.Second), To: int((c.Warmup + c.Baseline) / time.Second)}
	trig := experiment.Window{From: base.To, To: base.To + int(math.Ceil(c.TriggerDuration.Seconds()))}
	obs := experiment.Window{From: trig.To, To: int(math.Ceil(c.total().Seconds()))}
	r := &experiment.Result{Fleet: c.Name(), Spec: e, Capacity: experiment.Capacity{PerSecond: c.Capacity()}, Series: s.series, Base: base, Trig: trig, Obs: obs}
	r.Verdict = experiment.Judge(s.series, base, trig, obs, int(c.AfterWindow/time.Second))
	return r, nil
}

// event is one thing that happens at a virtual time.
type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// sim is the state of one simulation. It is single-threaded: the clock only
// moves between events.
type sim struct {
	c      Config
	now    time.Time
	start  time.Time
	end    time.Time
	events eventHeap
	seq    uint64
	rng    *rand.Rand
	series *observe.Series

	verifiers []*simVerifier
	limiter   *admission.Limiter
	breakers  []*breaker.Breaker
	stalled   bool
	slowdown  float64
	rr        int

	procs  []*simProc
	ledger *ledger.Ledger

	// Per-second extras, written into the series' scraped columns.
	wasted, queued, tokens float64
}

// Now is the virtual clock, for the limiter and the breakers.
func (s *sim) Now() time.Time { return s.now }

func (s *sim) at(t time.Time, fn func()) {
	s.seq++
	heap.Push(&s.events, event{at: t, seq: s.seq, fn: fn})
}

type simVerifier struct {
	busy    int
	pending int // slots held at the gateway (guarded)
	queue   []*simJob
	running map[*simJob]bool
}

type simJob struct {
	a        *simAttempt
	enqueued time.Time
	end      time.Time
	gen      int // bumped when a stall moves end; stale completion events check it
	cost     time.Duration
}

type simProc struct {
	id            string
	tokens        float64 // process budget: saved tokens; fleet budget: the lease's tokens left
	last          time.Time
	first, retrys uint64 // since the last report (fleet budget)
	leaseUntil    time.Time
}

type simLogical struct {
	arrival time.Time
	proc    int
}

type simAttempt struct {
	l        *simLogical
	n        int
	deadline time.Time
	done     bool // answered or timed out: the client has moved on
	v        int  // the verifier it was sent to (-1: none)
	slot     bool // holds a gateway slot and a limiter admission (guarded)
	job      *simJob
}

func newSim(c Config) (*sim, error) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	secs := int(math.Ceil((c.total() + time.Duration(c.Attempts)*c.Timeout).Seconds())) + 2
	s := &sim{c: c, now: start, start: start, end: start.Add(c.total()), rng: rand.New(rand.NewPCG(c.Seed, 0x73696d)),
		series: observe.NewSeries(start, secs), slowdown: 1}
	for range c.Verifiers {
		s.verifiers = append(s.verifiers, &simVerifier{running: map[*simJob]bool{}})
	}
	if c.Guarded {
		// The gateway's ceiling as it fits it: the fleet's slots (a worker
		// each) over the share below critical.
		ac := admission.DefaultConfig()
		ac.Clock = s
		ac.Ceiling = max(int(math.Ceil(float64(c.Verifiers*c.Workers)/(1-ac.CriticalReserve))), ac.MinLimit)
		ac.InitialLimit = 0 // as the gateway's: at the ceiling until a queue forms
		var err error
		if s.limiter, err = admission.New(ac); err != nil {
			return nil, fmt.Errorf("sim: admission: %w", err)
		}
		for range c.Verifiers {
			bc := breaker.DefaultConfig()
			bc.Clock = s
			bc.Rand = s.rng.Float64
			b, err := breaker.New(bc)
			if err != nil {
				return nil, fmt.Errorf("sim: breaker: %w", err)
			}
			s.breakers = append(s.breakers, b)
		}
	}
	for i := range c.Processes {
		s.procs = append(s.procs, &simProc{id: "p" + strconv.Itoa(i), tokens: c.Burst, last: start})
	}
	if c.Budget == FleetBudget {
		s.ledger = ledger.NewLedger(ledger.Settings{Ratio: c.Ratio, Burst: c.Burst, MinPerSecond: c.MinPerSecond}, c.leaseFor, start)
		for _, p := range s.procs {
			p.tokens = 0
			// Reports are spread over the interval, as jittered refreshes are.
			s.at(start.Add(time.Duration(s.rng.Float64()*float64(c.reportEvery))), func() { s.report(p) })
		}
	}
	return s, nil
}

func (s *sim) run() {
	c := s.c
	trigAt := s.start.Add(c.Warmup + c.Baseline)
	if c.TriggerDuration > 0 {
		s.at(trigAt, func() {
			if c.Slowdown > 0 {
				s.slowdown = c.Slowdown
			} else {
				s.stall(c.TriggerDuration)
			}
		})
		s.at(trigAt.Add(c.TriggerDuration), func() {
			s.slowdown = 1
			s.stalled = false
			for i := range s.verifiers {
				s.startJobs(i)
			}
		})
	}
	for sec := 1; sec <= s.series.Len(); sec++ {
		s.at(s.start.Add(time.Duration(sec)*time.Second), func() { s.tick(sec - 1) })
	}
	rate := c.Load * c.Capacity()
	s.at(s.start.Add(s.expo(rate)), s.arrive)
	for s.events.Len() > 0 {
		e := heap.Pop(&s.events).(event)
		s.now = e.at
		e.fn()
	}
}

func (s *sim) expo(rate float64) time.Duration {
	return time.Duration(s.rng.ExpFloat64() / rate * float64(time.Second))
}

// tick closes second i's extra columns.
func (s *sim) tick(i int) {
	q := 0
	for _, v := range s.verifiers {
		q += len(v.queue)
	}
	tokens := 0.0
	for _, p := range s.procs {
		tokens += p.tokens
	}
	cols := map[string]float64{observe.ColWasted: s.wasted, "queued": float64(q), "client_tokens": tokens}
	if s.limiter != nil {
		cols[observe.ColLimit] = float64(s.limiter.Limit())
	}
	s.series.SetScraped(i, cols)
	s.wasted = 0
}

func (s *sim) arrive() {
	if !s.now.Before(s.end) {
		return
	}
	l := &simLogical{arrival: s.now, proc: s.rng.IntN(len(s.procs))}
	s.series.Add(s.now, func(x *observe.Second) { x.Offered.Add(1) })
	s.send(l, 1)
	s.at(s.now.Add(s.expo(s.c.Load*s.c.Capacity())), s.arrive)
}

// send makes attempt n of l.
func (s *sim) send(l *simLogical, n int) {
	a := &simAttempt{l: l, n: n, deadline: s.now.Add(s.c.Timeout), v: -1}
	p := s.procs[l.proc]
	s.series.Add(s.now, func(x *observe.Second) {
		if n == 1 {
			x.First.Add(1)
		} else {
			x.Retries.Add(1)
		}
	})
	if n == 1 {
		s.earn(p)
	} else {
		p.retrys++
	}
	s.at(a.deadline, func() { s.timeout(a) })
	s.receive(a)
}

// earn credits a process budget for a first attempt.
func (s *sim) earn(p *simProc) {
	switch s.c.Budget {
	case ProcessBudget:
		s.refill(p)
		p.tokens = min(p.tokens+s.c.Ratio, s.c.Burst)
	case FleetBudget:
		p.first++
	}
}

func (s *sim) refill(p *simProc) {
	p.tokens = min(p.tokens+s.c.MinPerSecond*s.now.Sub(p.last).Seconds(), s.c.Burst)
	p.last = s.now
}

// allowRetry spends a token, if the budget has one.
func (s *sim) allowRetry(p *simProc) bool {
	switch s.c.Budget {
	case ProcessBudget:
		s.refill(p)
	case FleetBudget:
		if s.now.After(p.leaseUntil) {
			p.tokens = 0
		}
	default:
		return true
	}
	if p.tokens >= 1 {
		p.tokens--
		return true
	}
	return false
}

// report is a process's lease refresh against the fleet's ledger.
func (s *sim) report(p *simProc) {
	rate := float64(p.first) / s.c.reportEvery.Seconds()
	want := uint32(math.Ceil(s.c.Ratio*rate*s.c.reportEvery.Seconds())) + 2
	p.tokens = float64(s.ledger.Report(p.id, ledger.Counts{First: p.first, Retries: p.retrys}, want, s.now).Tokens)
	p.leaseUntil = s.now.Add(s.c.leaseFor)
	p.first, p.retrys = 0, 0
	if s.now.Before(s.end) {
		s.at(s.now.Add(s.c.reportEvery), func() { s.report(p) })
	}
}

// answer is the fleet's reply reaching the client.
func (s *sim) answer(a *simAttempt, code observe.Code) {
	if a.done {
		return
	}
	a.done = true
	s.series.Add(s.now, func(x *observe.Second) { x.Codes[code].Add(1) })
	if code == observe.CodeOK {
		s.finish(a.l, true)
		return
	}
	s.retryOrFail(a)
}

func (s *sim) timeout(a *simAttempt) {
	if a.done {
		return
	}
	a.done = true
	s.series.Add(s.now, func(x *observe.Second) { x.Codes[observe.CodeTimeout].Add(1) })
	s.cancel(a)
	s.retryOrFail(a)
}

func (s *sim) retryOrFail(a *simAttempt) {
	if a.n < s.c.Attempts && s.allowRetry(s.procs[a.l.proc]) {
		s.send(a.l, a.n+1)
		return
	}
	s.finish(a.l, false)
}

func (s *sim) finish(l *simLogical, ok bool) {
	took := s.now.Sub(l.arrival)
	s.series.Add(s.now, func(x *observe.Second) {
		if ok {
			x.Goodput.Add(1)
		} else {
			x.Failed.Add(1)
		}
	})
	s.series.Add(l.arrival, func(x *observe.Second) {
		x.ArrivedEnded.Add(1)
		if ok {
			x.ArrivedOK.Add(1)
			x.Latency[observe.LatBucket(took)].Add(1)
		}
	})
}

// cost is one hash's service time now.
func (s *sim) cost() time.Duration {
	f := 1 + s.c.Jitter*(2*s.rng.Float64()-1)
	return time.Duration(float64(s.c.Service) * f * s.slowdown)
}

// receive is an attempt reaching the gateway.
func (s *sim) receive(a *simAttempt) {
	if !s.c.Guarded {
		// The plain fleet: round robin into an unbounded FIFO.
		s.rr++
		a.v = s.rr % len(s.verifiers)
		s.enqueue(a)
		return
	}
	// The gateway's edge: the limiter, then a slot on a verifier whose
	// breaker admits the call, least loaded of two.
	class := admission.Class{Priority: callmeta.Interactive, Retry: a.n > 1 && s.c.Budget != NoBudget}
	if s.limiter.Acquire(class) != admission.ReasonAdmitted {
		s.answer(a, observe.CodeResourceExhausted)
		return
	}
	v := s.pick()
	if v < 0 {
		s.limiter.Release(admission.Sample{Outcome: admission.OutcomeIgnore})
		s.answer(a, observe.CodeResourceExhausted)
		return
	}
	if s.now.Add(s.c.Service).After(a.deadline) {
		s.limiter.Release(admission.Sample{Outcome: admission.OutcomeIgnore})
		s.answer(a, observe.CodeDeadlineExceeded)
		return
	}
	a.v, a.slot = v, true
	s.verifiers[v].pending++
	s.enqueue(a)
}

// pick is the gateway's power of two choices over verifiers with a free
// slot whose breaker admits the call; -1 when none.
func (s *sim) pick() int {
	n := len(s.verifiers)
	free := func(i int) bool { return s.verifiers[i].pending < s.c.Workers && s.breakers[i].Allow() }
	i, j := s.rng.IntN(n), s.rng.IntN(n)
	if s.verifiers[j].pending < s.verifiers[i].pending {
		i, j = j, i
	}
	if free(i) {
		return i
	}
	if j != i && free(j) {
		return j
	}
	for k := range n {
		if c := (i + k) % n; free(c) {
			return c
		}
	}
	return -1
}

// release gives back a guarded attempt's slot and admission.
func (s *sim) release(a *simAttempt, sample admission.Sample) {
	if !a.slot {
		return
	}
	a.slot = false
	s.verifiers[a.v].pending--
	s.limiter.Release(sample)
}

// cancel is the client giving up on a: a guarded fleet frees the slot and
// takes the job out of the queue; a plain one carries on regardless.
func (s *sim) cancel(a *simAttempt) {
	if !s.c.Guarded {
		return
	}
	s.release(a, admission.Sample{Outcome: admission.OutcomeIgnore})
	if j := a.job; j != nil && !s.verifiers[a.v].running[j] {
		q := s.verifiers[a.v].queue
		for k, x := range q {
			if x == j {
				s.verifiers[a.v].queue = append(q[:k], q[k+1:]...)
				break
			}
		}
	}
}

func (s *sim) enqueue(a *simAttempt) {
	v := s.verifiers[a.v]
	j := &simJob{a: a, enqueued: s.now, cost: s.cost()}
	a.job = j
	if s.c.Guarded {
		// The verifier's arrival check: the projected wait and the hash
		// must fit the deadline.
		wait := time.Duration(float64(len(v.queue)) * float64(s.c.Service) * s.slowdown / float64(s.c.Workers))
		if s.now.Add(wait + j.cost).After(a.deadline) {
			s.release(a, admission.Sample{Outcome: admission.OutcomeOverloaded})
			s.answer(a, observe.CodeResourceExhausted)
			return
		}
	}
	v.queue = append(v.queue, j)
	s.startJobs(a.v)
}

// startJobs fills vi's free workers from its queue, oldest first.
func (s *sim) startJobs(vi int) {
	v := s.verifiers[vi]
	for !s.stalled && v.busy < s.c.Workers && len(v.queue) > 0 {
		j := v.queue[0]
		v.queue = v.queue[1:]
		a := j.a
		if s.c.Guarded && (a.done || s.now.Add(j.cost).After(a.deadline)) {
			// Dropped at dequeue: never hashed.
			if !a.done {
				s.release(a, admission.Sample{Outcome: admission.OutcomeIgnore})
				s.answer(a, observe.CodeDeadlineExceeded)
			}
			continue
		}
		v.busy++
		v.running[j] = true
		j.end = s.now.Add(j.cost)
		s.schedule(vi, j)
	}
}

func (s *sim) schedule(vi int, j *simJob) {
	gen := j.gen
	s.at(j.end, func() {
		if j.gen == gen {
			s.complete(vi, j)
		}
	})
}

func (s *sim) complete(vi int, j *simJob) {
	v := s.verifiers[vi]
	v.busy--
	delete(v.running, j)
	a := j.a
	if a.done {
		s.wasted++ // hashed for a caller who left
	} else {
		if s.c.Guarded {
			s.breakers[vi].Record(true)
			s.release(a, admission.Sample{Outcome: admission.OutcomeOK, QueueWait: j.end.Sub(j.enqueued) - j.cost})
		}
		s.answer(a, observe.CodeOK)
	}
	s.startJobs(vi)
}

// stall freezes every verifier for d: nothing starts, and what runs ends d
// later than it would have (SIGSTOP of the whole fleet).
func (s *sim) stall(d time.Duration) {
	s.stalled = true
	for vi, v := range s.verifiers {
		for j := range v.running {
			j.gen++
			j.end = j.end.Add(d)
			s.schedule(vi, j)
		}
	}
}

// Like is the simulation of a real run: the same fleet shape, capacity,
// load, clients and trigger, in virtual time. Only naive clients are
// modelled, so a run of another mix is simulated as if it were naive.
func Like(r *experiment.Result, local drive.LocalConfig, clients experiment.Clients) (Config, bool) {
	e := r.Spec
	c := Config{
		Verifiers: local.Verifiers, Workers: local.Workers, Jitter: 0.1,
		Guarded: r.Fleet == "levee", Budget: NoBudget, Ratio: 0.1, Burst: 10, MinPerSecond: 1,
		Processes: 1, Attempts: clients.Naive.Attempts, Timeout: clients.Naive.Timeout,
		Load: e.Load, Warmup: e.Warmup, Baseline: e.Baseline, After: e.After, AfterWindow: e.AfterWindow,
		TriggerDuration: e.TriggerDuration(), Seed: e.Seed, name: "sim-" + r.Fleet,
	}
	if r.Capacity.PerSecond <= 0 || e.Profile != nil {
		return c, false
	}
	c.Service = time.Duration(float64(c.Verifiers*c.Workers) / r.Capacity.PerSecond * float64(time.Second))
	switch e.Trigger.Kind {
	case experiment.Stop:
	case experiment.Knob:
		c.Slowdown = e.Trigger.Slowdown / e.Trigger.WorkerFraction
	case experiment.CPU:
		c.Slowdown = max(float64(local.Workers)/e.Trigger.CPU, 1)
	default:
		return c, false
	}
	return c, e.Trigger.Targets == "verifiers"
}
