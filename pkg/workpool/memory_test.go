package workpool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// memRecorder notes which jobs ran, in order, and the memory in use that
// each saw when it started (its own included).
type memRecorder struct {
	mu    sync.Mutex
	order []string
	inUse map[string]int64
	errs  map[string]error
	wg    sync.WaitGroup
}

func newMemRecorder() *memRecorder {
	return &memRecorder{inUse: map[string]int64{}, errs: map[string]error{}}
}

func (r *memRecorder) ran(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.inUse[id]
	return ok
}

// submit sends job id with mem bytes and returns once it either ran or is
// visibly queued, so that successive calls enqueue in call order. gate, if
// not nil, holds the job on its worker until closed.
func (r *memRecorder) submit(t *testing.T, p *Pool, ctx context.Context, id string, mem int64, gate chan struct{}) {
	t.Helper()
	before := p.Stats().Queued
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_, err := p.Submit(ctx, time.Millisecond, mem, func() {
			inUse := p.Stats().MemoryInUse
			r.mu.Lock()
			r.order = append(r.order, id)
			r.inUse[id] = inUse
			r.mu.Unlock()
			if gate != nil {
				<-gate
			}
		})
		r.mu.Lock()
		r.errs[id] = err
		r.mu.Unlock()
	}()
	waitFor(t, id+" to run or queue", func() bool { return r.ran(id) || p.Stats().Queued == before+1 })
}

func (r *memRecorder) wait(t *testing.T) ([]string, map[string]int64, map[string]error) {
	t.Helper()
	waitGroup(t, &r.wg)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.order, r.inUse, r.errs
}

const mib = 1 << 20

// A job starts only when a worker is free and its memory fits the budget:
// with four workers and room for three jobs, three run and the rest wait,
// and the memory in use never passes the budget.
func TestMemoryBudgetBoundsRunningJobs(t *testing.T) {
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.Workers = 4
	cfg.MemoryBudget = 3 * mib
	p := newPool(t, cfg)
	r := newMemRecorder()

	gate := make(chan struct{})
	ids := []string{"a", "b", "c", "d", "e", "f", "g"}
	for _, id := range ids {
		r.submit(t, p, context.Background(), id, mib, gate)
	}
	waitFor(t, "three jobs running", func() bool { return p.Stats().Busy == 3 })
	st := p.Stats()
	if st.Busy != 3 || st.Queued != 4 || st.MemoryInUse != 3*mib || st.QueuedMemory != 4*mib {
		t.Errorf("with a 3 MiB budget and 1 MiB jobs on 4 workers: busy=%d queued=%d in use=%d queued memory=%d, "+
			"want 3, 4, 3 MiB, 4 MiB", st.Busy, st.Queued, st.MemoryInUse, st.QueuedMemory)
	}
	close(gate)
	order, inUse, errs := r.wait(t)
	if len(order) != len(ids) {
		t.Errorf("ran %v, want all of %v", order, ids)
	}
	for id, m := range inUse {
		if m > cfg.MemoryBudget {
			t.Errorf("job %s started with %d bytes in use, over the budget %d", id, m, cfg.MemoryBudget)
		}
	}
	for id, err := range errs {
		if err != nil {
			t.Errorf("job %s: %v", id, err)
		}
	}
	st = p.Stats()
	if st.PeakMemory != 3*mib || st.MemoryInUse != 0 || st.MemoryBudget != 3*mib {
		t.Errorf("after the burst: peak=%d in use=%d budget=%d, want 3 MiB, 0, 3 MiB", st.PeakMemory, st.MemoryInUse, st.MemoryBudget)
	}
}

// A job needing more than the whole budget could never start: it is refused
// at arrival, never queued, never run. One needing exactly the budget runs.
func TestTooBigRefusedAtArrival(t *testing.T) {
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.MemoryBudget = mib
	p := newPool(t, cfg)

	ctx := bounded(t)
	ran := false
	_, err := p.Submit(ctx, time.Millisecond, mib+1, func() { ran = true })
	if !errors.Is(err, ErrTooBig) || !errors.Is(err, ErrRefused) {
		t.Errorf("Submit of budget+1 bytes: %v, want ErrTooBig (an ErrRefused)", err)
	}
	if ran || p.Stats().Queued != 0 {
		t.Errorf("a job over the budget ran (%v) or was queued (%d)", ran, p.Stats().Queued)
	}
	if _, err := p.Submit(ctx, time.Millisecond, mib, func() { ran = true }); err != nil || !ran {
		t.Errorf("Submit of exactly the budget: err=%v ran=%v, want nil and true", err, ran)
	}

	// No budget: memory is not accounted, and nothing is too big.
	q := newPool(t, baseConfig(clk))
	if _, err := q.Submit(ctx, time.Millisecond, 1<<40, func() {}); err != nil {
		t.Errorf("Submit without a budget: %v, want nil", err)
	}
}

