// Package admission is the gateway's edge concurrency limiter. It counts the
// requests in flight to the verifiers and refuses at once those that are over
// a limit, and it adapts that limit to the verifiers' queue wait: the fleet is
// given as much concurrency as it can take without its queues growing past a
// target, and no more.
//
// A Limiter promises:
//
//   - Acquire never blocks, takes no lock and allocates nothing. A refusal
//     costs a few atomic loads; an admission one compare-and-swap more. A
//     request is admitted only while the in-flight count is below its class's
//     threshold, so at most Limit() requests are ever in flight, whatever the
//     number of concurrent callers. Lowering the limit never evicts anything:
//     new requests are refused until in flight falls below the new limit.
//   - The effective limit is min(adaptive, Ceiling, operator clamp, emergency
//     clamp), and at least 1. The clamps take effect on the next Acquire;
//     removing them restores the adaptive limit, which kept adapting (down
//     only: see below) while they were in force.
//   - The adaptive limit is recomputed at most once per Config.Window, from
//     the samples released in it, and only once the window holds
//     Config.MinSamples samples (a window with fewer carries over), or at
//     least one Overloaded outcome. It never leaves [MinLimit, Ceiling]
//     (Ceiling wins if an operator sets it below MinLimit).
//   - Shedding is ordered. As load rises the classes are refused in this
//     order: batch retries, batch, interactive retries, interactive,
//     critical retries, critical. Critical first attempts may use the whole
//     limit; nothing else may.
//
// # The adaptive limit
//
// The signal is the verifiers' queue wait, the time an admitted request
// waited for an Argon2 worker (the verifier's levee-queue-wait-us trailer).
// Queue wait, unlike latency, is zero while the fleet has idle workers and
// grows linearly with the excess concurrency beyond them, so it tells the
// limiter directly how far past the fleet's capacity it is, whatever the hash
// parameters cost.
//
// A window's observed queue wait is the least over its OK samples, as CoDel
// judges a queue by the minimum sojourn over an interval: a burst that
// queues for a moment and drains leaves some sample of the window near zero,
// while a queue that stands makes every sample high. It costs one
// compare-and-swap per sample. A window with at least one Overloaded outcome
// (a verifier refused the request for load) observes at least 2 ×
// TargetQueueWait, as a drop does in TCP's AIMD.
//
// After each window:
//
//   - observed > target: adaptive ×= max(Backoff, target/observed), but not
//     below MinLimit. The gradient target/observed is what the limit would
//     have to be scaled by if queue wait were proportional to it; Backoff
//     bounds one window's cut.
//   - observed ≤ target and there was demand: adaptive += max(1, √adaptive ×
//     (1 − observed/target)), but not above Ceiling. The step is √adaptive
//     when the queues are empty, so a limit climbs from 8 to 1,000 in about
//     60 windows rather than 1,000, and shrinks to 1 as the queue wait
//     approaches the target, so the limit settles near the point where the
//     wait meets the target instead of overshooting it by √adaptive and then
//     being cut below it.
//   - Slow start: until the first window whose observed wait is above half
//     the target (a queue has formed), the step is the whole adaptive limit:
//     it doubles in each window of demand, from 8 to 1,000 in 7 windows.
//     With Config.InitialLimit 0 the limit instead stands at the ceiling,
//     following it, until the first queue forms: for a limiter whose
//     ceiling is the capacity it guards (a gateway's is its verifiers'
//     slots).
//   - otherwise the limit stays.
//
// Demand means the limit was actually limiting in the window: in flight
// reached 90% of the adaptive limit, or a request was refused while the
// adaptive limit was the binding one. Without demand a limit is not grown,
// however low the queue wait: a limit that was never used says nothing about
// whether the fleet could take more, and growing it would let a burst in
// unchecked later. Refusals count because traffic of a single class would
// otherwise pin the limit wherever that class's share first bound it (batch
// alone would never fill more than BatchShare of the limit). While an
// operator or emergency clamp binds, refusals are the clamp's doing, not
// evidence of capacity, so the adaptive limit can shrink but does not grow.
//
// # Shares
//
// Each class may use a share of the limit: it is admitted while the total in
// flight is below floor(Limit × share). The shares are
//
//	critical        1
//	critical retry  RetryShare
//	interactive     1 − CriticalReserve
//	interactive r.  RetryShare × (1 − CriticalReserve)
//	batch           BatchShare
//	batch retry     RetryShare × BatchShare
//
// Config.Validate requires them to be in that order (BatchShare ≤
// RetryShare × (1 − CriticalReserve) ≤ … ≤ RetryShare), which is what makes the
// shedding order hold: a class is refused only when every class below it is
// refused too. Against saturating traffic from every other class, critical
// requests together keep CriticalReserve of the limit and critical first
// attempts alone keep 1 − RetryShare of it; retries are few anyway, the
// fleet's retry budget sees to that.
//
// Thresholds are rounded down, never up: a share is a cap, and with a small
// limit the lower classes get nothing at all (at Limit 1 only critical first
// attempts are admitted; at 2, batch retries are not). That is deliberate:
// a small limit means an overloaded or clamped fleet, which is when the low
// classes must go. It cannot starve them for long on a healthy fleet, because
// their refusals are demand, and a fleet with idle workers grows the limit
// until they fit.
package admission
