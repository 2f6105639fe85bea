package gateway

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/verifier"
)

// userLog records, per user (a logical login), when its first attempt
// started and whether any attempt was answered within the user's patience.
type userLog struct {
	mu    sync.Mutex
	start []time.Time
	ok    []bool
}

func (l *userLog) add(start time.Time, ok bool) {
	l.mu.Lock()
	l.start = append(l.start, start)
	l.ok = append(l.ok, ok)
	l.mu.Unlock()
}

// goodput is the fraction of users who started in [from, to) and succeeded.
func (l *userLog) goodput(from, to time.Time) (float64, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n, ok int
	for i, s := range l.start {
		if !s.Before(from) && s.Before(to) {
			n++
			if l.ok[i] {
				ok++
			}
		}
	}
	if n == 0 {
		return 0, 0
	}
	return float64(ok) / float64(n), n
}

// The metastable lab in miniature. The fleet is configured the way that lets
// congestion outlive its trigger: verifiers with a deep FIFO queue, a gateway
// whose limit is fixed high and that may queue at the verifiers (its default
// sends a verifier no more than its workers can start), and users who send long deadlines but give up
// after a second without cancelling, then retry (up to 3 attempts) — waiting
// is abandoned, the work is not. A 3-second slowdown pushes the queue past the
// users' patience; afterwards the retries keep it there.
//
// Without the autopilot, goodput stays collapsed long after the trigger. With
// it, the gateway recognises the signature, cuts abandoned work, clamps and
// ramps, and goodput returns to full; then the autopilot stands down.
func TestAutopilotRecoversMetastableFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("load test; runs in the full suite")
	}
	testlock.Quiet(t) // judged by what a loaded fleet answers in time
	// Both runs offer the same rate, from the first run's measurement: the
	// first shows that this rate congests the fleet for good, the second
	// that the autopilot brings the same fleet back. (Measured in each run,
	// a low reading in the second, taken while another package's tests
	// held the CPU, offered too little to congest anything.)
	var rate float64
	for _, on := range []bool{false, true} {
		name := map[bool]string{false: "autopilot off stays congested", true: "autopilot on recovers"}[on]
		t.Run(name, func(t *testing.T) {
			deep := func(c *verifier.Config) {
				c.QueueCapacity = 2000
				c.MaxQueueWait = time.Hour
				c.LIFOAfter = time.Hour
			}
			v1, v2 := startVerifier(t, deep), startVerifier(t, deep)
			cfg := gatewayConfig(v1.addr, v2.addr)
			cfg.Admission.InitialLimit, cfg.Admission.MinLimit, cfg.Admission.Ceiling = 300, 300, 300
			cfg.VerifierQueueDelay = time.Minute // and deep queues at the verifiers allowed
			cfg.Autopilot.Enabled = on
			cfg.Autopilot.ClientTimeout = time.Second
			cfg.Autopilot.Tick = 250 * time.Millisecond
			cfg.Autopilot.EngageAfter = 2
			cfg.Autopilot.RampQueueWait = 100 * time.Millisecond
			cfg.Autopilot.StandDownAfter = 4
			gw := startGateway(t, cfg)
			gw.waitServing(t, 2)
			const base = 20.0
			v1.slow(t, base)
			v2.slow(t, base)
			stored := storedHash("pw", 1024, 1)

			if rate == 0 {
				capacity := capacityOf(t, gw, stored, 4)
				rate = 0.6 * capacity
				t.Logf("capacity %.0f/s; offering %.0f logins/s", capacity, rate)
			}

			const patience = time.Second
			root, stopCalls := context.WithCancel(context.Background())
			var calls sync.WaitGroup
			defer func() {
				stopCalls()
				calls.Wait()
			}()
			var users userLog
			user := func() {
				start := time.Now()
				for attempt := 1; attempt <= 3; attempt++ {
					ctx, cancel := context.WithTimeout(callmeta.AppendOutgoing(root,
						callmeta.Facts{Attempt: attempt, Priority: callmeta.Interactive}), 30*time.Second)
					answer := make(chan error, 1)
					calls.Add(1)
					go func() {
						defer calls.Done()
						defer cancel()
						_, err := gw.client.Verify(ctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
						answer <- err
					}()
					select {
					case err := <-answer:
						if err == nil {
							users.add(start, true)
							return
						}
						time.Sleep(50 * time.Millisecond) // refused: retry soon
					case <-time.After(patience):
						// Gives up waiting; the call is left running.
					case <-root.Done():
						return
					}
				}
				users.add(start, false)
			}

			began := time.Now()
			trigger := began.Add(2 * time.Second)
			triggerEnd := trigger.Add(3 * time.Second)
			end := triggerEnd.Add(15 * time.Second)
			var engaged atomic.Bool
			var sampler sync.WaitGroup
			sampler.Add(1)
			go func() {
				defer sampler.Done()
				// The trigger: both verifiers three times slower for two
				// seconds. Meanwhile, sample the autopilot's state.
				slowAll := func(f float64) {
					for _, v := range []*testVerifier{v1, v2} {
						if _, err := v.admin.SetCapacity(context.Background(), &verifyv1.SetCapacityRequest{
							WorkerFraction: 1, Slowdown: f}); err != nil {
							t.Error(err)
						}
					}
				}
				phase := 0
				var lastLog time.Time
				for time.Now().Before(end) {
					switch now := time.Now(); {
					case phase == 0 && now.After(trigger):
						slowAll(4 * base)
						phase = 1
					case phase == 1 && now.After(triggerEnd):
						slowAll(base)
						phase = 2
					}
					if gw.g.auto.engaged.Load() {
						engaged.Store(true)
					}
					if testing.Verbose() && time.Since(lastLog) >= time.Second {
						lastLog = time.Now()
						t.Logf("t=%2.0fs inflight %3d limit %3d queued %v/%v engaged %v",
							time.Since(began).Seconds(), gw.g.limiter.InFlight(), gw.g.limiter.Limit(),
							v1.metric(t, "levee_verifier_queue_length", nil), v2.metric(t, "levee_verifier_queue_length", nil),
							gw.g.auto.engaged.Load())
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
			openLoop(rate, end.Sub(began), func(int) callmeta.Priority { return callmeta.Interactive }, func(int, callmeta.Priority) {
				user()
			})
			sampler.Wait()

			before, nBefore := users.goodput(began.Add(500*time.Millisecond), trigger)
			// Judged over six seconds, from 8 s after the trigger ended: a
			// congested fleet reads about 0 there, a recovered one about 1,
			// and a second in which a busy host starves the fleet (another
			// package's binary linking beside this test) costs a recovered
			// fleet a sixth of one window, not a third.
			after, nAfter := users.goodput(triggerEnd.Add(8*time.Second), end.Add(-time.Second))
			t.Logf("goodput before the trigger %.2f (%d users); 8-14 s after it ended %.2f (%d users)", before, nBefore, after, nAfter)
			var timeline strings.Builder
			for s := began; s.Before(end); s = s.Add(time.Second) {
				g, n := users.goodput(s, s.Add(time.Second))
				fmt.Fprintf(&timeline, " %.0fs:%.2f/%d", s.Sub(began).Seconds(), g, n)
			}
			t.Logf("goodput by the second users started (t:goodput/users):%s", timeline.String())
			t.Logf("autopilot engaged: %v; actions: engage %v ramp %v tighten %v stand_down %v; flushed %v", engaged.Load(),
				gw.metric(t, "levee_gateway_autopilot_actions_total", map[string]string{"action": "engage"}),
				gw.metric(t, "levee_gateway_autopilot_actions_total", map[string]string{"action": "ramp"}),
				gw.metric(t, "levee_gateway_autopilot_actions_total", map[string]string{"action": "tighten"}),
				gw.metric(t, "levee_gateway_autopilot_actions_total", map[string]string{"action": "stand_down"}),
				gw.metric(t, "levee_gateway_autopilot_flushed_total", nil))
			if before < 0.9 {
				t.Fatalf("goodput before the trigger %.2f: the fleet was not healthy to begin with", before)
			}
			if !on {
				if after > 0.5 {
					t.Errorf("without the autopilot goodput recovered to %.2f: the test did not create the congested state", after)
				}
				return
			}
			if after < 0.8 {
				t.Errorf("with the autopilot goodput is %.2f after the trigger, want ≥ 0.8", after)
			}
			if !engaged.Load() || gw.metric(t, "levee_gateway_autopilot_actions_total", map[string]string{"action": "engage"}) == 0 {
				t.Errorf("the autopilot never engaged")
			}
			waitFor(t, 10*time.Second, "the autopilot to stand down", func() bool { return !gw.g.auto.engaged.Load() })
			if got := gw.g.limiter.Snapshot().Emergency; got != 0 {
				t.Errorf("autopilot clamp %d after standing down, want none", got)
			}
		})
	}
}

// handTicked starts a gateway over one verifier with its autopilot on and
// ticking only when the test calls tick.
func handTicked(t *testing.T) (*autopilot, *testGateway, AutopilotConfig) {
	t.Helper()
	v := startVerifier(t, nil)
	cfg := gatewayConfig(v.addr)
	cfg.Autopilot.Enabled = true
	cfg.Autopilot.Tick = time.Hour // the test ticks it by hand
	gw := startGateway(t, cfg)
	gw.waitServing(t, 1)
	return gw.g.auto, gw, cfg.Autopilot
}

// congestedTick is a tick showing the metastable signature: answers mostly
// late, a standing queue, throughput held.
func congestedTick(ap AutopilotConfig) signals {
	return signals{answers: 100, throughput: 100, goodput: 0.1, queueWait: 3 * ap.ClientTimeout, waitKnown: true,
		busy: 4, peak: 10}
}

// Once engaged, the autopilot has no dead band: with queue wait between its
// ramp threshold and the client timeout (the signature gone, the queue not
// yet short) and the clamp binding every tick, it keeps ramping and stands
// down when the clamp reaches the ceiling. It used to do nothing on such a
// tick, and stayed engaged for as long as the queue sat there (1,000 ticks
// and more).
func TestAutopilotHasNoDeadBand(t *testing.T) {
	a, gw, ap := handTicked(t)
	congested := congestedTick(ap)
	for range ap.EngageAfter {
		a.tick(congested)
	}
	if !a.engaged.Load() {
		t.Fatalf("not engaged after %d congested ticks", ap.EngageAfter)
	}
	between := signals{answers: 100, throughput: 100, goodput: 0.9, queueWait: (ap.RampQueueWait + ap.ClientTimeout) / 2,
		busy: 4, peak: 1 << 20}
	for i := range 1000 {
		a.tick(between)
		if !a.engaged.Load() {
			t.Logf("stood down after %d ticks between the ramp threshold and the client timeout", i+1)
			if got := gw.g.limiter.Snapshot().Emergency; got != 0 {
				t.Errorf("emergency clamp %d after standing down, want none", got)
			}
			return
		}
	}
	t.Fatalf("still engaged after 1,000 ticks with queue wait %v (between %v and %v) and no signature",
		between.queueWait, ap.RampQueueWait, ap.ClientTimeout)
}

// A stall is not the metastable signature. Ticks in which calls only expire
// (forwarded, no verifier answering: every verifier paused) neither engage
// the autopilot nor, once it is engaged, tighten its clamp; and such a tick
// between two congested ones is no evidence either way, as a quiet tick is;
// a longer stall forgets the congested ticks before it.
// Before, a 10 s pause of every verifier engaged it with a clamp of one call
// (the stall measured no capacity), and its ramp held admission back for
// 2 s after the unpause.
func TestAutopilotTreatsAStallAsNoEvidence(t *testing.T) {
	a, _, ap := handTicked(t)
	stalled := signals{answers: 100, throughput: 100, peak: 10}
	congested := congestedTick(ap)
	for range 3 * ap.EngageAfter {
		a.tick(stalled)
	}
	if a.engaged.Load() {
		t.Fatalf("engaged by %d ticks of a stall", 3*ap.EngageAfter)
	}
	// A stall longer than EngageAfter ticks forgets the congested ticks
	// before it: the first ticks after a stall are not the signature's
	// continuation.
	for range ap.EngageAfter - 1 {
		a.tick(congested)
	}
	for range ap.EngageAfter + 1 {
		a.tick(stalled)
	}
	a.tick(congested)
	if a.engaged.Load() {
		t.Fatalf("engaged by one congested tick after a stall of %d ticks", ap.EngageAfter+1)
	}
	for range ap.EngageAfter + 1 { // no evidence, and the count starts again
		a.tick(stalled)
	}
	for i := range ap.EngageAfter {
		a.tick(congested)
		if i < ap.EngageAfter-1 {
			a.tick(stalled)
		}
	}
	if !a.engaged.Load() {
		t.Fatalf("not engaged after %d congested ticks with stalled ones between", ap.EngageAfter)
	}
	// Once engaged, the stall ticks below must not tighten the clamp.
	clamp := a.clamp
	for range 3 {
		a.tick(stalled)
	}
	if a.clamp < clamp {
		t.Errorf("clamp tightened from %.1f to %.1f by ticks of a stall", clamp, a.clamp)
	}
	// The way back when the stall outlasts the engagement and no answer ever
	// comes: the clamp ramps through it to the ceiling and stands down.
	for i := 0; a.engaged.Load(); i++ {
		if i == 1000 {
			t.Fatalf("still engaged after 1,000 ticks of a stall (clamp %.1f)", a.clamp)
		}
		a.tick(stalled)
	}
}

// slowVerifier answers every call after answerIn, reporting what a verifier
// at its default -max-queue-wait reports when its queue stands: a queue wait
// just under that bound, the rest of answerIn hashing, and workers workers.
// With answerIn past the client timeout every answer comes after the typical
// caller left. With overloadEvery it refuses every n-th call at once, as an
// overloaded verifier does; with promptEvery it answers every n-th call in
// promptIn, as a congested verifier still answers some callers in time.
type slowVerifier struct {
	verifyv1.UnimplementedVerifyServiceServer
	answerIn, queueWait time.Duration
	workers             int
	overloadEvery       int // every n-th call is refused as overloaded (0: none)
	promptEvery         int // every n-th call (from the first) is answered in promptIn instead (0: none)
	calls               atomic.Int64
}

// promptIn is how soon a slowVerifier answers its prompt calls.
const promptIn = time.Second

func (s *slowVerifier) Verify(ctx context.Context, _ *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	n := s.calls.Add(1)
	if s.overloadEvery > 0 && n%int64(s.overloadEvery) == 0 {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(callmeta.PushbackKey, "-1", callmeta.WorkersKey, strconv.Itoa(s.workers)))
		return nil, status.Error(codes.ResourceExhausted, "verifier overloaded: projected queue wait exceeds the maximum; do not retry")
	}
	answerIn := s.answerIn
	if s.promptEvery > 0 && n%int64(s.promptEvery) == 1 {
		answerIn = promptIn
	}
	select {
	case <-time.After(answerIn):
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	_ = grpc.SetTrailer(ctx, metadata.Pairs(
		callmeta.QueueWaitKey, strconv.FormatInt(s.queueWait.Microseconds(), 10),
		callmeta.ServiceTimeKey, strconv.FormatInt(max(answerIn-s.queueWait, time.Millisecond).Microseconds(), 10),
		callmeta.WorkersKey, strconv.Itoa(s.workers)))
	return &verifyv1.VerifyResponse{Match: true}, nil
}

// The autopilot's signature is reachable with the verifiers' default flags.
// A verifier refuses what would wait longer than -max-queue-wait (1 s by
// default), so the queue wait it reports never reaches the 2 s client
// timeout the autopilot used to require: it could not engage however late
// every answer came. It engages now when most of the work the fleet does
// ends after the typical caller gave up (answered late, or the caller's
// deadline passing while it waited) while the queue stands and throughput
// holds; and not when the answers come in time, even with the queue at its
// bound and a third of the calls refused as overloaded (overload is the
// limiter's business: a clamp under capacity would only lose goodput); nor
// when the fleet answers nothing at all (a stall: every call's deadline
// passes, which looks like wasted work, but there is no queue a clamp could
// drain, and a clamp set then held the fleet back after the stall ended).
func TestAutopilotEngagesUnderDefaultQueueBounds(t *testing.T) {
	if testing.Short() {
		t.Skip("drives the autopilot's ticks for seconds")
	}
	// Judged by what the autopilot's real one-second ticks see: on busy
	// cores the answers come in waves that break its three-tick evidence.
	testlock.Quiet(t)
	maxWait := verifier.DefaultConfig().MaxQueueWait
	for _, tc := range []struct {
		name       string
		answerIn   time.Duration
		overload   int
		prompt     int           // every n-th call answered in promptIn
		patience   time.Duration // the callers' deadline
		wantEngage bool
	}{
		{name: "answers after the client timeout", answerIn: 2500 * time.Millisecond, patience: 10 * time.Second, wantEngage: true},
		{name: "callers' deadlines end while most wait", answerIn: 2500 * time.Millisecond, prompt: 3, patience: 2 * time.Second,
			wantEngage: true},
		{name: "stalled: no call answered", answerIn: time.Hour, patience: 2 * time.Second},
		{name: "answers in time, a third refused as overloaded", answerIn: 950 * time.Millisecond, overload: 3,
			patience: 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := func() *slowVerifier {
				return &slowVerifier{answerIn: tc.answerIn, queueWait: maxWait * 9 / 10, workers: 8, overloadEvery: tc.overload,
					promptEvery: tc.prompt}
			}
			cfg := gatewayConfig(serveBackend(t, fake()), serveBackend(t, fake()))
			cfg.Autopilot = DefaultConfig().Autopilot // its defaults: 2 s client timeout, 1 s ticks, 3 to engage
			gw := startGateway(t, cfg)
			gw.waitServing(t, 2)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			stored := storedHash("pw", 64, 1)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			for i := range 24 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Staggered, so that answers arrive in every tick.
					select {
					case <-time.After(time.Duration(i) * 100 * time.Millisecond):
					case <-ctx.Done():
						return
					}
					for ctx.Err() == nil {
						cctx, ccancel := context.WithTimeout(ctx, tc.patience)
						_, err := gw.client.Verify(cctx, &verifyv1.VerifyRequest{EncodedHash: stored, Password: []byte("pw")})
						ccancel()
						if err != nil {
							time.Sleep(20 * time.Millisecond)
						}
					}
				}()
			}
			watch := 12 * time.Second
			end := time.Now().Add(watch)
			engaged := false
			for time.Now().Before(end) && !engaged {
				engaged = gw.g.auto.engaged.Load() ||
					gw.metric(t, "levee_gateway_autopilot_actions_total", map[string]string{"action": "engage"}) > 0
				time.Sleep(10 * time.Millisecond)
			}
			if engaged != tc.wantEngage {
				t.Errorf("engaged within %v: %v, want %v (answers in %v, reported queue wait %v under the verifiers' default -max-queue-wait %v)",
					watch, engaged, tc.wantEngage, tc.answerIn, maxWait*9/10, maxWait)
			}
		})
	}
}

