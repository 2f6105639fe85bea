package gateway

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/verifier"
)

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

// At 60 % of capacity with Poisson arrivals, a fleet that queues briefly at
// each verifier answers nearly every call. With no queue at all (each
// verifier sent only what its workers can start at once) it was a loss
// system: Erlang's formula for 2 servers at 0.6 says a quarter of the calls
// find both busy, and that many were refused.
func TestQueueByTimeAnswersBursts(t *testing.T) {
	if testing.Short() {
		t.Skip("load test; runs in the full suite")
	}
	// The verifiers' own bound at its default, so that the queue is the
	// one a production gateway would form.
	bounded := func(c *verifier.Config) { c.MaxQueueWait = time.Second }
	v1, v2 := startVerifier(t, bounded), startVerifier(t, bounded)
	gw := startGateway(t, gatewayConfig(v1.addr, v2.addr))
	gw.waitServing(t, 2)
	v1.slow(t, 40)
	v2.slow(t, 40)
	stored := storedHash("pw", 512, 1)
	capacity := capacityOf(t, gw, stored, 2)
	rate := 0.6 * capacity
	t.Logf("capacity %.1f/s; offering %.1f/s, Poisson", capacity, rate)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var sent, failed atomic.Int64
	var firstMu sync.Mutex
	var first error
	end := time.Now().Add(6 * time.Second)
	for next := time.Now(); next.Before(end); next = next.Add(time.Duration(rand.ExpFloat64() / rate * float64(time.Second))) {
		time.Sleep(time.Until(next))
		wg.Add(1)
		sent.Add(1)
		go func() {
			defer wg.Done()
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			defer ccancel()
			if _, err := gw.client.Verify(cctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")}); err != nil {
				failed.Add(1)
				firstMu.Lock()
				if first == nil {
					first = err
				}
				firstMu.Unlock()
			}
		}()
	}
	wg.Wait()
	frac := float64(failed.Load()) / float64(sent.Load())
	t.Logf("%d of %d calls failed (%.1f%%); first: %v", failed.Load(), sent.Load(), 100*frac, first)
	if frac > 0.03 {
		t.Errorf("%.1f%% of calls failed at 0.6 of capacity (first: %v), want ≤ 3%%", 100*frac, first)
	}
}

