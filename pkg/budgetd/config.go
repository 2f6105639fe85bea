package budgetd

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/internal/embeddedetcd"
	"github.com/leveehq/levee/internal/serving"
	"github.com/leveehq/levee/pkg/ledger"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/wellknown"
)

// Config configures one budgetd replica. Start from DefaultConfig.
type Config struct {
	// ListenAddr is the gRPC address (Run only).
	ListenAddr string
	// MetricsAddr is the HTTP address serving the status page at / and
	// /metrics (Run only); empty disables the HTTP listener.
	MetricsAddr string
	// AdvertiseAddr is the address the other replicas forward to when this
	// one leads; empty means the actual gRPC listen address, which is only
	// right when that is reachable from the other replicas (not 0.0.0.0).
	AdvertiseAddr string

	// EtcdEndpoints are the etcd client URLs; empty starts an embedded
	// single-node etcd described by EmbeddedEtcd.
	EtcdEndpoints []string
	// EmbeddedEtcd configures the embedded etcd (used only without
	// EtcdEndpoints).
	EmbeddedEtcd embeddedetcd.Config
	// EtcdDialTimeout bounds each attempt to connect to etcd.
	EtcdDialTimeout time.Duration

	// Prefix starts every etcd key budgetd reads or writes: the election
	// under <Prefix>election/, settings under <Prefix>config/<key>.
	Prefix string

	// RefreshInterval is how often clients are told to report; each answer
	// carries it jittered by ±RefreshJitter, so that clients spread out.
	RefreshInterval time.Duration
	// RefreshJitter is the relative jitter of RefreshInterval, in [0, 0.5].
	RefreshJitter float64
	// LeaseValidity is how long granted tokens stay valid; longer than
	// RefreshInterval, so that a client holds tokens across one late
	// report. It also sizes each Ledger's cap (one lease period of earnings).
	LeaseValidity time.Duration
	// ForgetAfter drops a client that has not reported for this long from
	// the accounting (its share returns to the fleet).
	ForgetAfter time.Duration
	// ElectionTTL is the TTL of the replica's etcd session, in whole
	// seconds (rounded up). The session is renewed every TTL/3, so one
	// missed renewal does not cost leadership; a leader that cannot renew
	// stops granting TTL−margin after its last renewal and steps down when
	// the session expires, and a crashed leader is replaced after about TTL.
	ElectionTTL time.Duration

	// Defaults are the settings of keys without their own configuration in
	// etcd, unless <Prefix>config/_default holds valid settings.
	Defaults ledger.Settings
	// MaxClientRate bounds what one identity (a certificate name; without
	// TLS, a client id) is credited with: first attempts plus retries a
	// second, over all its reports, keys, client ids and the replicas they
	// reach. It is enforced twice. One report that claims more than
	// MaxClientRate a second of its span (at least one second) for one key
	// is one no real client could make: it is refused with
	// INVALID_ARGUMENT, counted (leases_total{outcome="implausible"}), and
	// earns nothing. And the leader credits an identity's reports from a
	// bucket that refills at MaxClientRate up to ForgetAfter's worth; what
	// a report claims beyond it is not credited, and counted
	// (levee_budgetd_reported_uncredited_total). Set it above the busiest
	// identity's real rate: every process that presents one certificate
	// shares it.
	MaxClientRate float64
	// MaxClientsPerIdentity bounds the client ids one identity reports
	// under at once (ids are forgotten after ForgetAfter of silence); a
	// lease under one more is refused with RESOURCE_EXHAUSTED, and its
	// client runs on its local budget.
	MaxClientsPerIdentity int
	// MaxKeys bounds the budget keys the leader accounts for at once:
	// clients choose keys, so without a bound they could grow memory.
	MaxKeys int

	// ServerLimits bound what one peer can make the server hold (connections,
	// streams, headers, handshake time, connection lifetime).
	ServerLimits serving.Limits

	// TLS is the replica's identity: it serves mutual TLS with it (a client
	// must present a certificate of the same CA), and presents it to etcd
	// and to the leader it forwards to. Nil is plaintext (-insecure).
	TLS *mtls.Source

	// Now is the clock of the accounting; nil means time.Now. Leadership
	// timing always uses the real clock, as etcd does.
	Now func() time.Time
	// Logger receives operational logs; nil means slog.Default(). etcd's
	// own logs go there too, at EtcdLogLevel and above.
	Logger *slog.Logger
	// EtcdLogLevel is the least severe etcd log (client and embedded server)
	// passed to Logger; etcd is chatty below warn.
	EtcdLogLevel slog.Level
	// Registry receives budgetd's metrics and is what its /metrics serves
	// (hence a Registry, which gathers, not a Registerer); nil means a new
	// private registry. Never the global default registry (an embedded etcd
	// registers its own collectors there).
	Registry *prometheus.Registry
}

