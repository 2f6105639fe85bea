// Package fleettest holds the fleet-level proofs of Levee's retry budget:
// hundreds of pkg/budget Clients, each with its own client ID, leasing from
// real budgetd replicas over real gRPC on 127.0.0.1, on a real embedded
// etcd, while every request they send fails and every failure wants a
// retry.
//
// Every property is asserted by counting, never by timing: the clients'
// and the leaders' counters are sampled about every 100 ms, and each bound
// is checked over every pair of samples (every window) or over a whole
// leader's term. Elapsed time enters only through min_per_second and the
// clients' fallback minimum, measured so as to overstate the allowance.
//
// The tests prove:
//
//   - TestFleetBound: 500 clients together get no more retries than
//     Ratio × their first attempts plus one cap and MinPerSecond × time, in
//     every window; that is far below what the same 500 processes would get
//     with per-process budgets; the leader's Status shows the live retry
//     ratio at Ratio; and `budgetd status` (fleetctl.StatusCommand) shows the load.
//   - TestFleetFairness: a client with 10× the traffic of each other gets
//     no more than its share of first attempts of the scarce tokens.
//   - TestFleetFailover: when the leader stops under load, the other replica
//     takes over and grants again, and the bound holds across the switch:
//     each leader grants at most what it earned, and the clients' local
//     fallback adds at most what its documented rule allows.
//   - TestFleetEtcdLost: without etcd every client falls back to its local
//     budget and retries within it; when etcd returns a leader is elected
//     and every client is back on the shared budget.
//   - TestLedgerSharesMove: the ledger's cap on saved tokens holds when
//     traffic moves from one client to another.
//
// The package has no non-test code. Its tests take about a minute with
// -race on two cores; LEVEE_TEST_LOG=info shows the replicas' logs.
package fleettest
