package workpool

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a manually advanced clock.
type fakeClock struct{ ns atomic.Int64 }

// bounded is the test's context with a deadline a minute away: a Submit
// that a regression leaves waiting fails the test (ErrCancelled) instead of
// hanging it until go test's timeout. The pool's fake clock starts at the
// real time, so the deadline means the same to it.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func newPool(t *testing.T, cfg Config) *Pool {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func baseConfig(clk *fakeClock) Config {
	return Config{Workers: 1, QueueCapacity: 16, MaxQueueWait: time.Hour, LIFOAfter: 100 * time.Millisecond, Now: clk.Now}
}

// waitFor polls the pool's state until cond holds; it never decides a result.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// blocker occupies one worker until released.
type blocker struct {
	release chan struct{}
	done    chan error
}

func block(t *testing.T, p *Pool) *blocker {
	t.Helper()
	b := &blocker{release: make(chan struct{}), done: make(chan error, 1)}
	// A test that fails before Release must not leave Close waiting for
	// this worker for ever.
	t.Cleanup(func() {
		select {
		case <-b.release:
		default:
			close(b.release)
		}
	})
	before := p.Stats().Busy
	go func() {
		_, err := p.Submit(bounded(t), time.Millisecond, 0, func() { <-b.release })
		b.done <- err
	}()
	waitFor(t, "blocker to run", func() bool { return p.Stats().Busy == before+1 })
	return b
}

func (b *blocker) Release(t *testing.T) {
	t.Helper()
	close(b.release)
	if err := <-b.done; err != nil {
		t.Fatalf("blocker: %v", err)
	}
}

// recorder notes the order in which jobs ran and how each Submit ended.
type recorder struct {
	mu    sync.Mutex
	order []int
	errs  map[int]error
	wg    sync.WaitGroup
}

func newRecorder() *recorder { return &recorder{errs: map[int]error{}} }

// submit queues job id and waits until it is visibly queued, so that
// successive calls enqueue in call order.
func (r *recorder) submit(t *testing.T, p *Pool, ctx context.Context, id int, cost time.Duration) {
	t.Helper()
	r.submitAs(t, p, ctx, "", id, cost)
}

// submitAs is submit in flow.
func (r *recorder) submitAs(t *testing.T, p *Pool, ctx context.Context, flow string, id int, cost time.Duration) {
	t.Helper()
	r.submitIn(t, p, ctx, Flow{Key: flow}, id, cost)
}

// submitIn is submit in flow, with its weight.
func (r *recorder) submitIn(t *testing.T, p *Pool, ctx context.Context, flow Flow, id int, cost time.Duration) {
	t.Helper()
	before := p.Stats().Queued
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_, err := p.SubmitFlow(ctx, flow, cost, 0, func() {
			r.mu.Lock()
			r.order = append(r.order, id)
			r.mu.Unlock()
		})
		r.mu.Lock()
		r.errs[id] = err
		r.mu.Unlock()
	}()
	waitFor(t, "job to queue", func() bool { return p.Stats().Queued == before+1 })
}

// waitGroup waits for every submitted job to return from Submit, and fails
// the test if one has not within 10 s: a pool that loses a job must fail
// its test, not hang it until go test's timeout.
func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a submitted job never returned from Submit within 10 s")
	}
}

func (r *recorder) wait(t *testing.T) ([]int, map[int]error) {
	t.Helper()
	waitGroup(t, &r.wg)
	r.mu.Lock()
	defer r.mu.Unlock()
	order := r.order
	errs := r.errs
	r.order, r.errs = nil, map[int]error{}
	return order, errs
}

