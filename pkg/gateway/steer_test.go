package gateway

import (
	"context"
	"math/rand/v2"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/verifier"
)

// Tests that one caller, sending only valid requests, cannot move what the
// gateway's control loops give everyone else (docs/gateway.md, "What a
// caller cannot steer").

// A caller whose deadlines are too tight for the queue ahead is refused by
// the verifier for its own deadline (DEADLINE_EXCEEDED), which is not the
// verifier's overload: the gateway's limit stays where the honest load puts
// it, and the honest callers are not refused (beyond the odd one a limit
// at its few slots refuses on a slow machine). Before, the verifier answered
// RESOURCE_EXHAUSTED with pushback -1 for it, the gateway counted that as
// overload, and one client sending 19 calls/s with deadlines of 1.1–2× the
// hash's cost took the limit from 1,000 to 4–6 and had about half the
// honest attempts refused.
func TestTightDeadlinesDoNotShrinkTheLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("load test; runs in the full suite")
	}
	// A queue bound of 5 s: the gateway's slots at the verifier (two
	// thirds of the bound's worth of hashes) then leave room for the tight
	// client beside the honest callers however slow this machine's hashes
	// run, so that its calls reach the verifier and are refused there.
	v := startVerifier(t, func(c *verifier.Config) { c.MaxQueueWait = 5 * time.Second })
	gw := startGateway(t, gatewayConfig(v.addr))
	gw.waitServing(t, 1)
	// Each hash holds a worker for ~50× its CPU time (about 50 ms): slow
	// in wall time, light on the cores the load shares, and long beside
	// the gateway's forwarding margin, so that the tight deadlines below
	// cover a hash but not the queue ahead of it.
	v.slow(t, 50)
	stored := storedHash("pw", 1024, 1)
	gw.learnService(t, stored)
	expected := expectedCost(t, v, stored) // before the load: the probe must reach the verifier

	// Closed loop, two per worker: a queue of about one hash stands at
	// each worker, within the slots the gateway gives the verifier.
	const honestCallers = 4
	var honest, tight tally
	var stop atomic.Bool
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for range honestCallers {
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := gw.client.Verify(cctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
				ccancel()
				honest.add(code(err).String())
				if err != nil {
					time.Sleep(20 * time.Millisecond) // a refused caller backs off
				}
			}
		})
	}
	time.Sleep(2 * time.Second) // the honest load alone
	limitAlone := gw.g.limiter.Limit()

	// The tight client: 20 calls/s for 6 s, each forwarded with a deadline
	// of 1.1–2× what the verifier expects one hash to take (the gateway
	// keeps its margin): enough for the hash, not for the queue ahead.
	lowest := limitAlone
	before := honest.snapshot()
	tightDone := make(chan struct{})
	go func() {
		defer close(tightDone)
		openLoop(20, 6*time.Second, func(int) callmeta.Priority { return callmeta.Interactive }, func(int, callmeta.Priority) {
			d := testDeadline.Margin + time.Duration((1.1+0.9*rand.Float64())*float64(expected))
			cctx, ccancel := context.WithTimeout(ctx, d)
			defer ccancel()
			_, err := gw.client.Verify(cctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
			tight.add(code(err).String())
		})
	}()
	for done := false; !done; {
		select {
		case <-tightDone:
			done = true
		case <-time.After(50 * time.Millisecond):
		}
		lowest = min(lowest, gw.g.limiter.Limit())
	}
	stop.Store(true)
	wg.Wait()

	h, tc := honest.snapshot(), tight.snapshot()
	t.Logf("expected hash %v; limit alone %d, lowest with the tight client %d; honest alone %v, then %v; tight %v",
		expected.Round(time.Millisecond), limitAlone, lowest, before, h, tc)
	for k, n := range before {
		h[k] -= n
	}
	if lowest*5 < limitAlone*4 {
		t.Errorf("the limit fell from %d to %d beside the tight client, want within 20 %%", limitAlone, lowest)
	}
	honestAll := 0
	for _, n := range h {
		honestAll += n
	}
	if refused := h[codes.ResourceExhausted.String()]; refused*10 > honestAll {
		t.Errorf("%d of %d honest calls refused as overload beside the tight client, want at most 10 %%", refused, honestAll)
	}
	if tc[codes.DeadlineExceeded.String()] < 60 {
		t.Errorf("the tight client was refused for its deadline %d times of 120 (%v): the test did not reach the case",
			tc[codes.DeadlineExceeded.String()], tc)
	}
}

// expectedCost is what verifier v expects one check against stored to
// take, as its refusal of a deadline too short for it says (asked
// directly: the gateway tells a caller no verifier's estimate).
func expectedCost(t *testing.T, v *testVerifier, stored string) time.Duration {
	t.Helper()
	re := regexp.MustCompile(`is shorter than the expected argon2id time (\S+)$`)
	var m []string
	for i := 0; m == nil; i++ {
		// 10 ms beyond the margin: shorter than any hash here, long
		// enough to reach the verifier before it passes.
		ctx, cancel := context.WithTimeout(t.Context(), testDeadline.Margin+10*time.Millisecond)
		_, err := verifyv1.NewVerifyServiceClient(v.cc).Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
		cancel()
		if m = re.FindStringSubmatch(status.Convert(err).Message()); m == nil && i == 10 {
			t.Fatalf("a call with 10 ms beyond the margin: %v; want the verifier's refusal naming its expected time", err)
		}
	}
	d, err := time.ParseDuration(m[1])
	if err != nil || d <= 0 {
		t.Fatalf("expected time %q: %v", m[1], err)
	}
	return d
}

