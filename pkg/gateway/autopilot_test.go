package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
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

			capacity := capacityOf(t, gw, stored, 4)
			rate := 0.6 * capacity
			t.Logf("capacity %.0f/s; offering %.0f logins/s", capacity, rate)

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
			end := triggerEnd.Add(12 * time.Second)
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
			after, nAfter := users.goodput(end.Add(-4*time.Second), end.Add(-time.Second))
			t.Logf("goodput before the trigger %.2f (%d users); 9-12 s after it ended %.2f (%d users)", before, nBefore, after, nAfter)
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
			if after < 0.9 {
				t.Errorf("with the autopilot goodput is %.2f after the trigger, want ≥ 0.9", after)
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

// Once engaged, the autopilot has no dead band: with queue wait between its
// ramp threshold and the client timeout (the signature gone, the queue not
// yet short) and the clamp binding every tick, it keeps ramping and stands
// down when the clamp reaches the ceiling. It used to do nothing on such a
// tick, and stayed engaged for as long as the queue sat there (1,000 ticks
// and more).
func TestAutopilotHasNoDeadBand(t *testing.T) {
	v := startVerifier(t, nil)
	cfg := gatewayConfig(v.addr)
	cfg.Autopilot.Enabled = true
	cfg.Autopilot.Tick = time.Hour // the test ticks it by hand
	gw := startGateway(t, cfg)
	gw.waitServing(t, 1)
	a := gw.g.auto
	ap := cfg.Autopilot
	congested := signals{answers: 100, throughput: 100, goodput: 0.1, queueWait: 3 * ap.ClientTimeout, busy: 4, peak: 10}
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