func TestAdaptiveLIFO(t *testing.T) {
	clk := newFakeClock()
	p := newPool(t, baseConfig(clk))
	r := newRecorder()

	// Short queue, short waits: oldest first.
	b := block(t, p)
	for id := 1; id <= 4; id++ {
		r.submit(t, p, context.Background(), id, time.Millisecond)
	}
	b.Release(t)
	if order, _ := r.wait(t); !cmp.Equal(order, []int{1, 2, 3, 4}) {
		t.Errorf("short waits: ran %v, want FIFO [1 2 3 4]", order)
	}

	// The queue is late (its oldest job, projected to start at once, has
	// waited a second: the blocked worker is a stall) and stands (150 ms of
	// work, LIFOAfter 100 ms): newest first, and the pool stays newest-first
	// while more than LIFOAfter/4 of work is queued, here to the end.
	b = block(t, p)
	for id := 1; id <= 3; id++ {
		r.submit(t, p, context.Background(), id, 30*time.Millisecond)
	}
	clk.Advance(time.Second)
	for id := 4; id <= 5; id++ {
		r.submit(t, p, context.Background(), id, 30*time.Millisecond)
	}
	b.Release(t)
	if order, _ := r.wait(t); !cmp.Equal(order, []int{5, 4, 3, 2, 1}) {
		t.Errorf("built-up queue: ran %v, want LIFO [5 4 3 2 1]", order)
	}
	if p.Stats().LIFO {
		t.Error("pool still serving newest first after the queue drained")
	}

	// Drained: oldest first again.
	b = block(t, p)
	for id := 1; id <= 3; id++ {
		r.submit(t, p, context.Background(), id, time.Millisecond)
	}
	b.Release(t)
	if order, _ := r.wait(t); !cmp.Equal(order, []int{1, 2, 3}) {
		t.Errorf("after draining: ran %v, want FIFO [1 2 3]", order)
	}

	// Late but short: the oldest job waited past LIFOAfter (a stall), yet
	// the whole queue is 3 ms of work. Oldest first: serving it newest first
	// would starve the old jobs for nothing.
	b = block(t, p)
	for id := 1; id <= 3; id++ {
		r.submit(t, p, context.Background(), id, time.Millisecond)
	}
	clk.Advance(time.Second)
	b.Release(t)
	if order, _ := r.wait(t); !cmp.Equal(order, []int{1, 2, 3}) {
		t.Errorf("aged short queue: ran %v, want FIFO [1 2 3]", order)
	}

	// Newest first ends when the standing work is gone, not when the queue
	// is empty: once job 4 (200 ms) has run, 3 ms of work is left, and the
	// old jobs are served oldest first.
	b = block(t, p)
	for id := 1; id <= 3; id++ {
		r.submit(t, p, context.Background(), id, time.Millisecond)
	}
	clk.Advance(time.Second)
	r.submit(t, p, context.Background(), 4, 200*time.Millisecond)
	b.Release(t)
	if order, _ := r.wait(t); !cmp.Equal(order, []int{4, 1, 2, 3}) {
		t.Errorf("standing queue that drained below LIFOAfter/4: ran %v, want [4 1 2 3]", order)
	}

	// Long but on time: jobs queued behind 250 ms of work start when they
	// were projected to, 260 ms after they arrived. The queue's oldest job
	// has waited past LIFOAfter and 90 ms of work stands, but admission's
	// promises hold: oldest first, as promised.
	b = block(t, p)
	hold, started, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := p.Submit(bounded(t), 250*time.Millisecond, 0, func() { close(started); <-hold })
		held <- err
	}()
	waitFor(t, "the 250 ms job to queue", func() bool { return p.Stats().Queued == 1 })
	for id := 1; id <= 3; id++ {
		r.submit(t, p, context.Background(), id, 30*time.Millisecond)
	}
	b.Release(t)
	<-started
	clk.Advance(260 * time.Millisecond) // it ran for its 250 ms, and a little more
	close(hold)
	if err := <-held; err != nil {
		t.Fatalf("the 250 ms job: %v", err)
	}
	if order, _ := r.wait(t); !cmp.Equal(order, []int{1, 2, 3}) {
		t.Errorf("a long queue on time: ran %v, want FIFO [1 2 3]", order)
	}
}

func TestDroppedAtDequeueNeverRuns(t *testing.T) {
	clk := newFakeClock()
	p := newPool(t, baseConfig(clk))
	r := newRecorder()

	// Deadlines are far away in real time; only the pool's (fake) clock moves.
	start := clk.Now()
	short, cancel1 := context.WithDeadline(context.Background(), start.Add(time.Hour))
	defer cancel1()
	long, cancel2 := context.WithDeadline(context.Background(), start.Add(3*time.Hour))
	defer cancel2()

	b := block(t, p)
	r.submit(t, p, short, 1, time.Minute)
	r.submit(t, p, long, 2, time.Minute)
	r.submit(t, p, short, 3, time.Minute)
	// 59m30s later job 1 and 3 have 30s left but cost a minute; job 2 has 2h.
	clk.Advance(59*time.Minute + 30*time.Second)
	b.Release(t)
	order, errs := r.wait(t)
	if !cmp.Equal(order, []int{2}) {
		t.Errorf("ran %v, want only [2]", order)
	}
	for _, id := range []int{1, 3} {
		if !errors.Is(errs[id], ErrExpired) {
			t.Errorf("job %d: err = %v, want ErrExpired", id, errs[id])
		}
	}
	if errs[2] != nil {
		t.Errorf("job 2: err = %v, want nil", errs[2])
	}
	if got := p.Stats().Completed; got != 2 { // blocker + job 2
		t.Errorf("completed = %d, want 2", got)
	}
}

