package gateway

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/internal/serving"
	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/deadline"
	"github.com/leveehq/levee/pkg/fairshare"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/registry"
	"github.com/leveehq/levee/pkg/wellknown"
)

// errInvalidMargin is Validate's error for a MarginConfig out of range.
var errInvalidMargin = errors.New("gateway: Margin: Attempts must be in [1, 100] and RetryRatio at most 10 (negative: no budget)")

// DefaultSettingsKey is the etcd key holding the gateway's runtime settings.
const DefaultSettingsKey = "/levee/gateway/config"

// Clock tells time. Durations are taken between its readings, so it must be
// monotonic (the system clock's readings are). Tests inject a fake
// (breakertest.Clock is one).
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Config configures a gateway. Start from DefaultConfig.
type Config struct {
	// ListenAddr is the gRPC address (Run only).
	ListenAddr string
	// MetricsAddr is the HTTP address serving /metrics (Run only); empty
	// disables the metrics listener.
	MetricsAddr string

	// EtcdEndpoints are the etcd client URLs. With them the gateway follows
	// the verifiers registered under VerifiersTarget and its runtime
	// settings under SettingsKey. Without them it needs Verifiers.
	EtcdEndpoints []string
	// EtcdDialTimeout bounds each attempt to connect to etcd.
	EtcdDialTimeout time.Duration
	// VerifiersTarget is the etcd naming target verifiers register under
	// (keys <target>/<addr>, see pkg/registry).
	VerifiersTarget string
	// Verifiers is a static list of verifier addresses, used in addition to
	// any found through etcd.
	Verifiers []string
	// VerifierServerName, when set, is the name every verifier's
	// certificate must carry, checked in place of the host dialled: where
	// verifiers register addresses no certificate can name in advance (a
	// pod's IP). Empty: each verifier's certificate must name the host of
	// its address. The CA and the caller's role still decide who it is.
	VerifierServerName string
	// SettingsKey is the etcd key of the runtime settings (JSON, see
	// package settings); changes apply without a restart.
	SettingsKey string

	// BudgetTarget names the budgetd replicas that fund in-fleet retries
	// (see budget.Config.Target). Empty disables in-fleet retries: a failed
	// hop is returned to the caller.
	BudgetTarget string
	// BudgetKey is the budget key the gateway's retries are drawn from.
	BudgetKey string

	// Deadline is the deadline policy of incoming calls; its Margin is
	// subtracted from what is forwarded.
	Deadline deadline.Config
	// Admission configures the edge concurrency limiter.
	Admission admission.Config
	// VerifierQueueDelay is the queue the gateway lets stand at each
	// verifier beyond its workers, in time: as many calls as its workers
	// finish in this long at its median service time, at least one per
	// worker. A burst may queue up to two thirds of the verifier's own
	// reported bound until the queue has stood above this for a whole
	// second (package upstream; docs/gateway.md, "Queue sizes"). Zero: no
	// queue at all, a loss system. Critical first attempts may use one
	// slot more.
	VerifierQueueDelay time.Duration
	// Breaker configures each verifier's circuit breaker.
	Breaker breaker.Config
	// Autopilot configures the recovery autopilot.
	Autopilot AutopilotConfig
	// FairShare shares the admission limit among tenants (package
	// fairshare): while the limit is contended, a tenant over its weighted
	// share is refused (reason tenant_share) so that the others get
	// theirs; a tenant alone may use all of it. Critical first attempts
	// are counted but never refused for it. Off: the limit goes to
	// whoever arrives. The runtime setting "fairness" overrides it.
	FairShare bool
	// Tenants configures the sharing; its Now is the gateway's Clock.
	Tenants fairshare.Config
	// Margin says what the bistability margin gauge assumes of the callers.
	Margin MarginConfig

	// PushbackMin and PushbackMax bound the jittered retry-after the gateway
	// sends with a refusal (grpc-retry-pushback-ms): uniformly in
	// [PushbackMin, PushbackMax], so refused callers come back spread out.
	PushbackMin time.Duration
	PushbackMax time.Duration

	// Unguarded turns every defence off, making the gateway the plain proxy
	// of the lab's control fleet (levee-lab): each call goes to the next
	// verifier whose health says SERVING, round robin, under the caller's
	// own deadline (none added), with no admission, no deadline check, no
	// breaker, no retry, no budget (BudgetTarget is ignored), no
	// autopilot, and grpc's default dialing (no keepalive probes:
	// ProbeInterval is ignored). Never for production.
	Unguarded bool

	// ProbeInterval is how often the gateway pings each verifier's
	// connection (HTTP/2 keepalive), and how long it waits for the answer:
	// a verifier that does not answer (stopped, paused, its host hung) is
	// disconnected, which ends its health stream and takes it out of
	// rotation, within about two intervals. grpc-go pings at most every
	// 10 s, so a shorter interval is raised to that; verifiers accept pings
	// every 5 s (their keepalive enforcement policy).
	ProbeInterval time.Duration

	// ServerLimits bound what one peer can make the server hold (connections,
	// streams, headers, handshake time, connection lifetime).
	ServerLimits serving.Limits

	// TLS is the gateway's identity: its public port serves TLS with it to
	// callers who present a certificate of the same CA naming their tenant
	// (package caller binds each call's tenant and priority to it), and it
	// presents it to the verifiers, budgetd and etcd, whose certificates
	// it verifies against the same CA bundle. Nil is plaintext everywhere
	// (-insecure): a trusted network, where each call's facts pass as sent.
	TLS *mtls.Source
	// AllowAnonymous also serves callers without a certificate, all as
	// one tenant (caller.AnonymousTenant) at priority batch at most. Off
	// by default; from the command line only (wellknown.DefenceFlags).
	AllowAnonymous bool

	// Clock tells time for the gateway's rules: its windows, ejections,
	// held queue sizes, worker-count expiry and once-a-second housekeeping
	// (and, where they have none of their own, the limiter's and the
	// breakers'). nil means the system clock. Deadlines handed to gRPC
	// contexts, and the waits that bound real connections, run on real
	// time whatever it is.
	Clock Clock

	// Logger receives operational logs; nil means slog.Default(). Nothing
	// is logged per request.
	Logger *slog.Logger
	// Registry receives the gateway's metrics and is what its /metrics
	// serves (hence a Registry, which gathers, not a Registerer); nil means a
	// new private registry. Never the global default registry.
	Registry *prometheus.Registry
}

