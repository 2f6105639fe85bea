// Package workpool runs expensive, deadline-bound jobs on a fixed set of
// workers behind a bounded queue that refuses work it cannot finish in time.
//
// The pool promises:
//
//   - At most Workers jobs run at once, and, with a MemoryBudget, the memory
//     the running jobs declared (Submit's mem: an Argon2 block array, say)
//     sums to at most the budget: a job starts only when a worker is free and
//     the memory in use plus its own fits. Nothing is allocated per queued job
//     beyond its small bookkeeping record.
//   - A job declaring more memory than the whole budget can never start; it
//     is refused at arrival (ErrTooBig) and never queued.
//   - Admission at arrival: Submit refuses at once, without queueing, when the
//     queue is full, when the projected queue wait (the summed expected cost of
//     queued jobs divided by the active workers) exceeds MaxQueueWait, or when
//     the projected wait plus the job's own cost would overrun the caller's
//     deadline.
//   - Admission at dequeue: a job whose remaining deadline is shorter than its
//     expected cost when a worker picks it up (or looks past it for a job
//     that fits the memory left) is dropped without running.
//   - A job whose context is cancelled while queued is removed and never runs.
//   - Adaptive LIFO: jobs are served oldest first, which keeps the start
//     time admission projected for each. Once the queue is late — its
//     oldest job is more than LIFOAfter past its projected start (a stall,
//     a slowdown) — and still holds more than LIFOAfter/4 of work, newest
//     first (its callers are the ones still waiting), until neither holds.
//   - Bounded skip-ahead for memory: when the next job in service order does
//     not fit the memory left, a free worker may start a later job that does
//     fit (a cheap bcrypt check behind a large Argon2 one), but each waiting
//     job lets at most Workers jobs pass it. After that nothing starts ahead
//     of it: memory frees as running jobs end, and it is next. A large job is
//     delayed by at most one round of small ones, never starved.
//   - The projected wait accounts for memory: when the budget over the mean
//     memory of the queued jobs is below the active workers, that many jobs
//     are expected to run at once, not the workers.
//   - Fair queueing by flow (SubmitFlow's Flow: the verifier's tenant and
//     its weight): the workers are shared among the flows with jobs queued
//     by expected cost in proportion to their weights, not by arrival. The
//     next job comes from the flow that has been served the least expected
//     cost per unit of weight; a flow that starts queueing joins at the
//     level of the flow served last, so time without queued work earns it
//     no credit, and a flow whose last queued job leaves is forgotten.
//     Inside a flow the order above holds (oldest first, newest first when
//     late). Admission projects each arrival's wait as fair queueing will
//     serve it: a flow with little queued waits for little, however much
//     another flow has queued. When the queue is full, an arrival from a
//     flow whose queue, per unit of weight, stays shorter than the longest
//     flow's even after taking one of its places takes the place of that
//     flow's newest job (ErrPushedOut) instead of being refused. The pool
//     holds one record per flow with jobs queued, no more.
//
// Config.Unguarded turns every one of these defences off, for the lab's
// control fleet (levee-lab): see its doc.
//
// A Pool is safe for concurrent use. Its workers are started by New and
// stopped, and waited for, by Close.
package workpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Sentinel errors returned by Submit. Refusals at arrival all match
// ErrRefused with errors.Is; drops after queueing do not.
var (
	// ErrRefused is matched by every refusal at arrival.
	ErrRefused = errors.New("workpool: refused")
	// ErrQueueFull: the queue holds QueueCapacity jobs already.
	ErrQueueFull = fmt.Errorf("%w: queue full", ErrRefused)
	// ErrWaitTooLong: the projected queue wait exceeds MaxQueueWait.
	ErrWaitTooLong = fmt.Errorf("%w: projected queue wait exceeds the maximum", ErrRefused)
	// ErrWouldMissDeadline: projected wait plus the job's cost overruns the
	// caller's remaining deadline.
	ErrWouldMissDeadline = fmt.Errorf("%w: projected queue wait would overrun the deadline", ErrRefused)
	// ErrDeadlineTooShort: the caller's remaining deadline cannot cover the
	// job's own cost even with an empty queue.
	ErrDeadlineTooShort = fmt.Errorf("%w: remaining deadline shorter than the expected cost", ErrRefused)
	// ErrDraining: the pool takes no new work.
	ErrDraining = fmt.Errorf("%w: draining", ErrRefused)
	// ErrTooBig: the job declares more memory than the whole MemoryBudget,
	// so it could never start on this pool. Unlike the other refusals it is
	// not about load: retrying cannot help.
	ErrTooBig = fmt.Errorf("%w: job needs more memory than the whole budget", ErrRefused)

	// ErrExpired: the job was dropped at dequeue because its remaining
	// deadline was shorter than its expected cost.
	ErrExpired = errors.New("workpool: deadline would pass before the job finished; dropped at dequeue")
	// ErrCancelled: the caller's context ended while the job was queued; the
	// job was removed and never ran.
	ErrCancelled = errors.New("workpool: caller left while queued")
	// ErrClosed: the pool closed before the job ran.
	ErrClosed = errors.New("workpool: closed")
	// ErrPushedOut: the job was queued, and then, the queue being full,
	// taken out to make room for an arrival from a flow with fewer jobs
	// queued. Like a refusal at arrival it says the node is overloaded.
	ErrPushedOut = errors.New("workpool: pushed out of the full queue by a flow with fewer jobs queued")
)

