// Package budget is the client side of Levee's fleet-wide retry budget: the
// library every retrying process embeds so that the whole fleet, not each
// process, keeps retries within Ratio × first attempts.
//
// A process makes one Client (one connection to budgetd, one background
// refresher) and takes one *Budget per budget key from it with Key. On the
// request path it calls, per key:
//
//   - RecordFirstAttempt before sending a first attempt;
//   - Allow before a retry: true spends one retry token, false means "do not
//     retry, return the failure to the caller now";
//   - RecordRetry when the retry is actually sent.
//
// What a Budget promises:
//
//   - Allow never does I/O, never blocks and never allocates. In shared mode
//     it spends tokens leased in advance from budgetd with one atomic load
//     and one compare-and-swap, without reading the clock; it grants exactly
//     the tokens of the current lease and not one more, even under
//     concurrent callers.
//   - A lease replaces the previous one (its unspent tokens are void) and
//     expires ValidFor after the response arrived: a timer on the local
//     monotonic clock voids it then (within timer precision); the server's
//     wall clock is never consulted.
//   - Counts are reported to budgetd at every refresh; counts made while
//     budgetd was unreachable are kept and reported when it answers again
//     (at least once: a refresh that fails after the server accepted it is
//     reported again, which over-reports, never under-reports).
//   - When budgetd is unreachable, answers with an error, or a lease expires
//     without renewal, the key falls back to a local budget: tokens earned
//     at the last known Ratio per first attempt this process sends from then
//     on, plus FallbackMinPerSecond whatever the traffic, holding at most
//     FallbackBurst. Never unlimited and never permanently zero. Tokens of a
//     still-valid lease stay spendable in fallback (they were granted). The
//     key returns to shared mode with the next successful lease.
//   - Status and the metrics say which mode each key is in and why.
//
// The Client's refresher sleeps for the server's refresh_after (already
// jittered by budgetd) less up to a further 10% of local jitter, never
// longer than three quarters of the shortest lease, and backs off with
// jitter (100 ms doubling, capped at RefreshInterval) while budgetd fails.
// Close stops it, waits for it, and voids the leases: afterwards every key
// is in fallback for good.
//
// Why these fallback numbers: a process cannot know the fleet's size, so it
// cannot take its share of budgetd's fleet-wide MinPerSecond or Burst. It
// keeps the one number that scales by itself, Ratio × its own first
// attempts (the bound L ≤ (1 + Ratio) × A then holds per process, hence for
// the fleet, up to the floor below), and adds a small per-process floor (FallbackMinPerSecond,
// default 0.1/s) so that a quiet process is never left with zero retries,
// and a small cap (FallbackBurst, default 10) so that a process idle for an
// hour cannot answer an outage with a burst. The local budget starts empty
// on each entry to fallback.
package budget