// gatewayAdmission is the limiter's defaults with the limit starting at its
// ceiling (InitialLimit 0): a gateway fits the ceiling to its verifiers'
// slots (fitCeiling), so it starts knowing what the fleet can hold and has
// nothing to find by growing; the limit falls from there once a queue forms.
func gatewayAdmission() admission.Config {
	c := admission.DefaultConfig()
	c.InitialLimit = 0
	return c
}

// AutopilotConfig configures the recovery autopilot: when the fleet shows the
// metastable signature — most of the work the verifiers do ends after the
// typical caller gave up, while the queue stands and throughput stays high —
// it drops work whose callers have given up, clamps admission to a fraction
// of measured capacity and ramps back up while queue wait stays low; and it
// ejects a verifier that refuses everything while another serves.
type AutopilotConfig struct {
	// Enabled turns the autopilot on (runtime settings may override).
	Enabled bool
	// ClientTimeout is how long a typical caller waits before giving up,
	// whatever deadline it sends. Work older than this is presumed
	// abandoned while the autopilot is engaged.
	ClientTimeout time.Duration
	// Tick is how often the fleet's signals are read.
	Tick time.Duration
	// EngageAfter is how many consecutive ticks must show the signature.
	EngageAfter int
	// GoodputBelow is the goodput fraction (calls answered within
	// ClientTimeout / calls a verifier worked on; refusals count neither
	// way) under which goodput counts as collapsed.
	GoodputBelow float64
	// ClampFraction is the admission clamp on engaging, as a fraction of
	// the measured capacity in requests in flight.
	ClampFraction float64
	// RampFactor multiplies the clamp each tick that queue wait stays below
	// RampQueueWait.
	RampFactor float64
	// RampQueueWait is the queue wait below which the clamp ramps up, and
	// above which the queue stands (part of the signature).
	RampQueueWait time.Duration
	// StandDownAfter is how many consecutive ticks the clamp must not bind
	// (demand below it, queue wait low) before the autopilot stands down.
	StandDownAfter int
}