// skipAheadSetup leaves a pool with three workers and a 10 MiB budget where
// "big1" (6 MiB) runs, "big2" (6 MiB) waits at the head for memory, three
// small jobs (1 MiB) passed it, and "s4" waits behind it because it has
// been passed over Workers times. big2 holds its worker until release
// is closed.
func skipAheadSetup(t *testing.T, big2 context.Context, release chan struct{}) (*Pool, *memRecorder, chan struct{}) {
	t.Helper()
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.Workers = 3
	cfg.MemoryBudget = 10 * mib
	p := newPool(t, cfg)
	r := newMemRecorder()

	hold := make(chan struct{})
	r.submit(t, p, context.Background(), "big1", 6*mib, hold)
	waitFor(t, "big1 running", func() bool { return r.ran("big1") })
	r.submit(t, p, big2, "big2", 6*mib, release)
	for _, id := range []string{"s1", "s2", "s3", "s4"} {
		r.submit(t, p, context.Background(), id, mib, nil)
	}
	waitFor(t, "s1..s3 done", func() bool { return p.Stats().Completed == 3 })
	r.mu.Lock()
	order := append([]string(nil), r.order...)
	r.mu.Unlock()
	if diff := cmp.Diff([]string{"big1", "s1", "s2", "s3"}, order); diff != "" {
		t.Fatalf("with big2 waiting for memory, started (-want +got):\n%s", diff)
	}
	if st := p.Stats(); st.Queued != 2 || st.Busy != 1 {
		t.Fatalf("queued=%d busy=%d, want big2 and s4 queued behind big1", st.Queued, st.Busy)
	}
	return p, r, hold
}

// Head-of-line rule: small jobs that fit may pass a big one waiting for
// memory, but at most Workers of them; then the big one is next.
func TestSkipAheadIsBounded(t *testing.T) {
	release := make(chan struct{})
	_, r, hold := skipAheadSetup(t, context.Background(), release)
	close(hold)
	waitFor(t, "s4 to run", func() bool { return r.ran("s4") })
	close(release)
	order, inUse, errs := r.wait(t)
	if diff := cmp.Diff([]string{"big1", "s1", "s2", "s3"}, order[:4]); diff != "" {
		t.Errorf("start order (-want +got):\n%s", diff)
	}
	// s4 may start only after big2 did: it sees big2's memory in use.
	if inUse["s4"] != 7*mib {
		t.Errorf("s4 started with %d MiB in use, want 7 (big2's 6 and its own 1): it passed big2", inUse["s4"]/mib)
	}
	for id, err := range errs {
		if err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
}

// When the job that others wait behind leaves the queue, they go on at once.
func TestCancelledBlockerLiftsTheBlock(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p, r, hold := skipAheadSetup(t, ctx, nil)
	cancel()
	waitFor(t, "s4 to run", func() bool { return r.ran("s4") })
	if st := p.Stats(); st.Busy != 1 || st.Queued != 0 {
		t.Errorf("busy=%d queued=%d after big2 left, want big1 still running and nothing queued", st.Busy, st.Queued)
	}
	close(hold)
	_, _, errs := r.wait(t)
	if !errors.Is(errs["big2"], ErrCancelled) {
		t.Errorf("big2: %v, want ErrCancelled", errs["big2"])
	}
}

// A job whose deadline passes while it waits for memory is dropped when a
// worker looks at it, never run.
func TestExpiredWhileWaitingForMemory(t *testing.T) {
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.Workers = 2
	cfg.MemoryBudget = mib
	p := newPool(t, cfg)
	r := newMemRecorder()

	hold := make(chan struct{})
	r.submit(t, p, context.Background(), "hold", mib, hold)
	waitFor(t, "hold running", func() bool { return r.ran("hold") })
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(time.Hour))
	defer cancel()
	r.submit(t, p, ctx, "late", mib, nil)
	clk.Advance(time.Hour - time.Microsecond) // less than its 1 ms cost left
	close(hold)
	order, _, errs := r.wait(t)
	if diff := cmp.Diff([]string{"hold"}, order); diff != "" {
		t.Errorf("ran (-want +got):\n%s", diff)
	}
	if !errors.Is(errs["late"], ErrExpired) {
		t.Errorf("late: %v, want ErrExpired", errs["late"])
	}
}

// The projected wait spreads the queued cost over the jobs memory lets run
// at once when that is fewer than the workers.
func TestProjectedWaitCountsMemory(t *testing.T) {
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.Workers = 4
	cfg.MemoryBudget = 2 * mib
	p := newPool(t, cfg)

	ctx := bounded(t)
	hold := make(chan struct{})
	done := make(chan error, 5)
	go func() {
		_, err := p.Submit(ctx, time.Second, 2*mib, func() { <-hold })
		done <- err
	}()
	waitFor(t, "budget held", func() bool { return p.Stats().MemoryInUse == 2*mib })
	for i := range 4 {
		go func() {
			_, err := p.Submit(ctx, time.Second, mib, func() {})
			done <- err
		}()
		waitFor(t, "job to queue", func() bool { return p.Stats().Queued == i+1 })
	}
	// 4 s of queued work; memory runs two 1 MiB jobs at once, not four.
	if got, want := p.ProjectedWait(), 2*time.Second; got != want {
		t.Errorf("ProjectedWait = %v, want %v", got, want)
	}
	close(hold)
	for range 5 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestValidateMemoryBudget(t *testing.T) {
	cfg := baseConfig(newFakeClock())
	cfg.MemoryBudget = -1
	if err := cfg.Validate(); err == nil {
		t.Error("Validate accepted a negative MemoryBudget")
	}
}