// Config sizes a Pool.
type Config struct {
	// Workers is the number of jobs that may run at once.
	Workers int
	// QueueCapacity bounds the number of queued (not yet running) jobs.
	QueueCapacity int
	// MaxQueueWait refuses arrivals whose projected queue wait exceeds it.
	MaxQueueWait time.Duration
	// LIFOAfter switches the queue to newest-first while its oldest job is
	// this much later than the start projected when it was admitted and the
	// projected wait is above LIFOAfter/4.
	LIFOAfter time.Duration
	// MemoryBudget bounds the summed memory (Submit's mem, in bytes) of the
	// running jobs; zero means no bound beyond Workers.
	MemoryBudget int64
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// Unguarded turns the pool into the plain server whose metastable
	// failure Levee exists to prevent, so that the lab (levee-lab) can
	// show that failure beside a guarded fleet: no admission at arrival (the
	// queue is unbounded, and MaxQueueWait and deadlines are ignored),
	// strictly oldest first (no LIFO), and every queued job runs, even after
	// its deadline passed or its caller left: Submit waits for it whatever
	// ctx does. Only draining, closing and ErrTooBig still refuse. Never for
	// production.
	Unguarded bool
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Workers < 1:
		return fmt.Errorf("workpool: Workers must be at least 1, got %d", c.Workers)
	case c.QueueCapacity < 1:
		// Every job passes through the queue, even on its way to an idle worker.
		return fmt.Errorf("workpool: QueueCapacity must be at least 1, got %d", c.QueueCapacity)
	case c.MaxQueueWait <= 0:
		return fmt.Errorf("workpool: MaxQueueWait must be positive, got %v", c.MaxQueueWait)
	case c.LIFOAfter <= 0:
		return fmt.Errorf("workpool: LIFOAfter must be positive, got %v", c.LIFOAfter)
	case c.MemoryBudget < 0:
		return fmt.Errorf("workpool: MemoryBudget must not be negative (zero: no bound), got %d", c.MemoryBudget)
	}
	return nil
}

// Result describes what happened to a submitted job.
type Result struct {
	// Wait is the time spent queued (zero when refused at arrival).
	Wait time.Duration
	// Service is the time a worker was held by the job, slowdown included
	// (zero when the job did not run).
	Service time.Duration
	// Ran is the job's own run time, without the slowdown's stretch: what
	// an estimate of the job's cost (Submit's cost) should learn from.
	Ran time.Duration
}

// Stats is a snapshot of the pool.
type Stats struct {
	Workers    int           // configured workers
	Active     int           // workers currently taking work
	Busy       int           // jobs running
	Queued     int           // jobs waiting
	QueuedCost time.Duration // summed expected cost of queued jobs
	LIFO       bool          // serving newest first
	Draining   bool          // refusing new work
	Slowdown   float64       // service-time multiplier in force
	Completed  uint64        // jobs that ran to completion, ever

	MemoryBudget int64 // configured budget in bytes; 0: none
	MemoryInUse  int64 // memory declared by the running jobs
	PeakMemory   int64 // the highest MemoryInUse ever reached
	QueuedMemory int64 // memory declared by the queued jobs
}

type jobState uint8

const (
	stateQueued jobState = iota
	stateRunning
	stateDone
)