// The limiter aims at twice the wait the verifiers' standing queues allow (the queue
// delay plus one service time of the slowest serving verifier) when that is
// longer than its configured target, capped at the client timeout.
func TestQueueTargetFollowsServiceTime(t *testing.T) {
	v1, v2 := startVerifier(t, nil), startVerifier(t, nil)
	cfg := gatewayConfig(v1.addr, v2.addr)
	cfg.VerifierQueueDelay = 50 * time.Millisecond
	gw := startGateway(t, cfg)
	gw.waitServing(t, 2)
	list := gw.g.backends.list()
	if got, want := gw.g.queueTarget(), 2*cfg.VerifierQueueDelay; got != want {
		t.Fatalf("target %v before any answer, want twice the queue delay, %v", got, want)
	}
	for range serviceSamples {
		list[0].service.observe(20 * time.Millisecond)
		list[1].service.observe(300 * time.Millisecond)
	}
	gw.g.fitCeiling()
	if got, want := gw.g.limiter.Target(), 2*(cfg.VerifierQueueDelay+300*time.Millisecond); got != want {
		t.Errorf("limiter target %v with the slowest verifier at 300ms, want %v", got, want)
	}
	for range serviceSamples {
		list[1].service.observe(time.Hour)
	}
	if got, want := gw.g.queueTarget(), cfg.Autopilot.ClientTimeout; got != want {
		t.Errorf("target %v with a verifier at an hour, want the cap %v", got, want)
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

// boundedVerifier starts one verifier of one worker with a 1 s queue bound,
// its hashes stretched slowdown times, behind a gateway with the given
// queue delay, and returns the gateway and a stored hash for it.
func boundedVerifier(t *testing.T, delay time.Duration, slowdown float64) (*testGateway, string) {
	t.Helper()
	v := startVerifier(t, func(c *verifier.Config) {
		c.Workers = 1
		c.MaxQueueWait = time.Second
	})
	cfg := gatewayConfig(v.addr)
	cfg.VerifierQueueDelay = delay
	gw := startGateway(t, cfg)
	gw.waitServing(t, 1)
	v.slow(t, slowdown)
	return gw, storedHash("pw", 256, 1)
}

// A burst queues at a verifier up to what the verifier itself admits (its
// MaxQueueWait, reported in its answers) rather than only up to the
// gateway's queue delay: ten calls at once at a one-worker verifier are all
// answered. Sized by the delay alone (30 ms, one or two calls of 14–60 ms)
// the gateway refused most of them, which a naive client's retries
// then met again in the same full queue. A bound the verifier stops
// reporting is forgotten with its worker count.
func TestBurstQueuesUpToTheVerifiersBound(t *testing.T) {
	gw, stored := boundedVerifier(t, 30*time.Millisecond, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range serviceSamples { // a median of warm hashes
		if _, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")}); err != nil {
			t.Fatal(err)
		}
	}
	b := gw.g.backends.list()[0]
	if got := time.Duration(b.maxWait.Load()); got != time.Second {
		t.Fatalf("queue bound learnt from the answers: %v, want the verifier's 1s", got)
	}
	service := b.service.median()
	t.Logf("service %v: %d slots, %d by the delay alone", service, b.slots(0), b.workers.Load()+b.standingQueue.Load())
	const burst = 10
	if service > 90*time.Millisecond {
		t.Fatalf("service time %v: too slow for %d calls to fit the verifier's 1s bound", service, burst)
	}
	if n := b.workers.Load() + b.standingQueue.Load(); n >= burst {
		t.Fatalf("the delay alone gives %d slots at %v of service, enough for the burst of %d: the test would show nothing", n, service, burst)
	}

	var wg sync.WaitGroup
	var results tally
	for range burst {
		wg.Go(func() {
			_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
			results.add(code(err).String())
		})
	}
	wg.Wait()
	if got := results.get("OK"); got != burst {
		t.Errorf("%d of a burst of %d answered (%v), want all: the verifier's bound holds them", got, burst, results.snapshot())
	}

	b.expireWorkers(time.Now().Add(workersTTL + time.Second))
	if got := b.maxWait.Load(); got != 0 {
		t.Errorf("queue bound %v after the worker count expired, want forgotten", time.Duration(got))
	}
}

// Under overload the queue at a verifier is held near the delay, not at the
// burst bound: with a closed loop of callers far above capacity, the
// verifier's queue stands, the gateway gives it the standing size, and the
// queue wait it reported averaged well under half of its 1 s bound. Without
// the standing-queue test the queue stood near the bound, cut back only by
// the limiter and the verifier's own refusals.
func TestStandingQueueHeldToTheDelay(t *testing.T) {
	if testing.Short() {
		t.Skip("load test; runs in the full suite")
	}
	gw, stored := boundedVerifier(t, 100*time.Millisecond, 40)
	cfg := gw.g.cfg
	gw.learnService(t, stored)
	t.Logf("service %v: %d slots, limiter target %v", gw.g.backends.list()[0].service.median(),
		gw.g.backends.list()[0].slots(0), gw.g.limiter.Target())
	waits := func() (sum float64, n uint64) {
		mfs, err := gw.g.cfg.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "levee_gateway_verifier_queue_wait_seconds" {
				h := mf.GetMetric()[0].GetHistogram()
				return h.GetSampleSum(), h.GetSampleCount()
			}
		}
		t.Fatal("no queue wait histogram")
		return 0, 0
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Settling: the burst size fills, the housekeeping judges the queue
	// standing within a second or two, and what the burst size let in
	// drains (newest first, so the oldest of it waits seconds).
	settle := time.Now().Add(5 * time.Second)
	end := settle.Add(3 * time.Second)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for time.Now().Before(end) {
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := gw.client.Verify(cctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
				ccancel()
				if err != nil {
					time.Sleep(50 * time.Millisecond) // refused: come back soon, not in a spin
				}
			}
		})
	}
	time.Sleep(time.Until(settle))
	sum0, n0 := waits()
	// Read while the load still runs: once it stops the queue drains, and
	// the next housekeeping tick rightly gives the burst size back.
	b := gw.g.backends.list()[0]
	time.Sleep(time.Until(end.Add(-500 * time.Millisecond)))
	standing, queue, standingSize := b.standing.Load(), b.queue.Load(), b.standingQueue.Load()
	wg.Wait()
	sum1, n1 := waits()
	n := n1 - n0
	if n < 20 {
		t.Fatalf("only %d calls answered after settling", n)
	}
	mean := time.Duration((sum1 - sum0) / float64(n) * float64(time.Second))
	t.Logf("after settling: %d answered, mean queue wait %v; queue %d (standing %v); limit %d", n, mean, queue, standing, gw.g.limiter.Limit())
	if !standing || queue != standingSize {
		t.Errorf("queue %d (standing %v) under overload, want the standing size %d", queue, standing, standingSize)
	}
	if mean > 500*time.Millisecond {
		t.Errorf("mean queue wait %v under overload: the queue stood near the verifier's 1s bound, want it held near the %v delay", mean, cfg.VerifierQueueDelay)
	}
}

