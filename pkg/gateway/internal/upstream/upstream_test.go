package upstream

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leveehq/levee/internal/recent"
	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/breaker/breakertest"
	"github.com/leveehq/levee/pkg/callmeta"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testSet is a Set of n serving nodes that dial nothing, on a fake clock,
// with the production breaker settings.
func testSet(t *testing.T, n int, delay time.Duration) (*Set, *breakertest.Clock) {
	t.Helper()
	clock := breakertest.NewClock(time.Unix(1_000_000, 0))
	bc := breaker.DefaultConfig()
	bc.Clock = clock
	s := New(Config{
		QueueDelay: delay,
		NewBreaker: func() *breaker.Breaker {
			b, err := breaker.New(bc)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Clock:  clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	nodes := make([]*Node, n)
	for i := range nodes {
		nodes[i] = newNode(s, fmt.Sprintf("10.0.0.%d:7701", i+1))
		nodes[i].serving.Store(true)
	}
	s.snap.Store(&nodes)
	return s, clock
}

// answer sends v one call, as Pick and the forwarding path would, and
// hands it what came back: err, and a trailer of served.
func answer(v *Node, err error, served callmeta.Served) Verdict {
	v.pending.Add(1)
	return v.Observe(Answer{Err: err, Trailer: served.Trailer()})
}

// served is a verifier's account of one hash of service with workers and
// a queue bound (0: none).
func served(workers int, service, bound time.Duration) callmeta.Served {
	return callmeta.Served{Workers: workers, Service: service, MaxQueueWait: bound}
}

var errDeadline = status.Error(codes.DeadlineExceeded, "remaining deadline 2s is shorter than the expected time 9s")

// Each answer is sorted by what it says of the node; only the verifier's
// own overload signal is overload, and only node failures count against
// its breaker.
func TestObserveSortsAnswers(t *testing.T) {
	s, _ := testSet(t, 1, 500*time.Millisecond)
	v := s.List()[0]
	overload := status.Error(codes.ResourceExhausted, "overloaded")
	for _, c := range []struct {
		err     error
		trailer callmeta.Served
		pushed  bool
		want    Outcome
	}{
		{nil, served(2, time.Millisecond, 0), false, Answered},
		{status.Error(codes.InvalidArgument, "bad hash"), callmeta.Served{}, false, Answered},
		{overload, callmeta.Served{}, true, Overloaded},
		{overload, callmeta.Served{}, false, Other}, // a transport's quota: no do-not-retry pushback
		{status.Error(codes.Unavailable, "draining"), callmeta.Served{}, false, Failed},
		{status.Error(codes.Internal, "boom"), callmeta.Served{}, false, Failed},
		{errDeadline, callmeta.Served{}, false, Other},
		{status.Error(codes.Canceled, "caller left"), callmeta.Served{}, false, Other},
	} {
		v.pending.Add(1)
		tr := c.trailer.Trailer()
		if c.pushed {
			tr.Set(callmeta.PushbackKey, "-1")
		}
		got := v.Observe(Answer{Err: c.err, Trailer: tr})
		if got.Outcome != c.want {
			t.Errorf("%v: outcome %v, want %v", c.err, got.Outcome, c.want)
		}
		if v.Pending() != 0 {
			t.Fatalf("%v: %d calls still held after the answer, want its slot released", c.err, v.Pending())
		}
	}
	v.pending.Add(1)
	if got := v.Observe(Answer{Err: errDeadline, Cut: true}); got.Outcome != Cut {
		t.Errorf("a call the gateway cut: outcome %v, want Cut", got.Outcome)
	}
	if answers, bad := v.answerTotals(s.clock.Now()); answers != 8 || bad != 5 {
		t.Errorf("%d answers, %d bad counted; want 8 and 5 (the cut call not held against it)", answers, bad)
	}
}

// queueFor sizes a verifier's queue in time, at least one call per worker.
func TestQueueFor(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		workers        int64
		service, delay time.Duration
		want           int64
	}{
		{1, 10 * ms, 50 * ms, 5},
		{2, 10 * ms, 50 * ms, 10},
		{2, 134 * ms, 50 * ms, 2}, // slower than the delay: one per worker
		{1, 0, 50 * ms, 1},        // no answer yet: one per worker
		{4, 10 * ms, 0, 0},        // no queue
		{1, time.Nanosecond, time.Minute, maxVerifierQueue},
	} {
		if got := queueFor(c.workers, c.service, c.delay); got != c.want {
			t.Errorf("queueFor(%d workers, service %v, delay %v) = %d, want %d", c.workers, c.service, c.delay, got, c.want)
		}
	}
}

// burstDelay lets a verifier's queue hold two thirds of what the verifier
// itself admits, when that is longer than the delay.
func TestBurstDelay(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		delay, bound, service, want time.Duration
	}{
		{500 * ms, 1500 * ms, 150 * ms, time.Second},
		{500 * ms, 0, 150 * ms, 500 * ms},        // no bound reported
		{500 * ms, time.Second, 0, 500 * ms},     // no answer yet
		{500 * ms, 600 * ms, 150 * ms, 500 * ms}, // two thirds of the bound below the delay: the delay stands
		{0, time.Second, 150 * ms, 0},            // no queue
		{500 * ms, 1500 * ms, 2 * time.Second, time.Second},
	} {
		if got := burstDelay(c.delay, c.bound, c.service); got != c.want {
			t.Errorf("burstDelay(delay %v, bound %v, service %v) = %v, want %v", c.delay, c.bound, c.service, got, c.want)
		}
	}
}

// The queue size a verifier is held at is in calls, so it belongs to the
// worker count it was computed for: a verifier that now runs fewer workers
// (restarted smaller, its capacity knob turned down) is not credited with
// the queue of the workers it had; and a count no answer repeats for
// workersTTL is forgotten, with the service times of as long ago.
func TestHeldQueueForgetsAnotherWorkerCount(t *testing.T) {
	s, clock := testSet(t, 1, 500*time.Millisecond)
	v := s.List()[0]
	for range recent.Capacity {
		answer(v, nil, served(4, 10*time.Millisecond, 0))
	}
	if got := v.queue.Load(); got != 200 {
		t.Fatalf("queue of 4 workers at 10 ms for 500 ms = %d, want 200", got)
	}
	answer(v, nil, served(1, 10*time.Millisecond, 0))
	if got := v.queue.Load(); got != 50 {
		t.Fatalf("queue after the verifier went down to 1 worker = %d, want 50 (the 200 held for 4 forgotten)", got)
	}
	clock.Advance(workersTTL / 2)
	s.Tick(clock.Now())
	if got := v.Workers(); got != 1 {
		t.Fatalf("workers %d half a TTL after the last answer, want 1", got)
	}
	clock.Advance(workersTTL/2 + time.Second)
	s.Tick(clock.Now())
	if got := v.Workers(); got != 0 {
		t.Fatalf("workers %d a TTL after the last answer, want 0 (forgotten)", got)
	}
	if got := v.ServiceTime(); got != 0 {
		t.Fatalf("service time %v a TTL after the last answer, want 0 (forgotten)", got)
	}
	if got := v.queue.Load(); got != 1 {
		t.Fatalf("queue after the worker count and service time expired = %d, want 1 (one worker assumed, speed unknown)", got)
	}
}

// What a verifier says of its queue bound takes effect at its next answer:
// a smaller bound (restarted with a shorter -max-queue-wait) forgets the
// burst sizes held for the larger one at once rather than after the hold
// rolls out, an answer that names no bound (restarted unguarded, or an
// older binary) clears it, and the bound is forgotten with the worker
// count.
func TestQueueBoundFollowsTheAnswers(t *testing.T) {
	s, clock := testSet(t, 1, 300*time.Millisecond)
	v := s.List()[0]
	for range recent.Capacity {
		answer(v, nil, served(1, 100*time.Millisecond, 1500*time.Millisecond))
	}
	if got := v.queue.Load(); got != 10 {
		t.Fatalf("queue %d with a 1.5s bound at 100ms, want 10 (two thirds of it)", got)
	}
	if got := v.QueueBound(); got != 1500*time.Millisecond {
		t.Fatalf("bound %v learnt from the answers, want 1.5s", got)
	}
	if answer(v, nil, served(1, 100*time.Millisecond, 900*time.Millisecond)); v.queue.Load() != 6 {
		t.Fatalf("queue %d right after the bound fell to 900ms, want 6 (the 10 held for the old bound forgotten)", v.queue.Load())
	}
	if answer(v, nil, served(1, 100*time.Millisecond, 0)); v.queue.Load() != 3 {
		t.Fatalf("queue %d after an answer naming no bound, want the delay's 3", v.queue.Load())
	}
	answer(v, nil, served(1, 100*time.Millisecond, time.Second))
	clock.Advance(workersTTL + time.Second)
	s.Tick(clock.Now())
	if got := v.QueueBound(); got != 0 {
		t.Errorf("bound %v after the worker count expired, want forgotten", got)
	}
}

// A verifier whose recent service times were all inflated (every hash in
// the window spanned a pause) keeps its queue for the seconds the held
// sizes cover; when the inflation lasts, the queue falls to one call per
// worker, not none, and the answers it still gets at its true speed bring
// the median, so its queue, back within one window of answers. Nothing but
// answers can lower the median, so the floor is what keeps it from
// sticking.
func TestPoisonedServiceTimeRecovers(t *testing.T) {
	s, clock := testSet(t, 1, 500*time.Millisecond)
	v := s.List()[0]
	const bound = 1500 * time.Millisecond // a burst may queue 1 s of work
	fast := served(2, time.Millisecond, bound)
	for range recent.Capacity {
		answer(v, nil, fast)
	}
	healthy, _, standingSize := v.Queue()
	if healthy != 2000 || standingSize != 1000 {
		t.Fatalf("burst %d, standing %d at 1ms with 2 workers, want 2000 and 1000", healthy, standingSize)
	}
	slow := served(2, 10*time.Second, bound)
	for range recent.Capacity {
		answer(v, nil, slow)
	}
	if got, _, standing := v.Queue(); got != healthy || standing != standingSize {
		t.Fatalf("burst %d, standing %d right after a burst of slow hashes, want %d and %d (held)", got, standing, healthy, standingSize)
	}
	v.standing.Store(true)
	v.fitQueue(clock.Now())
	if got, _, _ := v.Queue(); got != standingSize {
		t.Fatalf("queue %d standing, right after the slow hashes, want the held standing size %d", got, standingSize)
	}
	v.standing.Store(false)
	for range heldFor { // the slowdown lasts: it still answers, slowly
		clock.Advance(time.Second)
		answer(v, nil, slow)
		v.workAt.Store(clock.Now().UnixNano())
		s.Tick(clock.Now())
	}
	if got, _, standing := v.Queue(); got != 2 || standing != 2 {
		t.Fatalf("burst %d, standing %d with a 10s median for %d seconds, want the floor of one per worker (2)", got, standing, heldFor)
	}
	for range recent.Capacity {
		answer(v, nil, fast)
	}
	if got, _, _ := v.Queue(); got != healthy {
		t.Errorf("queue %d after %d answers at the true speed, want %d again", got, recent.Capacity, healthy)
	}
}

// judgeStanding, driven by hand, a second at a time: a second whose fewest
// calls held (the count carried in, or less after a release) were above the
// standing size gives the verifier that size; a second with no slot
// released changes nothing while calls are held (a stall); a second in which
// a worker had no call gives the burst size back, as does an idle second; a
// second in between keeps whichever size it had. A burst that arrives late
// in an idle second is not a standing queue, and a queue held full at a
// standing size of one call does not read as drained.
func TestStandingQueueJudgedBySecond(t *testing.T) {
	const delay = 300 * time.Millisecond
	// newNode is a verifier of one worker at service, with a 1 s bound,
	// ticked once with nothing held.
	newNode := func(service time.Duration) (*Set, *breakertest.Clock, *Node) {
		s, clock := testSet(t, 1, delay)
		v := s.List()[0]
		for range recent.Capacity {
			answer(v, nil, served(1, service, time.Second))
		}
		s.Tick(clock.Now())
		return s, clock, v
	}
	// tick is one second later, as the housekeeping would, the verifier's
	// worker count fresh (it answered meanwhile).
	tick := func(s *Set, clock *breakertest.Clock, v *Node) int64 {
		v.workAt.Store(clock.Advance(time.Second).UnixNano())
		s.Tick(clock.Now())
		return v.queue.Load()
	}
	// during is one second at v: calls come back until low are held, then
	// more arrive and one of those comes back.
	during := func(v *Node, low int64) {
		for v.pending.Load() > low {
			v.release()
		}
		v.pending.Add(4)
		v.release()
	}

	s, clock, v := newNode(100 * time.Millisecond)
	standing, burst := v.standingQueue.Load(), v.queue.Load()
	if standing != 3 || burst != 7 {
		t.Fatalf("standing %d, burst %d at 100ms for 300ms and a 1s bound, want 3 and 7", standing, burst)
	}
	v.pending.Store(9) // a burst arrived
	if got := tick(s, clock, v); got != burst {
		t.Fatalf("queue %d after a second with nothing released, want the burst %d", got, burst)
	}
	for _, c := range []struct {
		carry int64 // > 0: a second before, with this many held and nothing released
		low   int64 // -1: no second at all, just a tick
		want  int64
		what  string
	}{
		{0, 5, standing, "a second that never held fewer than 5 (1 worker, 4 queued, above the standing 3)"},
		{0, -1, standing, "a second with nothing released while calls are held"},
		{0, 2, standing, "a second down to one call queued"},
		{0, 1, standing, "a second down to the worker's call, none queued"},
		{0, 0, burst, "a second in which the worker had no call"},
		{9, 4, burst, "a second at the standing size, not above it"},
		{0, -1, burst, "a second with nothing released while 7 are held (a stall)"},
	} {
		if c.carry > 0 {
			v.pending.Store(c.carry)
			if got := tick(s, clock, v); got != c.want {
				t.Fatalf("queue %d after a second with %d held and nothing released, want %d", got, c.carry, c.want)
			}
		}
		if c.low >= 0 {
			during(v, c.low)
		}
		if got := tick(s, clock, v); got != c.want {
			t.Fatalf("queue %d after %s, want %d", got, c.what, c.want)
		}
	}
	v.pending.Store(9)
	tick(s, clock, v)
	during(v, 5)
	if got := tick(s, clock, v); got != standing {
		t.Fatalf("queue %d after standing again, want %d", got, standing)
	}
	v.pending.Store(0) // the traffic stops: nothing comes back, and nothing is held
	if got := tick(s, clock, v); got != burst {
		t.Fatalf("queue %d idle, want the burst %d back", got, burst)
	}
	v.pending.Store(8) // a burst late in an idle second, one call back before the tick
	v.release()
	if got := tick(s, clock, v); got != burst {
		t.Fatalf("queue %d after a burst late in an idle second, want the burst %d still", got, burst)
	}

	// A standing size of one call: held full, each release leaves the
	// worker's call and none queued until the next arrives.
	s, clock, v = newNode(400 * time.Millisecond)
	if v.standingQueue.Load() != 1 {
		t.Fatalf("standing size %d at 400ms for 300ms, want 1", v.standingQueue.Load())
	}
	v.pending.Store(9)
	tick(s, clock, v)
	during(v, 5)
	if got := tick(s, clock, v); got != 1 {
		t.Fatalf("queue %d after a standing second, want 1", got)
	}
	for range 3 {
		v.pending.Store(2) // the worker's call and one queued
		for range 5 {
			v.release()
			v.pending.Add(1)
		}
		if got := tick(s, clock, v); got != 1 {
			t.Fatalf("queue %d held full at a standing size of one, want 1 (not drained)", got)
		}
	}
}

// The capacity is each serving verifier's workers over its median service
// time: one hash that spanned a pause moves no median, and a verifier that
// does not serve adds nothing.
func TestCapacity(t *testing.T) {
	s, _ := testSet(t, 2, 500*time.Millisecond)
	a, b := s.List()[0], s.List()[1]
	for range recent.Capacity {
		answer(a, nil, served(1, 50*time.Millisecond, 0))
		answer(b, nil, served(2, 100*time.Millisecond, 0))
	}
	answer(a, nil, served(1, 10*time.Second, 0))
	if got := s.Capacity(); got < 39.999 || got > 40.001 {
		t.Errorf("capacity %v, want 40 (20 + 20)", got)
	}
	b.serving.Store(false)
	if got := s.Capacity(); got < 19.999 || got > 20.001 {
		t.Errorf("capacity %v with one verifier out, want 20", got)
	}
}

// pickable reports whether Pick ever returns v in 50 tries (releasing each
// slot it takes).
func pickable(s *Set, v *Node) bool {
	for range 50 {
		c, _ := s.Pick(nil, 0)
		if c == nil {
			continue
		}
		c.Unsent()
		if c == v {
			return true
		}
	}
	return false
}

// A verifier whose answers are mostly bad while its peers' are not is
// ejected, by time: for outlierBase, then, found bad again on its first
// answers after the ejection ended, for twice as long; a window without an
// ejection resets the backoff. Judged soon after a bad answer, not only on
// the once-a-second tick.
func TestOutlierEjectedWithBackoff(t *testing.T) {
	s, clock := testSet(t, 3, 500*time.Millisecond)
	bad, good1, good2 := s.List()[0], s.List()[1], s.List()[2]
	ok := served(1, time.Millisecond, 0)
	feed := func() {
		for range outlierMinAnswers + 10 {
			answer(good1, nil, ok)
			answer(good2, nil, ok)
			clock.Advance(10 * time.Millisecond)
			answer(bad, errDeadline, callmeta.Served{})
		}
	}
	feed()
	if ejected, n := bad.Ejected(); !ejected || n != 1 {
		t.Fatalf("ejected %v (%d times) after bad answers against healthy peers, want once", ejected, n)
	}
	if pickable(s, bad) {
		t.Fatal("an ejected verifier was picked")
	}
	if ejected, _ := good1.Ejected(); ejected {
		t.Fatal("a healthy verifier was ejected")
	}
	clock.Advance(outlierBase)
	if ejected, _ := bad.Ejected(); ejected || !pickable(s, bad) {
		t.Fatalf("still out %v after its ejection of %v ended: want it back, by time alone", ejected, outlierBase)
	}
	feed()
	if ejected, n := bad.Ejected(); !ejected || n != 2 {
		t.Fatalf("ejected %v (%d times) after bad answers again, want a second ejection", ejected, n)
	}
	clock.Advance(outlierBase)
	if ejected, _ := bad.Ejected(); !ejected {
		t.Fatalf("back after %v: the second ejection should last twice as long", outlierBase)
	}
	clock.Advance(outlierBase)
	if ejected, _ := bad.Ejected(); ejected {
		t.Fatalf("still out after %v", 2*outlierBase)
	}
	// A clean window resets the backoff.
	clock.Advance(outlierWindow + time.Second)
	s.Tick(clock.Now())
	feed()
	clock.Advance(outlierBase)
	if ejected, n := bad.Ejected(); ejected || n != 3 {
		t.Errorf("ejected %v (%d times) %v into an ejection after a clean window, want a third ejection, of %v only, over", ejected, n, outlierBase, outlierBase)
	}
}

// A fleet-wide condition ejects nobody: with every verifier refusing, none
// is an outlier against its peers, and EjectRefusing, which acts only
// while another verifier serves, ejects none either. With two of three
// refusing (the peers' median is theirs), EjectRefusing ejects both while
// the third serves.
func TestRefusingEverywhereEjectsNobody(t *testing.T) {
	s, clock := testSet(t, 3, 500*time.Millisecond)
	for range outlierMinAnswers {
		for _, v := range s.List() {
			answer(v, errDeadline, callmeta.Served{})
		}
	}
	clock.Advance(time.Second)
	s.Tick(clock.Now())
	if got := s.EjectRefusing(clock.Now()); len(got) != 0 {
		t.Errorf("EjectRefusing ejected %v with every verifier refusing, want none", got)
	}
	for _, v := range s.List() {
		if ejected, _ := v.Ejected(); ejected {
			t.Errorf("%s ejected while every verifier refuses", v.Addr())
		}
	}

	s, clock = testSet(t, 3, 500*time.Millisecond)
	for range outlierMinAnswers {
		answer(s.List()[0], errDeadline, callmeta.Served{})
		answer(s.List()[1], errDeadline, callmeta.Served{})
		answer(s.List()[2], nil, served(1, time.Millisecond, 0))
	}
	clock.Advance(time.Second)
	s.Tick(clock.Now())
	if ejected, _ := s.List()[0].Ejected(); ejected {
		t.Fatal("ejected as an outlier where the peers' median refuses too")
	}
	if got := s.EjectRefusing(clock.Now()); len(got) != 2 {
		t.Errorf("EjectRefusing ejected %v, want both verifiers refusing everything while the third serves", got)
	}
}

// At most half of the serving verifiers are ejected at once: a third
// outlier among four waits while two are out.
func TestAtMostHalfEjected(t *testing.T) {
	s, clock := testSet(t, 4, 500*time.Millisecond)
	boom := status.Error(codes.Internal, "boom")
	for i := range 3 {
		for range outlierMinAnswers {
			for j, v := range s.List() {
				if j != i {
					answer(v, nil, served(1, time.Millisecond, 0))
					continue
				}
				for range 3 {
					answer(v, boom, callmeta.Served{})
				}
			}
		}
		s.Tick(clock.Advance(100 * time.Millisecond)) // well within an ejection
	}
	var out []string
	for _, v := range s.List() {
		if ejected, _ := v.Ejected(); ejected {
			out = append(out, v.Addr())
		}
	}
	if len(out) != 2 {
		t.Errorf("ejected %v after three of four verifiers failed one after another, want exactly two", out)
	}
}

// A verifier's service time counts each answer by the cost the verifier
// expected of it, so cheap hashes cannot make it look fast: before, twelve
// answers of m = 8 KiB hashes took a node's median from 8.5 ms to 45 µs,
// its queue from 157 calls to the 10,000 cap and the capacity behind the
// bistability margin from 234/s to 44,444/s. And a node that only refuses
// is credited with no speed once its last answers are serviceWindow old.
func TestServiceTimeNotSteeredByCheapHashes(t *testing.T) {
	s, clock := testSet(t, 1, 500*time.Millisecond)
	v := s.List()[0]
	honest := callmeta.Served{Workers: 2, Service: 8500 * time.Microsecond, Expected: 8 * time.Millisecond}
	cheap := callmeta.Served{Workers: 2, Service: 45 * time.Microsecond, Expected: 10 * time.Microsecond}
	for range recent.Capacity {
		answer(v, nil, honest)
	}
	queue, capacity := v.queue.Load(), s.Capacity()
	for range 12 {
		answer(v, nil, cheap)
	}
	if got := v.ServiceTime(); got != honest.Service {
		t.Errorf("service time %v after 12 cheap answers, want the honest %v", got, honest.Service)
	}
	for range 200 { // a flood, one honest answer in twenty
		for range 19 {
			answer(v, nil, cheap)
		}
		answer(v, nil, honest)
	}
	if got := v.ServiceTime(); got != honest.Service {
		t.Errorf("service time %v after a flood of cheap answers, want the honest %v", got, honest.Service)
	}
	if got := v.queue.Load(); got != queue {
		t.Errorf("queue %d after cheap answers, was %d", got, queue)
	}
	if got := s.Capacity(); got != capacity {
		t.Errorf("capacity %.0f/s after cheap answers, was %.0f/s", got, capacity)
	}
	// Only refusals from now on: its speed is forgotten with its workers.
	overload := status.Error(codes.ResourceExhausted, "overloaded")
	for range workersTTL/time.Second + 1 {
		clock.Advance(time.Second)
		v.pending.Add(1)
		v.Observe(Answer{Err: overload, Trailer: callmeta.PushbackTrailer(-1)})
		s.Tick(clock.Now())
	}
	if got := v.ServiceTime(); got != 0 {
		t.Errorf("service time %v after %v of refusals only, want 0 (forgotten)", got, workersTTL+time.Second)
	}
	if got := s.Capacity(); got != 0 {
		t.Errorf("capacity %.0f/s of a node that only refused for %v, want 0", got, workersTTL+time.Second)
	}
}
