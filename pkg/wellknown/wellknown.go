// Package wellknown is the one home of the names and numbers that more than
// one Levee program must agree on: the ports each server listens on by
// default, the command-line flags one program passes to another, and the
// metrics one program reads from another's /metrics.
//
// The servers register their metrics and the commands define their flags
// under these names; levee local, levee status, levee calibrate and the lab
// use the same constants. Each server's tests fail when a metric named here
// is not one it exports, and each command's tests fail when a flag named
// here is not one it defines, so a rename on one side cannot pass unnoticed.
// Names only one program uses stay with that program.
package wellknown

import (
	"net"
	"strconv"
)

// Default ports on 127.0.0.1. Each server's /metrics listens MetricsOffset
// above its gRPC port. levee local numbers its verifiers from
// LocalVerifierPort up, so that they do not collide with a verifier
// started on its own.
const (
	GatewayPort       = 7700
	VerifierPort      = 7701
	BudgetdPort       = 7702
	LocalVerifierPort = 7711
	MetricsOffset     = 2000
	EtcdClientPort    = 2379
	EtcdPeerPort      = 2380
)

// Loopback is the default listen host: a server reachable from elsewhere
// is a choice its operator makes with -listen.
const Loopback = "127.0.0.1"

// LoopbackAddr is Loopback:port.
func LoopbackAddr(port int) string { return net.JoinHostPort(Loopback, strconv.Itoa(port)) }

// The gRPC health services a server answers in plaintext on its metrics
// port for an orchestrator's probes (internal/serving.Probes): liveness is
// SERVING while the process answers, readiness while it is warm and not
// draining. The Helm chart's probes name them.
const (
	ProbeLiveness  = "liveness"
	ProbeReadiness = "readiness"
)

// Flags every server command takes (verifier, gateway, budgetd), and levee
// etcd the transport ones.
const (
	FlagListen        = "listen"
	FlagMetricsListen = "metrics-listen"
	FlagAdvertise     = "advertise"
	FlagEtcd          = "etcd"
	FlagTLSDir        = "tls-dir"
	FlagInsecure      = "insecure"
	FlagUnguarded     = "unguarded"
)

// Flags that turn a defence off: read from the command line only, never
// from the environment (internal/flagenv refuses their variables), so that
// what a deployment's environment leaks or inherits cannot disarm a node.
var DefenceFlags = []string{FlagUnguarded, FlagEnableCapacityKnob, FlagAllowAnonymous}

// Flags of cmd/verifier that other programs pass: the policy and sizing
// levee calibrate prints, and what the lab starts its verifiers with.
const (
	FlagWorkers            = "workers"
	FlagMemoryBudget       = "memory-budget"
	FlagArgon2MemoryKiB    = "argon2-memory-kib"
	FlagArgon2Iterations   = "argon2-iterations"
	FlagArgon2Parallelism  = "argon2-parallelism"
	FlagMaxMemoryKiB       = "max-memory-kib"
	FlagEnableCapacityKnob = "enable-capacity-knob"
	FlagDrainTimeout       = "drain-timeout"
)

// Flags of cmd/gateway that other programs pass.
const (
	FlagVerifiers          = "verifiers"
	FlagVerifierServerName = "verifier-server-name"
	FlagBudgetd            = "budgetd"
	FlagAllowAnonymous     = "allow-anonymous"
	FlagFairShare          = "fair-share"
)

// Flags of levee etcd, which the lab runs as its fleets' etcd.
const (
	FlagEtcdDataDir   = "data-dir"
	FlagEtcdName      = "name"
	FlagEtcdClientURL = "client-url"
	FlagEtcdPeerURL   = "peer-url"
	FlagEtcdAuth      = "auth"
)

// VerifierFlags, GatewayFlags, BudgetdFlags and EtcdFlags are the flags
// named here that each command must define (its tests check).
var (
	VerifierFlags = []string{FlagListen, FlagMetricsListen, FlagAdvertise, FlagEtcd, FlagTLSDir, FlagInsecure,
		FlagUnguarded, FlagWorkers, FlagMemoryBudget, FlagArgon2MemoryKiB, FlagArgon2Iterations,
		FlagArgon2Parallelism, FlagMaxMemoryKiB, FlagEnableCapacityKnob, FlagDrainTimeout}
	GatewayFlags = []string{FlagListen, FlagMetricsListen, FlagEtcd, FlagTLSDir, FlagInsecure, FlagUnguarded,
		FlagVerifiers, FlagVerifierServerName, FlagBudgetd, FlagFairShare}
	BudgetdFlags = []string{FlagListen, FlagMetricsListen, FlagAdvertise, FlagEtcd, FlagTLSDir, FlagInsecure}
	EtcdFlags    = []string{FlagEtcdDataDir, FlagEtcdName, FlagEtcdClientURL, FlagEtcdPeerURL, FlagEtcdAuth,
		FlagTLSDir, FlagInsecure}
)