type job struct {
	ctx      context.Context
	fn       func()
	flow     *flow
	cost     time.Duration
	mem      int64
	seq      uint64 // arrival order
	enqueued time.Time
	// due is when it was projected to start: enqueued plus the projected
	// wait that admitted it. The queue is late when its oldest job is past
	// due by LIFOAfter.
	due      time.Time
	bypassed int // jobs started ahead of this one because it did not fit
	state    jobState
	err      error
	res      Result
	done     chan struct{}

	all    links // in the pool's arrival order
	inFlow links // in its flow's arrival order
}

// links are a job's place in one of the intrusive lists it is on.
type links struct{ prev, next *job }

// list is an intrusive doubly-linked list of jobs, through the links that
// at picks in each: removal is O(1), and a list costs a job no allocation.
type list struct {
	head, tail *job
	at         func(*job) *links
}

func allLinks(j *job) *links    { return &j.all }
func inFlowLinks(j *job) *links { return &j.inFlow }

func (l *list) push(j *job) {
	l.at(j).prev = l.tail
	if l.tail != nil {
		l.at(l.tail).next = j
	} else {
		l.head = j
	}
	l.tail = j
}

func (l *list) remove(j *job) {
	lk := l.at(j)
	if lk.prev != nil {
		l.at(lk.prev).next = lk.next
	} else {
		l.head = lk.next
	}
	if lk.next != nil {
		l.at(lk.next).prev = lk.prev
	} else {
		l.tail = lk.prev
	}
	lk.prev, lk.next = nil, nil
}

// flow is one flow's queued jobs. It exists while it has jobs queued.
type flow struct {
	key        string
	weight     float64 // the latest arrival's (Flow.Weight), > 0
	jobs       list
	queued     int
	queuedCost time.Duration
	// served is the expected cost of the flow's jobs started since it was
	// created, each divided by the flow's weight, counted from the pool's
	// virtual time at its creation: the flow with the least served is
	// served next.
	served float64
}

// length is the flow's queue per unit of weight, in jobs.
func (f *flow) length(queued int) float64 { return float64(queued) / f.weight }

// Flow names whom a job is for, for fair queueing.
type Flow struct {
	// Key names the flow (a tenant); jobs of one key share its turns.
	Key string
	// Weight is the flow's share of the workers relative to other flows;
	// zero or less (or not a finite number) counts as 1. The flow takes
	// the weight of its latest arrival.
	Weight float64
}

// weight is f's weight as the pool uses it.
func (f Flow) weight() float64 {
	if !(f.Weight > 0) || math.IsInf(f.Weight, 0) {
		return 1
	}
	return f.Weight
}

// Pool is a bounded, deadline-aware worker pool. Create it with New.
type Pool struct {
	cfg Config
	now func() time.Time

	mu         sync.Mutex
	work       *sync.Cond // signalled when a job is queued
	capacity   *sync.Cond // signalled when the active worker count changes
	idle       *sync.Cond // signalled when a job finishes or leaves the queue
	jobs       list       // every queued job
	queued     int
	queuedCost time.Duration
	queuedMem  int64
	flows      map[string]*flow
	// vtime is the served level of the flow picked last (the most any
	// picked flow had been served before its pick): a flow that starts
	// queueing begins there, so that time it spent without queued work
	// earns it no credit over flows that kept the workers busy.
	vtime      float64
	order      []*flow // pickLocked's scratch: flows in service order
	passed     []*job  // pickLocked's scratch: jobs passed over for memory
	memInUse   int64
	peakMem    int64
	memBlocked bool // a queued job did not fit the memory left when last looked at
	busy       int
	active     int
	slowdown   float64
	lifo       bool
	draining   bool
	closed     bool
	completed  uint64
	arrivals   uint64 // jobs ever queued: the next job's seq

	stop chan struct{} // closed by Close: interrupts slowdown holds
	wg   sync.WaitGroup
}

// New validates cfg and starts the workers.
func New(cfg Config) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Pool{cfg: cfg, now: cfg.Now, active: cfg.Workers, slowdown: 1, stop: make(chan struct{}),
		flows: make(map[string]*flow), jobs: list{at: allLinks}}
	if p.now == nil {
		p.now = time.Now
	}
	p.work = sync.NewCond(&p.mu)
	p.capacity = sync.NewCond(&p.mu)
	p.idle = sync.NewCond(&p.mu)
	p.wg.Add(cfg.Workers)
	for i := range cfg.Workers {
		go p.worker(i)
	}
	return p, nil
}