// DefaultConfig returns the production defaults: listening on loopback,
// verifiers found in etcd on localhost.
func DefaultConfig() Config {
	return Config{
		ServerLimits:    serving.DefaultLimits(),
		ListenAddr:      wellknown.LoopbackAddr(wellknown.GatewayPort),
		MetricsAddr:     wellknown.LoopbackAddr(wellknown.GatewayPort + wellknown.MetricsOffset),
		EtcdDialTimeout: 5 * time.Second,
		VerifiersTarget: registry.DefaultTarget,
		SettingsKey:     DefaultSettingsKey,
		BudgetKey:       "gateway",
		Deadline:        deadline.DefaultConfig(),
		Admission:       gatewayAdmission(),
		Breaker:         breaker.DefaultConfig(),
		// A quarter of the typical client timeout: at 90 % load a verifier
		// with one worker needs a queue of about twenty service times to
		// refuse under 1 % (M/D/1), and the verifier's own deadline check
		// refuses what cannot finish in time anyway.
		VerifierQueueDelay: 500 * time.Millisecond,
		Autopilot: AutopilotConfig{
			Enabled:        true,
			ClientTimeout:  2 * time.Second,
			Tick:           time.Second,
			EngageAfter:    3,
			GoodputBelow:   0.5,
			ClampFraction:  0.5,
			RampFactor:     1.25,
			RampQueueWait:  200 * time.Millisecond,
			StandDownAfter: 5,
		},
		FairShare:     true,
		Tenants:       fairshare.DefaultConfig(),
		Margin:        MarginConfig{Attempts: 3, RetryRatio: -1},
		PushbackMin:   100 * time.Millisecond,
		PushbackMax:   1000 * time.Millisecond,
		ProbeInterval: 10 * time.Second,
	}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	if err := c.ServerLimits.Validate(); err != nil {
		return fmt.Errorf("gateway: ServerLimits: %w", err)
	}
	if err := c.Tenants.Validate(); err != nil {
		return fmt.Errorf("gateway: Tenants: %w", err)
	}
	if len(c.EtcdEndpoints) == 0 && len(c.Verifiers) == 0 {
		return errors.New("gateway: no verifiers: set EtcdEndpoints (to follow registrations) or Verifiers")
	}
	for _, v := range c.Verifiers {
		if v == "" {
			return errors.New("gateway: Verifiers holds an empty address")
		}
	}
	if len(c.EtcdEndpoints) > 0 {
		if c.VerifiersTarget == "" {
			return errors.New("gateway: VerifiersTarget must not be empty with EtcdEndpoints")
		}
		if c.SettingsKey == "" {
			return errors.New("gateway: SettingsKey must not be empty with EtcdEndpoints")
		}
		if c.EtcdDialTimeout <= 0 {
			return fmt.Errorf("gateway: EtcdDialTimeout must be positive, got %v", c.EtcdDialTimeout)
		}
	}
	if c.BudgetTarget != "" && c.BudgetKey == "" {
		return errors.New("gateway: BudgetKey must not be empty with BudgetTarget")
	}
	if err := c.Deadline.Validate(); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := c.Admission.Validate(); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := c.Breaker.Validate(); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := c.Autopilot.Validate(); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := c.Margin.Validate(); err != nil {
		return err
	}
	if c.VerifierQueueDelay < 0 || c.VerifierQueueDelay > time.Minute {
		return fmt.Errorf("gateway: VerifierQueueDelay must be in [0, 1m], got %v", c.VerifierQueueDelay)
	}
	if c.PushbackMin <= 0 || c.PushbackMax < c.PushbackMin {
		return fmt.Errorf("gateway: pushback range [%v, %v] must be positive and ordered", c.PushbackMin, c.PushbackMax)
	}
	if c.ProbeInterval <= 0 {
		return fmt.Errorf("gateway: ProbeInterval must be positive, got %v", c.ProbeInterval)
	}
	return nil
}

// Validate reports the first invalid field.
func (a AutopilotConfig) Validate() error {
	switch {
	case a.ClientTimeout <= 0:
		return fmt.Errorf("autopilot: ClientTimeout must be positive, got %v", a.ClientTimeout)
	case a.Tick <= 0:
		return fmt.Errorf("autopilot: Tick must be positive, got %v", a.Tick)
	case a.EngageAfter < 1:
		return fmt.Errorf("autopilot: EngageAfter must be at least 1, got %d", a.EngageAfter)
	case !(a.GoodputBelow > 0 && a.GoodputBelow <= 1):
		return fmt.Errorf("autopilot: GoodputBelow must be in (0, 1], got %v", a.GoodputBelow)
	case !(a.ClampFraction > 0 && a.ClampFraction <= 1):
		return fmt.Errorf("autopilot: ClampFraction must be in (0, 1], got %v", a.ClampFraction)
	case !(a.RampFactor > 1 && a.RampFactor <= 4):
		return fmt.Errorf("autopilot: RampFactor must be in (1, 4], got %v", a.RampFactor)
	case a.RampQueueWait <= 0:
		return fmt.Errorf("autopilot: RampQueueWait must be positive, got %v", a.RampQueueWait)
	case a.StandDownAfter < 1:
		return fmt.Errorf("autopilot: StandDownAfter must be at least 1, got %d", a.StandDownAfter)
	}
	return nil
}
