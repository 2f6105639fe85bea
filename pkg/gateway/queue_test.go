package gateway

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
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
	v1, v2 := startVerifier(t, nil), startVerifier(t, nil)
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

// The limiter aims at twice the wait the verifiers' queues allow (the queue
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
	v := startVerifier(t, nil)
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
