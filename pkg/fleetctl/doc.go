// Package fleetctl is the operator's side of a running Levee fleet: it asks
// budgetd for the retry budget's status and prints it, reads a gateway's
// bistability margin from its /metrics, and reads and edits the gateways'
// runtime settings in etcd. `levee status`, `levee settings` and `budgetd
// status` run it.
//
// It reaches the servers only through what they publish (gRPC, /metrics,
// etcd keys) and imports no server package, so that a server's binary that
// carries an operator command (`budgetd status`) links no other server
// (internal/architecture checks).
package fleetctl