// A worker count no answer repeats is forgotten after workersTTL: a
// verifier that only refuses is not credited with the workers it once had.
func TestWorkerCountExpires(t *testing.T) {
	v := startVerifier(t, func(c *verifier.Config) { c.Workers = 3 })
	gw := startGateway(t, gatewayConfig(v.addr))
	gw.waitServing(t, 1)
	gw.learnService(t, storedHash("pw", 64, 1))
	b := gw.g.backends.list()[0]
	if got := b.workers.Load(); got != 3 {
		t.Fatalf("workers %d after an answer, want 3", got)
	}
	b.expireWorkers(time.Now().Add(workersTTL / 2))
	if got := b.workers.Load(); got != 3 {
		t.Fatalf("workers %d half a TTL later, want 3", got)
	}
	b.expireWorkers(time.Now().Add(workersTTL + time.Second))
	if got := b.workers.Load(); got != 0 {
		t.Fatalf("workers %d a TTL after the last answer, want 0 (forgotten)", got)
	}
}

// A verifier whose recent service times were all inflated (every hash in
// the window spanned a pause, or the host was busy for a moment) keeps its
// queue for the seconds the held sizes cover: a blip takes no slots away
// from the next burst (at m = 19 MiB a one-second stretch halved the slots
// and the gateway refused 1.6 % of a 0.7 C load the control served). When
// the inflation lasts, the queue falls to one call per worker, not none:
// the calls it still gets answer at their true speed, and the median, so
// its queue, is back after one window of answers. Nothing but traffic can
// lower the median, so the floor is what keeps it from sticking.
func TestPoisonedServiceTimeRecoversUnderTraffic(t *testing.T) {
	// A bound of its own shorter than the poisoned median, so that the
	// floor is the delay's one per worker, not a burst's queue.
	v := startVerifier(t, func(c *verifier.Config) { c.MaxQueueWait = time.Second })
	cfg := gatewayConfig(v.addr)
	cfg.VerifierQueueDelay = 500 * time.Millisecond
	gw := startGateway(t, cfg)
	gw.waitServing(t, 1)
	stored := storedHash("pw", 64, 1)
	gw.learnService(t, stored)
	b := gw.g.backends.list()[0]
	healthy := b.queue.Load()
	if healthy < 10 {
		t.Fatalf("queue %d with %v of service time, want ≥ 10 (500ms of it)", healthy, b.service.median())
	}
	for range serviceSamples {
		b.service.observe(10 * time.Second)
	}
	gw.g.fitQueues()
	gw.g.fitCeiling()
	if got := b.queue.Load(); got != healthy {
		t.Fatalf("queue %d right after a burst of slow hashes, want %d (held)", got, healthy)
	}
	// The current second and the ten before it are held.
	for range len(b.queueSizes.ring) + 1 {
		b.queueSizes.roll() // a second each, as the housekeeping does: the held sizes roll out
		b.burstSizes.roll()
		gw.g.fitQueues()
	}
	gw.g.fitCeiling()
	if got, want := b.queue.Load(), max(b.workers.Load(), 1); got != want {
		t.Fatalf("queue %d with a 10 s median for %d seconds, want the floor of one per worker (%d)", got, len(b.queueSizes.ring)+1, want)
	}
	for i := range serviceSamples {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
		cancel()
		if err != nil {
			t.Fatalf("call %d with the median poisoned: %v", i, err)
		}
	}
	// Back from the floor to the size of a sub-millisecond hash: a tenth of
	// the healthy size at least (the floor is one or two calls), not half of
	// it, because on a loaded machine these answers can take twice as long
	// as the ones learnt first (CI: median 912µs, queue 1,097 of 2,326).
	if got := b.queue.Load(); got < healthy/10 {
		t.Errorf("queue %d after %d answers at the true speed (median %v), want about %d again", got, serviceSamples, b.service.median(), healthy)
	}
}

// The queue size a verifier is held at is in calls, so it belongs to the
// worker count it was computed for: a verifier that now runs fewer workers
// (restarted smaller, its capacity knob turned down) is not credited with
// the queue of the workers it had.
func TestHeldQueueForgetsAnotherWorkerCount(t *testing.T) {
	var b backend
	b.sawWorkers(4)
	for range serviceSamples {
		b.service.observe(10 * time.Millisecond)
	}
	b.fitQueue(500 * time.Millisecond)
	if got := b.queue.Load(); got != 200 {
		t.Fatalf("queue of 4 workers at 10 ms for 500 ms = %d, want 200", got)
	}
	b.sawWorkers(1)
	b.fitQueue(500 * time.Millisecond)
	if got := b.queue.Load(); got != 50 {
		t.Fatalf("queue after the verifier went down to 1 worker = %d, want 50 (the 200 held for 4 forgotten)", got)
	}
	b.workAt.Store(time.Now().Add(-2 * workersTTL).UnixNano())
	b.expireWorkers(time.Now())
	b.fitQueue(500 * time.Millisecond)
	if got := b.queue.Load(); got != 50 {
		t.Fatalf("queue after the worker count expired = %d, want 50 (one worker assumed)", got)
	}
}

