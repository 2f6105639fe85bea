package upstream

import (
	"math"
	"time"

	"github.com/leveehq/levee/pkg/callmeta"
)

// A verifier's slots are its workers plus the queue the gateway lets form
// there, sized in time, CoDel's split of a burst bound from a standing-queue
// target:
//
//   - burst size: what its workers finish, at its median service time, in
//     the burst bound its own queue bound allows (burstDelay), so that a
//     Poisson burst waits instead of being refused;
//   - standing size: what they finish in Config.QueueDelay, once its queue
//     has stood above that for a whole second (judgeStanding), until it
//     drains.
//
// Either is at least one call per worker (a loss system refuses a quarter
// of the calls at 60 % load), or none when the delay is zero, and each is
// held at the largest asked for over the last heldFor seconds, so that a
// moment of slow hashes takes no slots from the next burst. docs/gateway.md
// ("Queue sizes") has the reasons and the runs behind each number.

// workersTTL is how long a verifier's reported worker count is believed
// without an answer repeating it; the queue bound and the held sizes are
// forgotten with it.
const workersTTL = 10 * time.Second

// maxVerifierQueue bounds one verifier's queue whatever its service time.
const maxVerifierQueue = 10000

// queueFor is as many calls as workers finish in delay at service, at
// least one per worker (one per worker while service is unknown), none
// when delay is zero.
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

// burstDelay is how much work a verifier's queue may hold in a burst: two
// thirds of the bound it reported (its -max-queue-wait) when that is
// longer than delay, else delay. The verifier judges arrivals by its own
// estimate of the queued hashes, which runs above the median the gateway
// sizes with; two thirds leaves it room. A zero delay stays zero.
func burstDelay(delay, bound, service time.Duration) time.Duration {
	if delay <= 0 || bound <= 0 || service <= 0 {
		return delay
	}
	return max(delay, bound*2/3)
}

// Slots is how many calls v may hold at once: its workers (one until its
// first answer says how many it runs), plus the calls it may queue, plus
// extra (a critical call's slot).
func (v *Node) Slots(extra int64) int64 {
	return max(v.workers.Load(), 1) + v.queue.Load() + extra
}

// reserve takes one of v's slots; false if they are all held.
func (v *Node) reserve(extra int64) bool {
	limit := v.Slots(extra)
	for {
		n := v.pending.Load()
		if n >= limit {
			return false
		}
		if v.pending.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives back a slot taken by reserve, once the call was sent, and
// keeps the fewest calls held this second for judgeStanding.
func (v *Node) release() {
	n := v.pending.Add(-1) + 1 // stored plus one, as lowPending
	if !v.released.Load() {
		v.released.Store(true)
	}
	for {
		low := v.lowPending.Load()
		if n >= low || v.lowPending.CompareAndSwap(low, n) {
			return
		}
	}
}

// Unsent gives back a slot and the breaker's admission of a call that Pick
// chose v for and that was refused before it was sent: a half-open
// breaker's probe is due again (breaker.Breaker.Cancel), since this one
// never reached the node.
func (v *Node) Unsent() {
	v.brk.Load().Cancel()
	v.release()
}

// fitQueue sizes v's queue (see the top of this file) at now and reports
// whether its size changed.
func (v *Node) fitQueue(now time.Time) bool {
	delay := v.set.cfg.QueueDelay
	service := v.service.median()
	workers := max(v.workers.Load(), 1)
	standing := queueFor(workers, service, delay)
	burst := queueFor(workers, service, burstDelay(delay, time.Duration(v.maxWait.Load()), service))
	v.mu.Lock()
	v.standingSizes.Raise(now, 0, float64(standing))
	v.burstSizes.Raise(now, 0, float64(burst))
	standing = int64(v.standingSizes.Max(now, 0))
	burst = max(int64(v.burstSizes.Max(now, 0)), standing)
	v.mu.Unlock()
	v.standingQueue.Store(standing)
	q := burst
	if v.standing.Load() {
		q = standing
	}
	return v.queue.Swap(q) != q
}

// judgeStanding is CoDel's standing-queue test on the calls the gateway
// holds at v, once a second (Set.Tick). When even the fewest it held in the
// second just ended — the count carried into the second, or less right
// after a release — were more than its workers plus its standing queue, the
// queue stood there the whole second, which no burst of a healthy load
// does: v gets the standing size until its queue drains, a second in which
// at some moment a worker had no call. A second in which no slot was
// released is no evidence either way (a stalled verifier is neither judged
// standing nor drained), unless fewer calls than workers are held: idle is
// drained. The way back needs no traffic the smaller size refuses: the
// calls it still admits drain it, and with no traffic it is idle.
func (v *Node) judgeStanding() {
	workers := max(v.workers.Load(), 1)
	pending := v.pending.Load()
	released := v.released.Swap(false)
	low := v.lowPending.Swap(pending+1) - 1
	if !released {
		if pending < workers {
			v.standing.Store(false)
		}
		return
	}
	switch {
	case low > workers+v.standingQueue.Load():
		v.standing.Store(true)
	case low < workers:
		v.standing.Store(false)
	}
}

// saw records what an answer says of the verifier itself, its worker count
// and its queue bound, and reports whether either changed. An account that
// says how many workers but names no bound (an unguarded node, or an older
// one) clears the bound; a changed bound forgets the burst sizes held for
// the old one.
func (v *Node) saw(s callmeta.Served, now time.Time) bool {
	if s.Workers <= 0 {
		return false
	}
	changed := v.sawWorkers(int64(s.Workers), now)
	bound := int64(max(s.MaxQueueWait, 0))
	if v.maxWait.Swap(bound) != bound {
		v.forgetSizes(false)
		changed = true
	}
	return changed
}

// sawWorkers records an answer's worker count and reports whether it
// changed. Sizes held for another worker count are forgotten.
func (v *Node) sawWorkers(w int64, now time.Time) bool {
	v.workAt.Store(now.UnixNano())
	if v.workers.Swap(w) == w {
		return false
	}
	v.forgetSizes(true)
	return true
}

// forgetSizes forgets the burst sizes held, and the standing ones too if
// all.
func (v *Node) forgetSizes(all bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.burstSizes.Reset()
	if all {
		v.standingSizes.Reset()
	}
}

// expireWorkers forgets a worker count that no answer confirmed for
// workersTTL, the queue sizes held for it, and the queue bound: a verifier
// that only refuses is credited with neither.
func (v *Node) expireWorkers(now time.Time) {
	if at := v.workAt.Load(); at != 0 && now.UnixNano()-at > int64(workersTTL) && v.workers.Swap(0) != 0 {
		v.forgetSizes(true)
		v.maxWait.Store(0)
	}
}