func TestCancelledWhileQueuedNeverRuns(t *testing.T) {
	clk := newFakeClock()
	p := newPool(t, baseConfig(clk))
	r := newRecorder()

	ctx, cancel := context.WithCancel(context.Background())
	b := block(t, p)
	r.submit(t, p, ctx, 1, time.Millisecond)
	r.submit(t, p, context.Background(), 2, time.Millisecond)
	cancel()
	waitFor(t, "cancelled job to leave the queue", func() bool { return p.Stats().Queued == 1 })
	b.Release(t)
	order, errs := r.wait(t)
	if !cmp.Equal(order, []int{2}) {
		t.Errorf("ran %v, want only [2]", order)
	}
	if !errors.Is(errs[1], ErrCancelled) {
		t.Errorf("cancelled job: err = %v, want ErrCancelled", errs[1])
	}
}

func TestRefusedAtArrival(t *testing.T) {
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.QueueCapacity = 3
	cfg.MaxQueueWait = 2500 * time.Millisecond
	p := newPool(t, cfg)
	r := newRecorder()

	b := block(t, p)
	r.submit(t, p, context.Background(), 1, time.Second)
	r.submit(t, p, context.Background(), 2, time.Second) // projected wait now 2s

	deadline := func(d time.Duration) context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(d))
		t.Cleanup(cancel)
		return ctx
	}
	ran := false
	tests := []struct {
		name string
		ctx  context.Context
		cost time.Duration
		want error
	}{
		{"cost alone exceeds the deadline", deadline(time.Hour), 2 * time.Hour, ErrDeadlineTooShort},
		{"wait plus cost exceeds the deadline", deadline(2500 * time.Millisecond), time.Second, ErrWouldMissDeadline},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Submit(tt.ctx, tt.cost, 0, func() { ran = true })
			if !errors.Is(err, tt.want) || !errors.Is(err, ErrRefused) {
				t.Errorf("err = %v, want %v (and ErrRefused)", err, tt.want)
			}
		})
	}
	r.submit(t, p, context.Background(), 3, time.Second) // projected wait now 3s
	if _, err := p.Submit(bounded(t), time.Second, 0, func() { ran = true }); !errors.Is(err, ErrQueueFull) {
		t.Errorf("full queue: err = %v, want ErrQueueFull", err)
	}
	// Make room in the queue: the wait projection alone must still refuse.
	p.SetCapacity(1, 1)
	cfgWait := p.ProjectedWait()
	if cfgWait != 3*time.Second {
		t.Fatalf("projected wait = %v, want 3s", cfgWait)
	}
	b.Release(t)
	r.wait(t)
	if ran {
		t.Error("a refused job ran")
	}

	// Queue-wait cap on its own.
	b = block(t, p)
	r.submit(t, p, context.Background(), 1, 2*time.Second)
	r.submit(t, p, context.Background(), 2, time.Second) // projected 3s > 2.5s
	if _, err := p.Submit(bounded(t), time.Millisecond, 0, func() { ran = true }); !errors.Is(err, ErrWaitTooLong) {
		t.Errorf("long projected wait: err = %v, want ErrWaitTooLong", err)
	}
	b.Release(t)
	r.wait(t)
	if ran {
		t.Error("a refused job ran")
	}
}