// A verifier that refuses everything while its peers serve leaves rotation
// even where the outlier ejector, judging each node against its peers'
// median, cannot take it out: with two of three refusing, the median is
// theirs, and nobody is an outlier. The autopilot, which sees that one
// verifier answers and the others only refuse, ejects the refusing ones
// (for the ejector's backoff, ending by time alone: see
// TestRefusingVerifierIsEjected), and no call fails while they are out
// instead of two in three; it does not engage, since the fleet that
// remains is fine.
func TestAutopilotEjectsVerifiersRefusingEverything(t *testing.T) {
	good := startVerifier(t, nil)
	bad1, addr1 := startRefusing(t)
	bad2, addr2 := startRefusing(t)
	cfg := gatewayConfig(good.addr, addr1, addr2)
	cfg.Autopilot.Enabled = true
	cfg.Autopilot.Tick = 250 * time.Millisecond
	gw := startGatewayOnFakeClock(t, cfg)
	gw.waitServing(t, 3)

	var engaged atomic.Bool
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				if gw.g.auto.engaged.Load() {
					engaged.Store(true)
				}
			}
		}
	}()
	const step = 10 * time.Millisecond
	first := calls(t, gw, 100, step)
	then := calls(t, gw, 100, step) // 1 s: within the first ejection's 2 s
	close(stop)
	sampler.Wait()
	t.Logf("%d of the first 100 calls failed, %d of the next 100; the refusing verifiers saw %d and %d", first, then,
		bad1.calls.Load(), bad2.calls.Load())
	if first == 0 {
		t.Fatalf("no call failed: the refusing verifiers were not in rotation, the test tests nothing")
	}
	if then > 0 {
		t.Errorf("%d of 100 calls failed once the refusing verifiers were judged, want none", then)
	}
	for _, addr := range []string{addr1, addr2} {
		if ejected, _ := ejections(t, gw, addr); ejected != 1 {
			t.Errorf("%s not ejected: it refuses everything while another verifier serves", addr)
		}
	}
	if _, times := ejections(t, gw, good.addr); times != 0 {
		t.Errorf("the verifier that serves was ejected %v times", times)
	}
	if engaged.Load() {
		t.Errorf("the autopilot engaged: a fleet that is fine once the refusing verifiers are out is not congested")
	}
}
