package verifier

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/pkg/bytesize"
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
	if c.MemoryBudget < 0 {
		errs = append(errs, fmt.Errorf("MemoryBudget must not be negative (zero: derive it), got %d", c.MemoryBudget))
	} else if need, err := policyMemory(c); err == nil {
		if budget, source := c.ResolveMemoryBudget(); budget < need {
			errs = append(errs, fmt.Errorf("MemoryBudget %s (%s) cannot hold one hash of the policy (m = %d KiB = %s): "+
				"raise the budget (-memory-budget) or the container's memory limit, or lower the policy's memory",
				ByteSize(budget).Approx(), source, c.Policy.Params.Memory, ByteSize(need).Approx()))
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
// derived by DefaultMemoryBudget from the container's memory limit or the
// host's memory; where neither can be read (not Linux), Workers hashes of
// the policy, the bound the workers alone used to give.
func (c Config) ResolveMemoryBudget() (budget int64, source string) {
	if c.MemoryBudget > 0 {
		return c.MemoryBudget, "configured"
	}
	budget, source, err := DefaultMemoryBudget()
	if err == nil {
		return budget, source
	}
	need, perr := policyMemory(c)
	if perr != nil {
		return 0, fmt.Sprintf("%v; and the policy is invalid", err)
	}
	return int64(max(c.Workers, 1)) * need, fmt.Sprintf("workers × policy memory (%v)", err)
}

// ByteSize is a number of bytes written with an explicit unit: "512MiB",
// "2GiB", "0.5GiB" (1024-based: KiB, MiB, GiB, TiB, or Kubernetes' Ki, Mi,
// Gi, Ti), "300MB" (1000-based: kB or KB, MB, GB, TB) or "4096B". A bare
// number is refused: whether "512" meant bytes or MiB is exactly the
// mistake that gets a pod killed. *ByteSize is a flag.Value, where "auto"
// stands for zero (derive the value).
type ByteSize int64

// ParseByteSize parses a size with an explicit unit (bytesize.Parse): a bare
// number or a lone K/M/G/T is refused, not guessed.
func ParseByteSize(s string) (ByteSize, error) {
	n, err := bytesize.Parse(s)
	return ByteSize(n), err
}

// String writes b exactly, so that it parses back to the same value; zero
// is "auto".
func (b ByteSize) String() string {
	if b == 0 {
		return "auto"
	}
	return bytesize.Format(int64(b))
}

// Approx writes b for people ("11.7GiB").
func (b ByteSize) Approx() string { return bytesize.Size(b).Approx() }

// Set implements flag.Value: a size with a unit, or "auto" for zero.
func (b *ByteSize) Set(s string) error {
	if strings.TrimSpace(s) == "auto" {
		*b = 0
		return nil
	}
	n, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("size %q: must be positive (or auto)", s)
	}
	*b = n
	return nil
}