// Submit is SubmitFlow in the unnamed flow, weight 1.
func (p *Pool) Submit(ctx context.Context, cost time.Duration, mem int64, fn func()) (Result, error) {
	return p.SubmitFlow(ctx, Flow{}, cost, mem, fn)
}

// SubmitFlow queues fn, a job of flow (a key naming who it is for, such as
// a tenant), to run on a worker with expected cost (its own run time, which
// the pool stretches by the slowdown in force) and mem bytes of the
// MemoryBudget held while it runs (zero or less: none), and waits until it
// ran or was dropped. It returns nil only when fn ran. Refusals at arrival
// match ErrRefused; see the package doc for when each error is returned.
// If ctx ends while fn is running, SubmitFlow still waits for fn to return,
// so that fn may safely write variables the caller reads afterwards.
func (p *Pool) SubmitFlow(ctx context.Context, flow Flow, cost time.Duration, mem int64, fn func()) (Result, error) {
	mem = max(mem, 0)
	if p.cfg.Unguarded {
		flow = Flow{} // a plain server serves by arrival
	}
	now := p.now()
	p.mu.Lock()
	wait, err := p.admitLocked(ctx, now, flow, cost, mem)
	if err != nil {
		p.mu.Unlock()
		return Result{}, err
	}
	j := &job{ctx: ctx, fn: fn, cost: cost, mem: mem, enqueued: now, due: now.Add(wait), done: make(chan struct{})}
	p.pushLocked(j, flow)
	p.work.Signal()
	p.mu.Unlock()

	if p.cfg.Unguarded {
		<-j.done // a plain server finishes what it queued, caller or not
		return j.res, j.err
	}
	select {
	case <-j.done:
		return j.res, j.err
	case <-ctx.Done():
	}
	p.mu.Lock()
	if j.state == stateQueued {
		p.removeLocked(j)
		if p.memBlocked {
			// It may have been the job that those behind it waited for.
			p.work.Signal()
		}
		j.state = stateDone
		j.res.Wait = p.now().Sub(j.enqueued)
		p.mu.Unlock()
		return j.res, ErrCancelled
	}
	p.mu.Unlock()
	<-j.done // running: the worker finishes it
	return j.res, j.err
}

// admitLocked decides at arrival and returns the projected wait of the job
// it admits. It allocates nothing.
func (p *Pool) admitLocked(ctx context.Context, now time.Time, fl Flow, cost time.Duration, mem int64) (time.Duration, error) {
	switch {
	case p.draining || p.closed:
		return 0, ErrDraining
	case p.cfg.MemoryBudget > 0 && mem > p.cfg.MemoryBudget:
		return 0, ErrTooBig
	case p.cfg.Unguarded:
		return 0, nil
	}
	var victim *flow // the flow whose newest job a full queue gives up
	if p.queued >= p.cfg.QueueCapacity {
		if victim = p.pushOutVictimLocked(fl); victim == nil {
			return 0, ErrQueueFull
		}
	}
	wait := p.projectedWaitForLocked(fl)
	if wait > p.cfg.MaxQueueWait {
		return 0, ErrWaitTooLong
	}
	if dl, ok := ctx.Deadline(); ok {
		remaining := dl.Sub(now)
		cost = time.Duration(float64(cost) * p.slowdown)
		if cost > remaining {
			return 0, ErrDeadlineTooShort
		}
		if wait+cost > remaining {
			return 0, ErrWouldMissDeadline
		}
	}
	if victim != nil {
		p.pushOutLocked(victim)
	}
	return wait, nil
}

// longestLocked is the flow with the most jobs queued per unit of weight
// (the most queued cost per unit among those), or nil when none is queued.
func (p *Pool) longestLocked() *flow {
	var longest *flow
	for _, f := range p.flows {
		if longest == nil {
			longest = f
			continue
		}
		l, ll := f.length(f.queued), longest.length(longest.queued)
		if l > ll || l == ll && float64(f.queuedCost)/f.weight > float64(longest.queuedCost)/longest.weight {
			longest = f
		}
	}
	return longest
}

