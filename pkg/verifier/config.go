package verifier

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/pkg/deadline"
	"github.com/leveehq/levee/pkg/registry"
	"github.com/leveehq/levee/pkg/verify"
)

// Config configures a verifier. Start from DefaultConfig.
type Config struct {
	// ListenAddr is the gRPC address (Run only).
	ListenAddr string
	// MetricsAddr is the HTTP address serving /metrics (Run only); empty
	// disables the metrics listener.
	MetricsAddr string

	// Workers is the number of hashes that may run at once: one per core by
	// default. It also bounds Argon2 memory: at most Workers × m live at once.
	Workers int
	// QueueCapacity bounds the requests waiting for a worker.
	QueueCapacity int
	// MaxQueueWait refuses arrivals whose projected queue wait exceeds it,
	// whatever deadline the caller brought.
	MaxQueueWait time.Duration
	// LIFOAfter switches the queue to newest-first once its oldest request
	// has waited this long (back to oldest-first when it drains).
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
	// AdvertiseAddr is the host:port registered, the one gateways dial;
	// empty means the actual gRPC listen address, which Serve refuses when
	// it is unspecified (0.0.0.0, ::): then AdvertiseAddr must be given.
	AdvertiseAddr string
	// RegistryTTL is the registration's lease TTL (whole seconds, at least
	// 2s): a verifier that dies without draining disappears within it.
	RegistryTTL time.Duration

	// EnableCapacityKnob allows VerifierAdminService.SetCapacity, which lowers
	// the node's capacity on purpose for experiments. Off by default.
	EnableCapacityKnob bool

	// Logger receives operational logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the verifier's metrics; nil means a new private
	// registry. Never the global default registry.
	Registry *prometheus.Registry
}

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	return Config{
		ListenAddr:    "127.0.0.1:7701",
		MetricsAddr:   "127.0.0.1:9701",
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
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("Workers must be at least 1, got %d", c.Workers))
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
	}
	if c.EtcdDialTimeout <= 0 {
		errs = append(errs, fmt.Errorf("EtcdDialTimeout must be positive, got %v", c.EtcdDialTimeout))
	}
	if err := registry.CheckTarget(c.RegistryTarget); err != nil {
		errs = append(errs, fmt.Errorf("RegistryTarget: %w", err))
	}
	if c.AdvertiseAddr != "" {
		if err := registry.CheckAddr(c.AdvertiseAddr); err != nil {
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
