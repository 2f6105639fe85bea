// Package breaker is a circuit breaker for one backend: a gateway keeps one
// Breaker per verifier node, asks Allow before sending a request to it and
// tells Record how each admitted request ended.
//
// A Breaker is in one of three states:
//
//   - Closed: every request is admitted. Outcomes are counted in a rolling
//     window of Window kept in 10 fixed buckets. Once the window holds at
//     least MinRequests outcomes and failures/(failures+successes) reaches
//     FailureRate, the breaker opens.
//   - Open: nothing is admitted until the open time ends. Each opening lasts
//     OpenFor × (1 + Jitter × U), U uniform in [0, 1) and drawn afresh, so
//     breakers that opened together (every gateway losing the same node at
//     once) do not come back together. Trip opens the breaker at once, for
//     example when the connection to the node is lost.
//   - HalfOpen: requests are admitted at random with the probability of the
//     current Ramp step (1%, 5%, 20%, 100% by default), plus one probe
//     whenever none was admitted for ProbeEvery, so that a quiet gateway
//     still tests the node. A step advances once it has lasted StepFor ×
//     (1 + Jitter × U) and seen at least StepMinRequests outcomes; when the
//     final (100%) step completes, the breaker closes with an empty window.
//
// The half-open failure rule. A step re-opens the breaker (with a fresh
// jittered open time, and the next half-open period starts again from the
// first step) as soon as its failures reach
//
//	FailureRate × max(outcomes in the step, StepMinRequests)
//
// Once a step has StepMinRequests outcomes this is simply "the step's
// failure rate reached FailureRate". Before that, the failures are measured
// against the StepMinRequests outcomes the step needs anyway, so the breaker
// re-opens exactly when the step could no longer pass whatever the missing
// outcomes turn out to be, and no later. With the default StepMinRequests
// of 1 a failed probe re-opens at once, while one failure among many
// successes in a busy step does not. Outcomes are attributed to the step
// current when Record is called; outcomes recorded while open are ignored,
// so requests should time out well within OpenFor.
//
// A request Allow admitted that is then not sent (refused by a later check
// before it reaches the backend) is handed back with Cancel, which makes the
// next request a probe: otherwise a half-open breaker could spend its probes
// on requests that never reach the backend and stay half-open for want of
// outcomes.
//
// Time-based changes (open to half-open, one step to the next, the last
// step to closed) happen lazily in whichever of Allow, Record, Trip, State,
// Fraction or Snapshot first observes them; a Breaker starts no goroutines.
//
// Cost. A Breaker is safe for concurrent use. Allow never allocates. On a
// closed breaker it is a single atomic load: it takes no lock and does not
// read the clock. On an open breaker whose time has not ended it reads the
// clock and two atomics, still without the lock. While half-open it takes
// the breaker's mutex, which is brief and, by design, transient. Record
// takes the mutex in every state and never allocates.
package breaker
