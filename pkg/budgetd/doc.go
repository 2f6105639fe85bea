// Package budgetd is the fleet-wide retry budget service: every process
// that retries reports its first attempts and retries and leases retry
// tokens in advance, so that a whole fleet shares one budget per key.
//
// The accounting is package ledger: its Ledger guarantees, per key and over
// any interval, that the tokens granted to the whole fleet stay within Ratio
// × the first attempts the fleet reported, plus MinPerSecond × the interval,
// plus the cap on saved tokens, shared in proportion to each client's
// first-attempt traffic. budgetd keeps one Ledger per key on its leader.
//
// A Server is one replica of levee.budget.v1.BudgetService. It promises:
//
//   - Replicas elect one leader through etcd (concurrency.Election, the
//     value is the replica's advertised address); only the leader grants.
//     Followers forward Lease and Status to it over one cached connection,
//     and answer UNAVAILABLE at once when they know no leader, so that
//     clients fall back to a local budget of the same ratio.
//   - A new leader starts every Ledger empty: nothing saved, no burst for
//     anyone, and learns the fleet from the reports that follow.
//   - A leader grants only while its etcd session is confirmed: it stops
//     granting ElectionTTL minus a margin after the last renewal etcd
//     acknowledged (before etcd could expire the session and elect another
//     replica), steps down when the session ends, and campaigns again when
//     etcd answers. Renewals happen every ElectionTTL/3, so one missed
//     renewal changes nothing.
//   - Settings live in etcd under <Prefix>config/<key> as JSON, watched
//     and applied at once; a rejected value is logged, counted and shown in
//     Status, and the last good settings stay.
//   - A replica that stops resigns first, so a follower takes over within
//     a round trip to etcd; Serve returns after every goroutine has ended.
//
// Metrics go to a private registry (names levee_budgetd_*); an embedded
// etcd's collectors go to Prometheus' default registry, which budgetd does
// not serve. Package budgetdtest runs replicas and etcd inside tests.
package budgetd