// pushOutVictimLocked is the flow whose newest job an arrival of fl may
// take the place of in a full queue, or nil: the longest flow (per unit of
// weight), when it stays at least as long as fl after giving it one place
// (weight 1 for both: at least two more jobs queued). A flow never pushes
// out its own jobs, and two flows cannot push each other's out in turn.
func (p *Pool) pushOutVictimLocked(fl Flow) *flow {
	own, w := 0, fl.weight()
	if f := p.flows[fl.Key]; f != nil {
		own = f.queued
	}
	longest := p.longestLocked()
	if longest == nil || longest.key == fl.Key {
		return nil
	}
	if longest.length(longest.queued-1) >= float64(own+1)/w {
		return longest
	}
	return nil
}

// pushOutLocked drops victim's newest job (ErrPushedOut).
func (p *Pool) pushOutLocked(victim *flow) {
	j := victim.jobs.tail
	p.removeLocked(j)
	j.res.Wait = p.now().Sub(j.enqueued)
	j.err = ErrPushedOut
	p.finishLocked(j)
}

// projectedWaitLocked estimates how long the queued work takes to start: the
// expected cost of every queued job spread over the jobs that can run at
// once.
func (p *Pool) projectedWaitLocked() time.Duration {
	return p.spreadLocked(p.queuedCost)
}

// projectedWaitForLocked estimates how long a job of flow, queued now, would
// wait under fair queueing. Levels are served cost per unit of weight. Its
// flow's next job starts at the flow's served level (the pool's virtual
// time, for a new flow), so the new job starts at that level plus its
// flow's queued work over its weight. Ahead of it: its own flow's queued
// work, and from every other flow the jobs that start at or below that
// level (ties go to the older job, the other flow's): the work between the
// flow's level and the new job's, times that flow's weight, plus the job
// that straddles it (a mean job of that flow), at most all the flow has
// queued.
func (p *Pool) projectedWaitForLocked(flow Flow) time.Duration {
	if p.queued == 0 {
		return 0
	}
	own := p.flows[flow.Key]
	start, ahead := p.vtime, time.Duration(0)
	if own != nil {
		start, ahead = own.served+float64(own.queuedCost)/flow.weight(), own.queuedCost
	}
	for _, f := range p.flows {
		if f == own || f.served > start {
			continue
		}
		mean := float64(f.queuedCost) / float64(f.queued)
		ahead += time.Duration(min(float64(f.queuedCost), (start-f.served)*f.weight+mean))
	}
	return p.spreadLocked(ahead)
}

// spreadLocked is how long work queued ahead takes to start: work spread
// over the jobs that can run at once, the active workers or, when memory
// binds first, the budget over the mean memory of the queued jobs.
func (p *Pool) spreadLocked(work time.Duration) time.Duration {
	if p.queued == 0 {
		return 0
	}
	par := float64(p.active)
	if p.cfg.MemoryBudget > 0 && p.queuedMem > 0 {
		fit := math.Floor(float64(p.cfg.MemoryBudget) * float64(p.queued) / float64(p.queuedMem))
		par = max(min(par, fit), 1)
	}
	return time.Duration(float64(work) * p.slowdown / par)
}

// ProjectedWait is the queue wait of all the queued work: what a job of a
// flow that already has most of the queue would expect.
func (p *Pool) ProjectedWait() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.projectedWaitLocked()
}

func (p *Pool) pushLocked(j *job, fl Flow) {
	p.arrivals++
	j.seq = p.arrivals
	p.jobs.push(j)
	p.queued++
	p.queuedCost += j.cost
	p.queuedMem += j.mem

	f := p.flows[fl.Key]
	if f == nil {
		f = &flow{key: fl.Key, served: p.vtime, jobs: list{at: inFlowLinks}}
		p.flows[fl.Key] = f
	}
	f.weight = fl.weight()
	j.flow = f
	f.jobs.push(j)
	f.queued++
	f.queuedCost += j.cost
}

func (p *Pool) removeLocked(j *job) {
	p.jobs.remove(j)
	p.queued--
	p.queuedCost -= j.cost
	p.queuedMem -= j.mem

	f := j.flow
	f.jobs.remove(j)
	f.queued--
	f.queuedCost -= j.cost
	if f.queued == 0 {
		// Forgotten: what it was served gives it no debt when it returns.
		delete(p.flows, f.key)
	}
	if p.queued == 0 {
		p.lifo = false
		p.queuedCost = 0
		p.queuedMem = 0
	}
	p.idle.Broadcast()
}

