package verifier

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/internal/serving"
	"github.com/leveehq/levee/pkg/bytesize"
	"github.com/leveehq/levee/pkg/deadline"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/registry"
	"github.com/leveehq/levee/pkg/residentheap"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/wellknown"
)

// Config configures a verifier. Start from DefaultConfig.
type Config struct {
	// ListenAddr is the gRPC address (Run only).
	ListenAddr string
	// MetricsAddr is the HTTP address serving /metrics (Run only); empty
	// disables the metrics listener.
	MetricsAddr string

	// Workers is the number of hashes that may run at once: one per core by
	// default.
	Workers int
	// MemoryBudget bounds, in bytes, the Argon2 memory of the hashes running
	// at once (each stored hash brings its own m): a hash starts only when a
	// worker is free and its memory fits what the running ones left. A stored
	// hash needing more than the whole budget is refused with
	// FAILED_PRECONDITION and never hashed. It must hold one policy hash.
	// Zero derives it from the container or host (see ResolveMemoryBudget).
	MemoryBudget int64
	// QueueCapacity bounds the requests waiting for a worker.
	QueueCapacity int
	// MaxQueueWait refuses arrivals whose projected queue wait exceeds it,
	// whatever deadline the caller brought.
	MaxQueueWait time.Duration
	// LIFOAfter switches the queue to newest-first while its oldest request
	// is this much later than the start projected at its admission (a
	// stall, a slowdown) and more than LIFOAfter/4 of work is queued.
	LIFOAfter time.Duration
	// DrainTimeout bounds a graceful drain; whatever is left after it is
	// cancelled.
	DrainTimeout time.Duration

	// Deadline governs default and maximum deadlines of incoming calls.
	Deadline deadline.Config
	// Policy is how new passwords are hashed and what counts as weak.
	Policy verify.Policy
	// Limits caps what a stored hash or password may ask for.
	Limits verify.Limits
	// Peppers are server-side secret keys mixed into Argon2id hashes
	// (HMAC-SHA256 of the password under the key, then Argon2): new hashes
	// use the current key and name it in their keyid; a stored hash under
	// another loaded key verifies and needs a rehash; one under a key not
	// loaded is refused with FAILED_PRECONDITION. The zero value is no
	// pepper. Load them with verify.LoadPepperFile; see docs/verifier.md#pepper.
	Peppers verify.Peppers

	// EtcdEndpoints, when set, register this verifier in etcd under
	// RegistryTarget once it is warm, so that gateways dialing
	// "etcd:///" + RegistryTarget find it; it deregisters first when it
	// drains. Empty: no registration (clients dial it directly).
	EtcdEndpoints []string
	// EtcdDialTimeout bounds connecting to etcd and deregistering at drain.
	EtcdDialTimeout time.Duration
	// RegistryTarget is the etcd naming target (key prefix) to register
	// under.
	RegistryTarget string
	// AdvertiseAddr is the host:port registered, the one gateways dial (an
	// empty host, ":7701", means this machine's host name);
	// empty means the actual gRPC listen address, which Serve refuses when
	// it is unspecified (0.0.0.0, ::): then AdvertiseAddr must be given.
	AdvertiseAddr string
	// RegistryTTL is the registration's lease TTL (whole seconds, at least
	// 2s): a verifier that dies without draining disappears within it.
	RegistryTTL time.Duration

	// EnableCapacityKnob allows VerifierAdminService.SetCapacity, which lowers
	// the node's capacity on purpose for experiments. Off by default.
	EnableCapacityKnob bool
	// Unguarded turns every overload defence off, making the node the plain
	// server of the lab's control fleet (levee-lab): an unbounded FIFO
	// queue (QueueCapacity, MaxQueueWait and LIFOAfter are ignored), no
	// deadline checks at arrival or dequeue, and every queued hash computed
	// even when its caller has left (workpool.Config.Unguarded). Never for
	// production.
	Unguarded bool

	// ServerLimits bound what one peer can make the server hold (connections,
	// streams, headers, handshake time, connection lifetime).
	ServerLimits serving.Limits

	// TLS is the node's identity: it serves mutual TLS with it (a caller
	// must present a certificate of the same CA), presents it to etcd, and
	// serves each method only to the roles Policy names. Nil is plaintext
	// (-insecure), a trusted network only: no caller is authorised, the
	// knob included (EnableCapacityKnob alone guards it).
	TLS *mtls.Source

	// Logger receives operational logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the verifier's metrics and is what its /metrics
	// serves (hence a Registry, which gathers, not a Registerer); nil means a
	// new private registry. Never the global default registry.
	Registry *prometheus.Registry
}

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	return Config{
		ServerLimits:  serving.DefaultLimits(),
		ListenAddr:    wellknown.LoopbackAddr(wellknown.VerifierPort),
		MetricsAddr:   wellknown.LoopbackAddr(wellknown.VerifierPort + wellknown.MetricsOffset),
		Workers:       runtime.GOMAXPROCS(0),
		QueueCapacity: 256,
		MaxQueueWait:  time.Second,
		LIFOAfter:     200 * time.Millisecond,
		DrainTimeout:  30 * time.Second,
		Deadline:      deadline.DefaultConfig(),
		Policy:        verify.DefaultPolicy(),
		Limits:        verify.DefaultLimits(),

		EtcdDialTimeout: 5 * time.Second,
		RegistryTarget:  registry.DefaultTarget,
		RegistryTTL:     registry.DefaultTTL,
	}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if err := c.ServerLimits.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("ServerLimits: %w", err))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("Workers must be at least 1, got %d", c.Workers))
	}
	if c.MemoryBudget < 0 {
		errs = append(errs, fmt.Errorf("MemoryBudget must not be negative (zero: derive it), got %d", c.MemoryBudget))
	} else if need, err := policyMemory(c); err == nil {
		if budget, source := c.ResolveMemoryBudget(); budget < need {
			errs = append(errs, fmt.Errorf("MemoryBudget %s (%s) cannot hold one hash of the policy (m = %d KiB = %s): "+
				"raise the budget (-memory-budget) or the container's memory limit, or lower the policy's memory",
				bytesize.Size(budget).Approx(), source, c.Policy.Params.Memory, bytesize.Size(need).Approx()))
		}
	}
	if c.QueueCapacity < 1 {
		errs = append(errs, fmt.Errorf("QueueCapacity must be at least 1, got %d", c.QueueCapacity))
	}
	if c.MaxQueueWait <= 0 {
		errs = append(errs, fmt.Errorf("MaxQueueWait must be positive, got %v", c.MaxQueueWait))
	}
	if c.LIFOAfter <= 0 {
		errs = append(errs, fmt.Errorf("LIFOAfter must be positive, got %v", c.LIFOAfter))
	}
	if c.DrainTimeout <= 0 {
		errs = append(errs, fmt.Errorf("DrainTimeout must be positive, got %v", c.DrainTimeout))
	}
	if err := c.Deadline.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Deadline: %w", err))
	}
	if err := c.Policy.Validate(c.Limits); err != nil {
		errs = append(errs, fmt.Errorf("Policy: %w", err))
	} else if err := c.Peppers.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Peppers: %w", err))
	} else if _, err := verify.NewWithPeppers(c.Policy, c.Limits, c.Peppers); err != nil {
		// The policy's hashes with the current keyid must fit MaxEncodedLen.
		errs = append(errs, fmt.Errorf("Peppers: %w", err))
	}
	if c.EtcdDialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("EtcdDialTimeout must be positive, got %v", c.EtcdDialTimeout))
	}
	if err := registry.CheckTarget(c.RegistryTarget); err != nil {
		errs = append(errs, fmt.Errorf("RegistryTarget: %w", err))
	}
	if c.AdvertiseAddr != "" {
		if err := registry.CheckAddr(registry.Advertised(c.AdvertiseAddr)); err != nil {
			errs = append(errs, fmt.Errorf("AdvertiseAddr: %w", err))
		}
	}
	if c.RegistryTTL == 0 {
		errs = append(errs, fmt.Errorf("RegistryTTL: %w: must be set", registry.ErrInvalidTTL))
	} else if err := registry.CheckTTL(c.RegistryTTL); err != nil {
		errs = append(errs, fmt.Errorf("RegistryTTL: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("verifier config: %w", err)
	}
	return nil
}

// policyMemory is the memory one hash of c's policy needs, or an error when
// the policy is invalid (Validate reports that separately).
func policyMemory(c Config) (int64, error) {
	v, err := verify.New(c.Policy, c.Limits)
	if err != nil {
		return 0, err
	}
	return v.PolicyHash().MemoryBytes(), nil
}

// ResolveMemoryBudget returns the memory budget a verifier built from c
// uses, and where it came from: MemoryBudget when set, else the default
// derived by residentheap.DefaultBudget from the container's memory limit or the
// host's memory; where neither can be read (not Linux), Workers hashes of
// the policy, the bound the workers alone used to give.
func (c Config) ResolveMemoryBudget() (budget int64, source string) {
	if c.MemoryBudget > 0 {
		return c.MemoryBudget, "configured"
	}
	budget, source, err := residentheap.DefaultBudget()
	if err == nil {
		return budget, source
	}
	need, perr := policyMemory(c)
	if perr != nil {
		return 0, fmt.Sprintf("%v; and the policy is invalid", err)
	}
	return int64(max(c.Workers, 1)) * need, fmt.Sprintf("workers × policy memory (%v)", err)
}