// A caller that cancels its own calls a few milliseconds after sending them
// chose to leave: that is not work the fleet wasted, and it does not engage
// the autopilot. Before, every such call counted as work done for nobody:
// beside honest callers answered in 500 ms with 300 ms of reported queue
// wait, about 72 self-cancelling calls a second made the fleet look
// metastable, and the autopilot engaged after three ticks, clamped
// admission and cut the honest answers by a third to two thirds.
//
// The autopilot is ticked by hand, once per second of traffic, so what is
// judged is what each second's calls counted, not when ticks fall.
func TestSelfCancellingCallersDoNotEngageTheAutopilot(t *testing.T) {
	if testing.Short() {
		t.Skip("sends traffic for seconds")
	}
	fake := func() *slowVerifier {
		return &slowVerifier{answerIn: 500 * time.Millisecond, queueWait: 300 * time.Millisecond, workers: 8}
	}
	cfg := gatewayConfig(serveBackend(t, fake()), serveBackend(t, fake()))
	cfg.Autopilot = DefaultConfig().Autopilot
	cfg.Autopilot.Tick = time.Hour // ticked by hand below
	gw := startGateway(t, cfg)
	gw.waitServing(t, 2)
	a := gw.g.auto
	stored := storedHash("pw", 64, 1)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 16 { // honest: about 32 calls/s, each answered in 500 ms
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := gw.client.Verify(cctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
				ccancel()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	var cancelled atomic.Int64
	wg.Go(func() { // the leaver: 72 calls/s, each cancelled after 30 ms
		openLoop(72, 5*time.Second, func(int) callmeta.Priority { return callmeta.Interactive }, func(int, callmeta.Priority) {
			cctx, ccancel := context.WithCancel(ctx)
			timer := time.AfterFunc(30*time.Millisecond, ccancel)
			defer timer.Stop()
			defer ccancel()
			if _, err := gw.client.Verify(cctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")}); code(err) == codes.Canceled {
				cancelled.Add(1)
			}
		})
	})
	time.Sleep(time.Second) // the first answers take 500 ms
	a.read(time.Second)     // forget the first second's partial counts
	for i := range 4 {
		time.Sleep(time.Second)
		s := a.read(time.Second)
		t.Logf("tick %d: %d calls worked on, goodput %.2f, queue wait %v", i+1, s.answers, s.goodput, s.queueWait)
		if s.answers == 0 || s.goodput < 0.9 {
			t.Errorf("tick %d: %d calls worked on, goodput %.2f; want the honest answers, nearly all in time", i+1, s.answers, s.goodput)
		}
		a.tick(s)
		if a.engaged.Load() {
			t.Errorf("the autopilot engaged after %d ticks of honest answers in time beside a caller cancelling its own calls", i+1)
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := cancelled.Load(); n < 100 {
		t.Fatalf("only %d calls were cancelled by their caller: the test did not reach the case", n)
	}
}

// A verifier's service time, as the gateway learns it from the verifier's
// trailers, counts each answer by the cost the verifier expected of it:
// a flood of valid but tiny hashes (m = 8 KiB) does not make the verifier
// look fast, so its queue size and the capacity behind the bistability
// margin stay where the honest answers put them. Before, twelve such
// answers took the median to microseconds, the queue to its 10,000-call
// cap and the capacity up 190×.
func TestCheapHashesDoNotInflateTheGatewaysEstimates(t *testing.T) {
	v := startVerifier(t, nil)
	gw := startGateway(t, gatewayConfig(v.addr))
	gw.waitServing(t, 1)
	honest := storedHash("pw", 4096, 2)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for range 16 {
		if _, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: honest, Password: []byte("pw")}); err != nil {
			t.Fatal(err)
		}
	}
	node := gw.g.verifiers.List()[0]
	service, capacity := node.ServiceTime(), gw.g.verifiers.Capacity()
	queue, _, _ := node.Queue()

	tiny := storedHash("pw", 8, 1)
	var wg sync.WaitGroup
	var answered atomic.Int64
	for range 40 {
		wg.Go(func() {
			if _, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: tiny, Password: []byte("pw")}); err == nil {
				answered.Add(1)
			}
		})
	}
	wg.Wait()
	if answered.Load() < 12 {
		t.Fatalf("only %d of 40 tiny hashes answered: the test did not reach the case", answered.Load())
	}
	gotQueue, _, _ := node.Queue()
	t.Logf("service %v → %v, capacity %.0f/s → %.0f/s, queue %d → %d after %d tiny hashes",
		service, node.ServiceTime(), capacity, gw.g.verifiers.Capacity(), queue, gotQueue, answered.Load())
	if got := node.ServiceTime(); got < service/2 {
		t.Errorf("service time %v after tiny hashes, was %v", got, service)
	}
	if got := gw.g.verifiers.Capacity(); got > 2*capacity {
		t.Errorf("capacity %.0f/s after tiny hashes, was %.0f/s", got, capacity)
	}
	if gotQueue > 2*queue {
		t.Errorf("queue %d after tiny hashes, was %d", gotQueue, queue)
	}
}