func TestDrain(t *testing.T) {
	clk := newFakeClock()
	p := newPool(t, baseConfig(clk))
	r := newRecorder()

	b := block(t, p)
	r.submit(t, p, context.Background(), 1, time.Millisecond)
	drained := make(chan error, 1)
	go func() { drained <- p.Drain(bounded(t)) }()
	waitFor(t, "drain to start", func() bool { return p.Stats().Draining })
	if _, err := p.Submit(bounded(t), time.Millisecond, 0, func() {}); !errors.Is(err, ErrDraining) {
		t.Errorf("Submit while draining: %v, want ErrDraining", err)
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with work still queued", err)
	default:
	}
	b.Release(t)
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if order, _ := r.wait(t); !cmp.Equal(order, []int{1}) {
		t.Errorf("queued work during drain: ran %v, want [1]", order)
	}

	// Drain bounded by its context.
	p2 := newPool(t, baseConfig(clk))
	b2 := block(t, p2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p2.Drain(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Drain with a cancelled context: %v, want context.Canceled", err)
	}
	b2.Release(t)
}

func TestSetCapacity(t *testing.T) {
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.Workers = 2
	p := newPool(t, cfg)
	p.SetCapacity(1, 1)
	r := newRecorder()

	b := block(t, p)
	r.submit(t, p, context.Background(), 1, time.Millisecond)
	if s := p.Stats(); s.Busy != 1 || s.Queued != 1 || s.Active != 1 {
		t.Fatalf("at half capacity: %+v, want 1 busy, 1 queued, 1 active", s)
	}
	p.SetCapacity(2, 1)
	if order, _ := r.wait(t); !cmp.Equal(order, []int{1}) {
		t.Errorf("after restoring capacity: ran %v, want [1]", order)
	}
	b.Release(t)

	// Slowdown stretches the projected wait.
	p.SetCapacity(1, 3)
	b = block(t, p)
	r.submit(t, p, context.Background(), 1, time.Second)
	if got := p.ProjectedWait(); got != 3*time.Second {
		t.Errorf("projected wait with slowdown 3 = %v, want 3s", got)
	}
	b.Release(t)
	r.wait(t)
}

func TestCloseFailsQueuedJobs(t *testing.T) {
	clk := newFakeClock()
	p, err := New(baseConfig(clk))
	if err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	b := block(t, p)
	r.submit(t, p, context.Background(), 1, time.Millisecond)
	go func() {
		waitFor(t, "close", func() bool { return p.Stats().Queued == 0 })
		close(b.release)
	}()
	p.Close()
	<-b.done
	order, errs := r.wait(t)
	if len(order) != 0 || !errors.Is(errs[1], ErrClosed) {
		t.Errorf("after Close: ran %v, err %v; want nothing ran and ErrClosed", order, errs[1])
	}
	if _, err := p.Submit(bounded(t), time.Millisecond, 0, func() {}); !errors.Is(err, ErrRefused) {
		t.Errorf("Submit after Close: %v, want a refusal", err)
	}
}

func TestValidate(t *testing.T) {
	good := Config{Workers: 1, QueueCapacity: 1, MaxQueueWait: time.Second, LIFOAfter: time.Second}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"Workers":       func(c *Config) { c.Workers = 0 },
		"QueueCapacity": func(c *Config) { c.QueueCapacity = 0 },
		"MaxQueueWait":  func(c *Config) { c.MaxQueueWait = 0 },
		"LIFOAfter":     func(c *Config) { c.LIFOAfter = 0 },
	} {
		c := good
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Validate() = %v, want an error naming the field", name, err)
		}
	}
}

// goneCtx is a caller's context that reports it ended without ever closing
// its Done channel: what a worker sees when it picks a job in the moment
// between the caller's context ending and Submit noticing.
type goneCtx struct {
	context.Context
	gone atomic.Bool
}

func (c *goneCtx) Done() <-chan struct{} { return nil }
func (c *goneCtx) Err() error {
	if c.gone.Load() {
		return context.Canceled
	}
	return nil
}

// A worker that picks a queued job whose caller has left does not run it,
// even when Submit has not yet taken it out of the queue: the check at
// pick is the last line between a departed caller and a hash.
func TestCallerGoneWhenPickedNeverRuns(t *testing.T) {
	clk := newFakeClock()
	p := newPool(t, baseConfig(clk))
	r := newRecorder()
	b := block(t, p)
	ctx := &goneCtx{Context: context.Background()}
	r.submit(t, p, ctx, 1, time.Millisecond)
	r.submit(t, p, context.Background(), 2, time.Millisecond)
	ctx.gone.Store(true)
	b.Release(t)
	order, errs := r.wait(t)
	if !cmp.Equal(order, []int{2}) {
		t.Errorf("ran %v, want only [2]", order)
	}
	if !errors.Is(errs[1], ErrCancelled) {
		t.Errorf("the departed caller's job: err = %v, want ErrCancelled", errs[1])
	}
}