// Metrics of the gateway that other programs read.
const (
	MetricGatewayAdmitted          = "levee_gateway_admitted_total"
	MetricGatewayLate              = "levee_gateway_late_total"
	MetricGatewayFailed            = "levee_gateway_failed_total"
	MetricGatewayRefused           = "levee_gateway_refused_total"
	MetricGatewayFleetRetries      = "levee_gateway_fleet_retries_total"
	MetricGatewayLimit             = "levee_gateway_limit"
	MetricGatewayInflight          = "levee_gateway_inflight"
	MetricGatewayAutopilotEngaged  = "levee_gateway_autopilot_engaged"
	MetricGatewayVerifierBreaker   = "levee_gateway_verifier_breaker_state"
	MetricGatewayVerifierServing   = "levee_gateway_verifier_serving"
	MetricGatewayMargin            = "levee_gateway_bistability_margin"
	MetricGatewayMarginOffered     = "levee_gateway_margin_offered_per_second"
	MetricGatewayMarginCapacity    = "levee_gateway_margin_capacity_per_second"
	MetricGatewayMarginCongestedAt = "levee_gateway_margin_congested_load_per_second"
)

// Metrics of a verifier that other programs read.
const (
	MetricVerifierAttempts        = "levee_verifier_attempts_total"
	MetricVerifierLate            = "levee_verifier_late_total"
	MetricVerifierDropped         = "levee_verifier_dropped_total"
	MetricVerifierQueueWait       = "levee_verifier_queue_wait_seconds"
	MetricVerifierQueueLength     = "levee_verifier_queue_length"
	MetricVerifierExpectedService = "levee_verifier_expected_service_seconds"
	MetricVerifierTenantWork      = "levee_verifier_tenant_work_seconds_total"
	MetricVerifierDemand          = "levee_verifier_demand_ratio"
)

// Metrics of budgetd, and of the budget client every retrying process
// embeds, that other programs read.
const (
	MetricBudgetdIsLeader = "levee_budgetd_is_leader"
	MetricBudgetFallback  = "levee_budget_fallback"
	MetricBudgetTokens    = "levee_budget_tokens"
)

// Metrics of the Go runtime and the process, which every server exports
// (its registry's Go and process collectors) and the lab reads.
const (
	MetricProcessCPU       = "process_cpu_seconds_total"
	MetricProcessResident  = "process_resident_memory_bytes"
	MetricProcessOpenFDs   = "process_open_fds"
	MetricProcessStartTime = "process_start_time_seconds"
	MetricGoGoroutines     = "go_goroutines"
	// MetricGoGC is a summary of the garbage collections' pauses: its
	// count is how many collections the process has completed.
	MetricGoGC = "go_gc_duration_seconds"
)

// processMetrics are every server's (on Linux, where the process collector
// reads /proc).
var processMetrics = []string{MetricProcessCPU, MetricProcessResident, MetricProcessOpenFDs, MetricProcessStartTime,
	MetricGoGoroutines, MetricGoGC}

// GatewayMetrics, VerifierMetrics, BudgetdMetrics and BudgetMetrics are the
// metrics named here that each component must export (its tests check).
var (
	GatewayMetrics = append([]string{MetricGatewayAdmitted, MetricGatewayLate, MetricGatewayFailed, MetricGatewayRefused,
		MetricGatewayFleetRetries, MetricGatewayLimit, MetricGatewayInflight, MetricGatewayAutopilotEngaged,
		MetricGatewayVerifierBreaker, MetricGatewayVerifierServing, MetricGatewayMargin, MetricGatewayMarginOffered,
		MetricGatewayMarginCapacity, MetricGatewayMarginCongestedAt}, processMetrics...)
	VerifierMetrics = append([]string{MetricVerifierAttempts, MetricVerifierLate, MetricVerifierDropped,
		MetricVerifierQueueWait, MetricVerifierQueueLength, MetricVerifierExpectedService, MetricVerifierTenantWork,
		MetricVerifierDemand},
		processMetrics...)
	BudgetdMetrics = append([]string{MetricBudgetdIsLeader}, processMetrics...)
	BudgetMetrics  = []string{MetricBudgetFallback, MetricBudgetTokens}
)
