package gateway

import (
	"math"
	"time"
)

// fitCeiling keeps the limit's ceiling at what the verifiers can hold (their
// workers plus their queues, see fitQueues), scaled so that the classes below critical
// share exactly that, and critical work has its reserve on top, in the extra
// slot each verifier keeps for it: the limiter's priority shares then divide
// the fleet's real capacity instead of a larger number that per-verifier slots
// would cut blindly, whatever the priority. It runs when a verifier reports a
// new worker count and once a second.
func (g *Gateway) fitCeiling() {
	st := g.settings.Load()
	ceiling := int64(intOr(st.Ceiling, g.cfg.Admission.Ceiling))
	if fleet := g.backends.totalSlots(); fleet > 0 {
		reserve := floatOr(st.CriticalReserve, g.cfg.Admission.CriticalReserve)
		ceiling = min(ceiling, int64(math.Ceil(float64(fleet)/(1-reserve)-1e-9)))
	}
	g.limiter.SetCeiling(int(ceiling))
	g.limiter.SetTarget(g.queueTarget())
}

// queueTarget is the verifier queue wait the limiter aims for: the
// configured target, or twice the wait the verifiers' standing queues are
// sized to allow when that is longer (VerifierQueueDelay plus one service
// time of the slowest serving verifier; capped at the typical client
// timeout). Each verifier may queue at least one call per worker, and up to
// VerifierQueueDelay of work while its queue stands, more in a burst
// (fitQueues): a queue wait within that is the queue working as meant, not
// overload. A target at or below it would cut the limit whenever the queue
// filled, and shed until no call ever waited, the loss system the queue is
// there to avoid; above it, the limit still falls when the verifiers'
// queues grow past what this gateway's slots explain (other gateways' load,
// a slower node).
func (g *Gateway) queueTarget() time.Duration {
	target := g.cfg.Admission.TargetQueueWait
	for _, b := range g.backends.list() {
		if b.eligible() {
			target = max(target, 2*(g.cfg.VerifierQueueDelay+b.service.median()))
		}
	}
	if limit := g.cfg.Autopilot.ClientTimeout; limit > 0 {
		target = min(target, max(limit, g.cfg.Admission.TargetQueueWait))
	}
	return target
}

// fitQueues sizes each verifier's queue in time, CoDel's split of a burst
// bound from a standing-queue target. While its queue does not stand, a
// verifier may queue as many calls as its workers finish at its median
// service time in the burst bound its own queue bound allows (burstDelay),
// so that a Poisson burst waits instead of being refused; once its queue
// has stood above Config.VerifierQueueDelay's worth for a whole second (the
// fewest calls it held in that second were more), only that many, until
// its queue drains (see backend.judgeStanding). Either size is at least one
// call per worker (a burst waits one service time at most, rather than
// being refused as by a loss system), or none when the delay is zero. A
// worker count no answer has confirmed for workersTTL is forgotten, with the
// queue bound (a verifier that only refuses, or restarted smaller, is not
// credited with the workers it once had). Until a verifier has answered,
// its service time is unknown and it gets the one per worker. It runs once a
// second and when a verifier reports a new worker count or queue bound (and
// each answer refits its own verifier); the limiter's ceiling follows
// (fitCeiling).
func (g *Gateway) fitQueues() {
	delay := g.cfg.VerifierQueueDelay
	now := time.Now()
	for _, b := range g.backends.list() {
		b.expireWorkers(now)
		b.fitQueue(delay)
	}
}

// burstDelay is how much work a verifier's queue may hold: delay, or, when
// the verifier reported its own queue bound (its -max-queue-wait), two
// thirds of that bound if longer. The verifier judges each arrival by its
// own estimate of the queued hashes, not by the median service time the
// gateway sizes with, and under load that estimate ran up to 40 % above it
// (a default-hash lab run in which a verifier refused a burst's last call
// with its overload signal, and the limiter cut the limit for it): two
// thirds leaves the estimate room to run 50 % above. A zero delay stays
// zero: no queue.
func burstDelay(delay, bound, service time.Duration) time.Duration {
	if delay <= 0 || bound <= 0 || service <= 0 {
		return delay
	}
	return max(delay, bound*2/3)
}

// queueFor is fitQueues' arithmetic for one verifier.
func queueFor(workers int64, service, delay time.Duration) int64 {
	if delay <= 0 {
		return 0
	}
	q := workers
	if service > 0 {
		q = max(q, int64(math.Ceil(float64(workers)*float64(delay)/float64(service))))
	}
	return min(q, maxVerifierQueue)
}

// maxVerifierQueue bounds one verifier's queue whatever its service time.
const maxVerifierQueue = 10000
