package workpool

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestUnguardedRunsEverything pins down the lab's control: an unguarded pool
// refuses nothing for load, serves oldest first however long the queue has
// stood, and runs every queued job, even one whose deadline passed or whose
// caller left while it waited. Each of those is one line of the pool; this
// test fails if any defence is left on in unguarded mode.
func TestUnguardedRunsEverything(t *testing.T) {
	clk := newFakeClock()
	cfg := baseConfig(clk)
	cfg.QueueCapacity = 2
	cfg.MaxQueueWait = time.Millisecond
	cfg.Unguarded = true
	p := newPool(t, cfg)
	r := newRecorder()

	test, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	left, leave := context.WithCancel(test)
	// The deadline is real time: it passes while the job is queued.
	expiring, cancel := context.WithDeadline(test, time.Now().Add(50*time.Millisecond))
	defer cancel()

	b := block(t, p)
	r.submit(t, p, left, 1, time.Minute)     // its caller leaves while it waits
	r.submit(t, p, expiring, 2, time.Minute) // costs more than its deadline leaves
	for id := 3; id <= 5; id++ {             // beyond QueueCapacity and MaxQueueWait
		r.submit(t, p, test, id, time.Minute)
	}
	leave()
	<-expiring.Done()
	clk.Advance(time.Hour) // far past LIFOAfter
	if got := p.Stats().Queued; got != 5 {
		t.Fatalf("queued = %d after the callers left, want 5: an unguarded pool keeps what it queued", got)
	}
	b.Release(t)
	order, errs := r.wait(t)
	if !cmp.Equal(order, []int{1, 2, 3, 4, 5}) {
		t.Errorf("ran %v, want every job oldest first [1 2 3 4 5]", order)
	}
	for id, err := range errs {
		if err != nil {
			t.Errorf("job %d: err = %v, want nil (an unguarded pool runs every job)", id, err)
		}
	}
}