// What a verifier says of its queue bound takes effect at its next answer:
// a smaller bound (the verifier restarted with a shorter -max-queue-wait)
// forgets the burst sizes held for the larger one at once rather than
// after the hold rolls out, and an answer that names no bound (restarted
// unguarded, or an older binary) clears it.
func TestQueueBoundFollowsTheAnswers(t *testing.T) {
	const delay = 300 * time.Millisecond
	var b backend
	answer := func(bound time.Duration) int64 {
		b.saw(callmeta.Served{Workers: 1, MaxQueueWait: bound})
		b.fitQueue(delay)
		return b.queue.Load()
	}
	for range serviceSamples {
		b.service.observe(100 * time.Millisecond)
	}
	if got := answer(1500 * time.Millisecond); got != 10 {
		t.Fatalf("queue %d with a 1.5s bound at 100ms, want 10 (two thirds of it)", got)
	}
	if got := answer(900 * time.Millisecond); got != 6 {
		t.Fatalf("queue %d right after the bound fell to 900ms, want 6 (the 10 held for the old bound forgotten)", got)
	}
	if got := answer(-1); got != 3 {
		t.Fatalf("queue %d after an answer naming no bound, want the delay's 3", got)
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
	// newBackend is a verifier of one worker at service, with a 1 s bound,
	// ticked once as the housekeeping would with nothing held.
	newBackend := func(service time.Duration) *backend {
		b := new(backend)
		b.sawWorkers(1)
		b.maxWait.Store(int64(time.Second))
		for range serviceSamples {
			b.service.observe(service)
		}
		b.fitQueue(delay)
		b.judgeStanding()
		return b
	}
	tick := func(b *backend) int64 {
		b.judgeStanding()
		b.fitQueue(delay)
		return b.queue.Load()
	}
	// during is one second at b: calls come back until low are held, then
	// more arrive and one of those comes back.
	during := func(b *backend, low int64) {
		for b.pending.Load() > low {
			b.release()
		}
		b.pending.Add(4)
		b.release()
	}

	b := newBackend(100 * time.Millisecond)
	standing, burst := b.standingQueue.Load(), b.queue.Load()
	if standing != 3 || burst != 7 {
		t.Fatalf("standing %d, burst %d at 100ms for 300ms and a 1s bound, want 3 and 7", standing, burst)
	}
	b.pending.Store(9) // a burst arrived
	if got := tick(b); got != burst {
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
			b.pending.Store(c.carry)
			if got := tick(b); got != c.want {
				t.Fatalf("queue %d after a second with %d held and nothing released, want %d", got, c.carry, c.want)
			}
		}
		if c.low >= 0 {
			during(b, c.low)
		}
		if got := tick(b); got != c.want {
			t.Fatalf("queue %d after %s, want %d", got, c.what, c.want)
		}
	}
	b.pending.Store(9)
	tick(b)
	during(b, 5)
	if got := tick(b); got != standing {
		t.Fatalf("queue %d after standing again, want %d", got, standing)
	}
	b.pending.Store(0) // the traffic stops: nothing comes back, and nothing is held
	if got := tick(b); got != burst {
		t.Fatalf("queue %d idle, want the burst %d back", got, burst)
	}
	b.pending.Store(8) // a burst late in an idle second, one call back before the tick
	b.release()
	if got := tick(b); got != burst {
		t.Fatalf("queue %d after a burst late in an idle second, want the burst %d still", got, burst)
	}

	// A standing size of one call: held full, each release leaves the
	// worker's call and none queued until the next arrives.
	b = newBackend(400 * time.Millisecond)
	if b.standingQueue.Load() != 1 {
		t.Fatalf("standing size %d at 400ms for 300ms, want 1", b.standingQueue.Load())
	}
	b.pending.Store(9)
	tick(b)
	during(b, 5)
	if got := tick(b); got != 1 {
		t.Fatalf("queue %d after a standing second, want 1", got)
	}
	for range 3 {
		b.pending.Store(2) // the worker's call and one queued
		for range 5 {
			b.release()
			b.pending.Add(1)
		}
		if got := tick(b); got != 1 {
			t.Fatalf("queue %d held full at a standing size of one, want 1 (not drained)", got)
		}
	}
}
