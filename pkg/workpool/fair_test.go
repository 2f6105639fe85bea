package workpool

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Two flows queued behind a busy worker take turns, whatever their order
// of arrival: the flow that queued six jobs first does not make the other
// wait for all six.
func TestFlowsTakeTurns(t *testing.T) {
	clk := newFakeClock()
	p := newPool(t, baseConfig(clk))
	b := block(t, p)
	r := newRecorder()
	ctx := bounded(t)
	for i := range 6 {
		r.submitAs(t, p, ctx, "a", 10+i, time.Millisecond)
	}
	for i := range 3 {
		r.submitAs(t, p, ctx, "b", 20+i, time.Millisecond)
	}
	b.Release(t)
	order, errs := r.wait(t)
	// Ties go to the flow whose oldest job is oldest: a, then b, in turn.
	if want := []int{10, 20, 11, 21, 12, 22, 13, 14, 15}; !cmp.Equal(order, want) {
		t.Errorf("service order %v, want %v", order, want)
	}
	for id, err := range errs {
		if err != nil {
			t.Errorf("job %d: %v", id, err)
		}
	}
}

// A flow that starts queueing joins at the service level of the flows being
// served, not at nothing: the time it had no work queued earns it no run of
// the workers ahead of a flow that kept them busy.
func TestNewFlowEarnsNoCredit(t *testing.T) {
	clk := newFakeClock()
	p := newPool(t, baseConfig(clk))
	b := block(t, p)
	r := newRecorder()
	ctx := bounded(t)
	r.submitAs(t, p, ctx, "a", 10, time.Millisecond)
	gate, held := make(chan struct{}), make(chan error, 1)
	t.Cleanup(func() { close(gate) })
	go func() {
		_, err := p.SubmitFlow(ctx, Flow{Key: "a"}, time.Millisecond, 0, func() { <-gate })
		held <- err
	}()
	waitFor(t, "the gated job to queue", func() bool { return p.Stats().Queued == 2 })
	r.submitAs(t, p, ctx, "a", 12, time.Millisecond)
	r.submitAs(t, p, ctx, "a", 13, time.Millisecond)
	b.Release(t)
	// a has run two jobs when b arrives.
	waitFor(t, "the gated job to run", func() bool { return p.Stats().Busy == 1 && p.Stats().Queued == 2 })
	for i := range 3 {
		r.submitAs(t, p, ctx, "b", 20+i, time.Millisecond)
	}
	gate <- struct{}{}
	if err := recv(t, held); err != nil {
		t.Fatal(err)
	}
	if order, _ := r.wait(t); !cmp.Equal(order, []int{10, 20, 12, 21, 13, 22}) {
		t.Errorf("service order %v, want b's first job and then turns", order)
	}
}

// Flows share the workers by expected cost, not by jobs: a flow whose jobs
// cost five times as much starts one for every five of the other's.
func TestFlowsShareByCost(t *testing.T) {
	clk := newFakeClock()
	p := newPool(t, baseConfig(clk))
	b := block(t, p)
	r := newRecorder()
	ctx := bounded(t)
	for i := range 4 {
		r.submitAs(t, p, ctx, "dear", 100+i, 5*time.Millisecond)
	}
	for i := range 12 {
		r.submitAs(t, p, ctx, "cheap", i, time.Millisecond)
	}
	b.Release(t)
	order, _ := r.wait(t)
	// While both have work queued, the time each was served differs by at
	// most one dear job.
	var dear, cheap time.Duration
	for _, id := range order {
		if id >= 100 {
			dear += 5 * time.Millisecond
		} else {
			cheap += time.Millisecond
		}
		if dear < 4*5*time.Millisecond && cheap < 12*time.Millisecond {
			if d := dear - cheap; d > 5*time.Millisecond || d < -5*time.Millisecond {
				t.Fatalf("after %v: dear served %v, cheap %v: want within one dear job", order, dear, cheap)
			}
		}
	}
}

// Weighted flows share the workers in proportion to their weights: while
// both have work queued, a flow of weight 3 starts three jobs for every one
// of a flow of weight 1, and a weight of zero counts as 1.
func TestWeightsShareTheWorkers(t *testing.T) {
	clk := newFakeClock()
	p := newPool(t, baseConfig(clk))
	b := block(t, p)
	r := newRecorder()
	ctx := bounded(t)
	for i := range 9 {
		r.submitIn(t, p, ctx, Flow{Key: "gold", Weight: 3}, 100+i, time.Millisecond)
	}
	for i := range 5 {
		r.submitIn(t, p, ctx, Flow{Key: "plain"}, i, time.Millisecond)
	}
	b.Release(t)
	order, _ := r.wait(t)
	// While both have work queued, gold's service over 3 and plain's
	// differ by at most one job.
	gold, plain := 0, 0
	for _, id := range order {
		if id >= 100 {
			gold++
		} else {
			plain++
		}
		if gold < 9 && plain < 5 {
			if d := float64(gold)/3 - float64(plain); d > 1 || d < -1 {
				t.Fatalf("after %v: gold started %d, plain %d: want three to one", order, gold, plain)
			}
		}
	}
	if gold != 9 || plain != 5 {
		t.Errorf("started %d gold and %d plain jobs, want 9 and 5", gold, plain)
	}
}