// pickLocked takes the next job to run, or returns nil when none may start
// now. Service order is by flow, the least served first, and inside a flow
// oldest first, or newest first while the queue stands (see
// updateLIFOLocked); ties between flows go the same way, to the flow with
// the oldest job, or with the newest. Walking that order,
// it drops (ErrExpired) every job whose deadline can no longer be met, and
// takes the first job that fits the memory left, unless a job before it
// that does not fit has already been passed over Workers times: then
// nothing starts until that one fits. The flow of the job taken is counted
// as served its expected cost.
func (p *Pool) pickLocked(now time.Time) *job {
	if p.jobs.head == nil {
		return nil
	}
	p.updateLIFOLocked(now)
	p.order = p.order[:0]
	for _, f := range p.flows {
		p.order = append(p.order, f)
	}
	if len(p.order) > 1 {
		slices.SortFunc(p.order, func(a, b *flow) int {
			if c := cmp.Compare(a.served, b.served); c != 0 {
				return c
			}
			if p.lifo { // late: the flow with the newest job first
				return cmp.Compare(b.jobs.tail.seq, a.jobs.tail.seq)
			}
			return cmp.Compare(a.jobs.head.seq, b.jobs.head.seq)
		})
	}
	defer func() { // hold no finished job or forgotten flow
		clear(p.order)
		clear(p.passed)
		p.passed = p.passed[:0]
	}()
	for _, f := range p.order {
		for j := p.firstInLocked(f); j != nil; {
			next := p.afterInLocked(j)
			switch {
			case p.expiredLocked(j, now):
				p.removeLocked(j)
				j.res.Wait = now.Sub(j.enqueued)
				j.err = ErrExpired
				p.finishLocked(j)
			case p.fitsLocked(j):
				for _, b := range p.passed {
					b.bypassed++
				}
				p.vtime = max(p.vtime, f.served)
				// At least a nanosecond, so that free jobs take turns too.
				f.served += max(float64(j.cost), 1) / f.weight
				p.removeLocked(j)
				return j
			case j.bypassed >= p.cfg.Workers:
				p.memBlocked = true
				return nil
			default:
				p.memBlocked = true
				p.passed = append(p.passed, j)
			}
			j = next
		}
	}
	return nil
}

// updateLIFOLocked sets the service order: newest first while the queue is
// late (its oldest job is more than LIFOAfter past the start it was
// projected at admission) and stands (more than LIFOAfter/4 of work is
// queued); oldest first otherwise.
//
// Admission promised each job a start time — it refused the arrivals whose
// projected wait would overrun their deadline or MaxQueueWait — and oldest
// first keeps those promises, however long the queue: at 0.9 C a queue of a
// few hundred milliseconds is the queue doing its job, and serving it newest
// first starved its oldest jobs to their callers' deadlines (a p99 of 2–3 s
// in the lab where FIFO had 0.2–0.4 s). Newest first is for when the
// promises already broke: a stall, a slowdown, a CPU cut made the queued
// work take longer than projected, the oldest callers are the likeliest to
// have left, and the newest can still be served in time. The old jobs are
// dropped when their deadlines can no longer be met, or served once the
// late work is gone or little work is left.
func (p *Pool) updateLIFOLocked(now time.Time) {
	if p.cfg.Unguarded || p.jobs.head == nil {
		return
	}
	p.lifo = now.Sub(p.jobs.head.due) > p.cfg.LIFOAfter && p.projectedWaitLocked() > p.cfg.LIFOAfter/4
}

// firstInLocked is f's first job in service order.
func (p *Pool) firstInLocked(f *flow) *job {
	if p.lifo {
		return f.jobs.tail
	}
	return f.jobs.head
}

// afterInLocked is the job after j in its flow's service order.
func (p *Pool) afterInLocked(j *job) *job {
	if p.lifo {
		return j.inFlow.prev
	}
	return j.inFlow.next
}

func (p *Pool) fitsLocked(j *job) bool {
	return p.cfg.MemoryBudget == 0 || p.memInUse+j.mem <= p.cfg.MemoryBudget
}