// DefaultConfig returns the production defaults.
func DefaultConfig() Config {
	return Config{
		ServerLimits: serving.DefaultLimits(),
		ListenAddr:   wellknown.LoopbackAddr(wellknown.BudgetdPort),
		MetricsAddr:  wellknown.LoopbackAddr(wellknown.BudgetdPort + wellknown.MetricsOffset),
		EmbeddedEtcd: embeddedetcd.Config{
			DataDir:   "budgetd.etcd",
			ClientURL: wellknown.LoopbackAddr(wellknown.EtcdClientPort), // http://, or https:// with TLS
			PeerURL:   wellknown.LoopbackAddr(wellknown.EtcdPeerPort),
			Name:      "budgetd",
		},
		EtcdDialTimeout: 5 * time.Second,
		Prefix:          "/levee/budget/",
		RefreshInterval: time.Second,
		RefreshJitter:   0.15,
		LeaseValidity:   3 * time.Second,
		ForgetAfter:     10 * time.Second,
		// A crashed leader is replaced about a TTL later: 2 s (etcd's
		// shortest lease) keeps that within the 3 s the fault suite holds
		// a failover to; etcd then has to answer a renewal within about
		// 1.3 s, or the leader steps down and clients use their local
		// budgets until the next one is elected.
		ElectionTTL:   2 * time.Second,
		Defaults:      ledger.DefaultSettings(),
		MaxKeys:       4096,
		MaxClientRate: 50_000,
		// A gateway or client process reports under one id; a thousand
		// processes sharing one certificate is a large fleet.
		MaxClientsPerIdentity: 1024,
		EtcdLogLevel:          slog.LevelError,
	}
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if err := c.ServerLimits.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("ServerLimits: %w", err))
	}
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for i, ep := range c.EtcdEndpoints {
		if strings.TrimSpace(ep) == "" {
			add("EtcdEndpoints[%d] is empty", i)
		}
	}
	if len(c.EtcdEndpoints) == 0 {
		if err := c.EmbeddedEtcd.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("EmbeddedEtcd: %w", err))
		}
	}
	if c.EtcdDialTimeout <= 0 {
		add("EtcdDialTimeout must be positive, got %v", c.EtcdDialTimeout)
	}
	if c.Prefix == "" || !strings.HasSuffix(c.Prefix, "/") {
		add("Prefix must be non-empty and end with \"/\", got %q", c.Prefix)
	}
	if c.RefreshInterval <= 0 {
		add("RefreshInterval must be positive, got %v", c.RefreshInterval)
	}
	if math.IsNaN(c.RefreshJitter) || c.RefreshJitter < 0 || c.RefreshJitter > 0.5 {
		add("RefreshJitter must be in [0, 0.5], got %g", c.RefreshJitter)
	}
	if maxRefresh := time.Duration(float64(c.RefreshInterval) * (1 + c.RefreshJitter)); c.LeaseValidity <= maxRefresh {
		add("LeaseValidity must exceed the longest jittered RefreshInterval (%v), got %v", maxRefresh, c.LeaseValidity)
	}
	if c.ForgetAfter < c.LeaseValidity {
		add("ForgetAfter must be at least LeaseValidity (%v), got %v", c.LeaseValidity, c.ForgetAfter)
	}
	if c.ElectionTTL < 2*time.Second {
		add("ElectionTTL must be at least 2s (etcd's shortest lease), got %v", c.ElectionTTL)
	}
	if err := c.Defaults.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Defaults: %w", err))
	}
	if !(c.MaxClientRate >= 1) || math.IsInf(c.MaxClientRate, 0) {
		add("MaxClientRate must be a finite number ≥ 1, got %v", c.MaxClientRate)
	}
	if c.MaxKeys < 1 {
		add("MaxKeys must be at least 1, got %d", c.MaxKeys)
	}
	if c.MaxClientsPerIdentity < 1 {
		add("MaxClientsPerIdentity must be at least 1, got %d", c.MaxClientsPerIdentity)
	}
	if c.AdvertiseAddr != "" {
		if err := checkHostPort(c.AdvertiseAddr); err != nil {
			add("AdvertiseAddr: %v", err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("budgetd config: %w", err)
	}
	return nil
}

func checkHostPort(s string) error {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return fmt.Errorf("want host:port, got %q", s)
	}
	return nil
}

// electionTTLSeconds is the session TTL as etcd takes it.
func (c Config) electionTTLSeconds() int64 {
	return int64((c.ElectionTTL + time.Second - 1) / time.Second)
}