// A weighted flow's queued work counts for what its weight lets it take:
// a weight-1 arrival's second job waits behind up to three of a weight-3
// flow's jobs for each of its own, not one.
func TestProjectedWaitWeighs(t *testing.T) {
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.MaxQueueWait = time.Hour
	p := newPool(t, cfg)
	b := block(t, p)
	r := newRecorder()
	for i := range 6 {
		r.submitIn(t, p, t.Context(), Flow{Key: "gold", Weight: 3}, 100+i, time.Minute)
	}
	r.submitAs(t, p, t.Context(), "plain", 0, time.Minute)
	p.mu.Lock()
	got := p.projectedWaitForLocked(Flow{Key: "plain"})
	p.mu.Unlock()
	// Its own queued minute, and gold's work up to the same level: three
	// minutes, plus the job that straddles it.
	if want := 5 * time.Minute; got != want {
		t.Errorf("plain's second job projected to wait %v, want %v", got, want)
	}
	b.Release(t)
	r.wait(t)
}

// A full queue judges length per unit of weight. A weight-4 flow with
// three jobs queued is shorter than a weight-1 flow with one, so the light
// flow cannot push it out (unweighted, three against one would). With two
// each, the heavy flow's arrival pushes out the light one's newest
// (unweighted, two against two would not).
func TestPushOutWeighsFlows(t *testing.T) {
	gold := Flow{Key: "gold", Weight: 4}
	fill := func(golds, plains int) (*Pool, *blocker, []<-chan error, []<-chan error) {
		clk := newFakeClock()
		cfg := baseConfig(clk)
		cfg.QueueCapacity = golds + plains
		p := newPool(t, cfg)
		b := block(t, p)
		var g, pl []<-chan error
		for range golds {
			g = append(g, goSubmitIn(p, bounded(t), gold, time.Millisecond))
			waitFor(t, "gold job to queue", func() bool { return p.Stats().Queued == len(g) })
		}
		for range plains {
			pl = append(pl, goSubmit(p, bounded(t), "plain", time.Millisecond))
			waitFor(t, "plain job to queue", func() bool { return p.Stats().Queued == len(g)+len(pl) })
		}
		return p, b, g, pl
	}
	drain := func(b *blocker, chs ...<-chan error) {
		b.Release(t)
		for i, ch := range chs {
			if err := recv(t, ch); err != nil {
				t.Errorf("job %d: %v", i, err)
			}
		}
	}

	p, b, g, pl := fill(3, 1)
	if _, err := p.SubmitFlow(bounded(t), Flow{Key: "plain"}, time.Millisecond, 0, func() {}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("plain's second beside three of weight 4: %v, want ErrQueueFull", err)
	}
	drain(b, append(g, pl...)...)

	p, b, g, pl = fill(2, 2)
	g = append(g, goSubmitIn(p, bounded(t), gold, time.Millisecond))
	if err := recv(t, pl[1]); !errors.Is(err, ErrPushedOut) {
		t.Errorf("plain's newest job: %v, want ErrPushedOut", err)
	}
	drain(b, append(g, pl[0])...)
}

// An arrival's projected wait is what fair queueing will make it wait: a
// flow with nothing queued is admitted with a deadline that the whole
// queue's work would overrun, and the flow that queued that work is not.
func TestProjectedWaitIsPerFlow(t *testing.T) {
	// Deadlines are far away in real time; only the pool's (fake) clock moves.
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.MaxQueueWait = 5 * time.Minute
	p := newPool(t, cfg)
	b := block(t, p)
	r := newRecorder()
	for i := range 6 {
		r.submitAs(t, p, t.Context(), "flood", i, time.Minute)
	}
	if _, err := p.SubmitFlow(t.Context(), Flow{Key: "flood"}, time.Minute, 0, func() {}); !errors.Is(err, ErrWaitTooLong) {
		t.Errorf("the flood's seventh job: %v, want ErrWaitTooLong", err)
	}
	if _, err := p.SubmitFlow(deadlineIn(t, clk, 3*time.Minute), Flow{Key: "flood"}, time.Minute, 0, func() {}); !errors.Is(err, ErrRefused) {
		t.Errorf("a flood job with 3 min left: %v, want refused", err)
	}
	// Its wait: one flood job (1 min) before its own minute.
	quiet := goSubmit(p, deadlineIn(t, clk, 3*time.Minute), "quiet", time.Minute)
	waitFor(t, "the quiet job to queue", func() bool { return p.Stats().Queued == 7 })
	if got, want := p.ProjectedWait(), 7*time.Minute; got != want {
		t.Errorf("ProjectedWait = %v, want %v (all the queued work)", got, want)
	}
	b.Release(t)
	if err := recv(t, quiet); err != nil {
		t.Errorf("quiet job: %v", err)
	}
	r.wait(t)
}