// expiredLocked reports whether j's remaining deadline is shorter than its
// expected cost under the slowdown in force.
func (p *Pool) expiredLocked(j *job, now time.Time) bool {
	if p.cfg.Unguarded {
		return false
	}
	dl, ok := j.ctx.Deadline()
	return ok && dl.Sub(now) < time.Duration(float64(j.cost)*p.slowdown)
}

func (p *Pool) worker(idx int) {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		var j *job
		for j == nil {
			switch {
			case p.closed:
				p.mu.Unlock()
				return
			case idx >= p.active:
				p.capacity.Wait()
			default:
				if j = p.pickLocked(p.now()); j == nil {
					p.work.Wait()
				}
			}
		}
		now := p.now()
		j.state = stateRunning
		j.res.Wait = now.Sub(j.enqueued)
		if p.memBlocked && p.queued > 0 {
			// Another idle worker may find a job that fits too: picking
			// can drop expired jobs, which lifts a block on those behind.
			p.work.Signal()
		}
		if j.ctx.Err() != nil && !p.cfg.Unguarded {
			j.err = ErrCancelled
			p.finishLocked(j)
			p.mu.Unlock()
			continue
		}
		p.busy++
		p.memInUse += j.mem
		p.peakMem = max(p.peakMem, p.memInUse)
		slowdown := p.slowdown
		p.mu.Unlock()

		start := p.now()
		j.fn()
		ran := p.now().Sub(start)
		if slowdown > 1 {
			// A slower node holds the job's memory for longer, too.
			p.hold(time.Duration(float64(ran) * (slowdown - 1)))
		}
		j.res.Service = p.now().Sub(start)
		j.res.Ran = ran

		p.mu.Lock()
		p.busy--
		p.memInUse -= j.mem
		p.completed++
		if p.memBlocked && j.mem > 0 && p.queued > 0 {
			// Memory freed: jobs waiting for it may start on any idle
			// worker. Those that still do not fit set memBlocked again.
			p.memBlocked = false
			p.work.Broadcast()
		}
		p.finishLocked(j)
		p.mu.Unlock()
	}
}

// hold keeps a worker occupied without using CPU, as a slower node would.
func (p *Pool) hold(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.stop:
	}
}

func (p *Pool) finishLocked(j *job) {
	j.state = stateDone
	close(j.done)
	p.idle.Broadcast()
}

// SetCapacity runs the pool with active workers (clamped to [1, Workers])
// and stretches every job's service time by slowdown (clamped to ≥ 1).
// Workers beyond active finish the job they hold and then idle.
func (p *Pool) SetCapacity(active int, slowdown float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.active = min(max(active, 1), p.cfg.Workers)
	p.slowdown = max(slowdown, 1)
	// Wake everyone: workers now inactive must move to the capacity wait, so
	// that a later work signal cannot be swallowed by a worker that may not
	// take work.
	p.capacity.Broadcast()
	p.work.Broadcast()
}

// Stats returns a snapshot.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Workers:    p.cfg.Workers,
		Active:     p.active,
		Busy:       p.busy,
		Queued:     p.queued,
		QueuedCost: p.queuedCost,
		LIFO:       p.lifo,
		Draining:   p.draining || p.closed,
		Slowdown:   p.slowdown,
		Completed:  p.completed,

		MemoryBudget: p.cfg.MemoryBudget,
		MemoryInUse:  p.memInUse,
		PeakMemory:   p.peakMem,
		QueuedMemory: p.queuedMem,
	}
}

// Drain stops admitting new work and waits until every queued job has run or
// been dropped and no job is running, or until ctx ends (then it returns
// ctx's error). Queued jobs keep their normal treatment: a job whose deadline
// can no longer be met is dropped at dequeue rather than run.
func (p *Pool) Drain(ctx context.Context) error {
	p.mu.Lock()
	p.draining = true
	p.mu.Unlock()

	stopWake := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.idle.Broadcast()
		p.mu.Unlock()
	})
	defer stopWake()

	p.mu.Lock()
	defer p.mu.Unlock()
	for p.queued > 0 || p.busy > 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.idle.Wait()
	}
	return nil
}

// Close stops the workers and waits for them. Jobs still queued fail with
// ErrClosed; a running job is allowed to finish (a slowdown hold is cut
// short). Close is idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for p.jobs.head != nil {
		j := p.jobs.head
		p.removeLocked(j)
		j.err = ErrClosed
		p.finishLocked(j)
	}
	close(p.stop)
	p.work.Broadcast()
	p.capacity.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}