// A full queue takes an arrival from a flow with fewer jobs queued by
// pushing out the longest flow's newest job; flows never push out their
// own, and two flows with queues of one length cannot push each other out.
func TestFullQueuePushesOutTheLongestFlow(t *testing.T) {
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.QueueCapacity = 4
	p := newPool(t, cfg)
	b := block(t, p)
	ctx := bounded(t)
	flood := make([]<-chan error, 4)
	for i := range flood {
		flood[i] = goSubmit(p, ctx, "flood", time.Millisecond)
		waitFor(t, "flood job to queue", func() bool { return p.Stats().Queued == i+1 })
	}
	if _, err := p.SubmitFlow(ctx, Flow{Key: "flood"}, time.Millisecond, 0, func() {}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("the flood's fifth: %v, want ErrQueueFull", err)
	}
	var quiet []<-chan error
	for i := range 2 {
		quiet = append(quiet, goSubmit(p, ctx, "quiet", time.Millisecond))
		// Each push-out takes the flood's newest.
		if err := recv(t, flood[3-i]); !errors.Is(err, ErrPushedOut) {
			t.Fatalf("flood job %d: %v, want ErrPushedOut", 3-i, err)
		}
		waitFor(t, "quiet job to queue", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.flows["quiet"] != nil && p.flows["quiet"].queued == i+1
		})
	}
	// Two each: neither may push out the other.
	if _, err := p.SubmitFlow(ctx, Flow{Key: "quiet"}, time.Millisecond, 0, func() {}); !errors.Is(err, ErrQueueFull) {
		t.Errorf("the quiet flow's third: %v, want ErrQueueFull", err)
	}
	b.Release(t)
	for i, ch := range append(flood[:2], quiet...) {
		if err := recv(t, ch); err != nil {
			t.Errorf("job %d: %v", i, err)
		}
	}
}

// A flow is forgotten when its last queued job leaves, whichever way it
// leaves: the pool keeps no state for a tenant whose traffic stopped, and
// a thousand flows at once cost what their jobs cost, then nothing.
func TestFlowsAreForgottenWhenTheyEmpty(t *testing.T) {
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.QueueCapacity = 2000
	p := newPool(t, cfg)
	b := block(t, p)
	var done []<-chan error
	for i := range 1000 {
		done = append(done, goSubmit(p, t.Context(), fmt.Sprint("tenant-", i), time.Millisecond))
	}
	waitFor(t, "a thousand flows", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.flows) == 1000 })
	// One expires in the queue, the rest run.
	late := goSubmit(p, deadlineIn(t, clk, time.Hour), "expires", time.Millisecond)
	waitFor(t, "the expiring job to queue", func() bool { return p.Stats().Queued == 1001 })
	clk.Advance(2 * time.Hour)
	b.Release(t)
	for _, ch := range done {
		if err := recv(t, ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := recv(t, late); !errors.Is(err, ErrExpired) {
		t.Errorf("expiring job: %v, want ErrExpired", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.flows) != 0 {
		t.Errorf("%d flows kept after every job left, want 0", len(p.flows))
	}
}

// An unguarded pool, the lab's plain server, serves by arrival whatever
// the flow.
func TestUnguardedIgnoresFlows(t *testing.T) {
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.Unguarded = true
	p := newPool(t, cfg)
	b := block(t, p)
	r := newRecorder()
	ctx := bounded(t)
	for i := range 3 {
		r.submitAs(t, p, ctx, "a", 10+i, time.Millisecond)
	}
	r.submitAs(t, p, ctx, "b", 20, time.Millisecond)
	b.Release(t)
	if order, _ := r.wait(t); !cmp.Equal(order, []int{10, 11, 12, 20}) {
		t.Errorf("service order %v, want arrival order", order)
	}
}

// goSubmit submits a job of flow in the background; the channel gets its
// error.
func goSubmit(p *Pool, ctx context.Context, flow string, cost time.Duration) <-chan error {
	return goSubmitIn(p, ctx, Flow{Key: flow}, cost)
}

// goSubmitIn is goSubmit with the flow's weight.
func goSubmitIn(p *Pool, ctx context.Context, flow Flow, cost time.Duration) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := p.SubmitFlow(ctx, flow, cost, 0, func() {})
		ch <- err
	}()
	return ch
}

// recv is what ch delivers, or a failed test after 10 s.
func recv(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("a submitted job never returned within 10 s")
		return nil
	}
}

// deadlineIn is the test's context with a deadline d away on the pool's
// clock.
func deadlineIn(t *testing.T, clk *fakeClock, d time.Duration) context.Context {
	ctx, cancel := context.WithDeadline(t.Context(), clk.Now().Add(d))
	t.Cleanup(cancel)
	return ctx
}
