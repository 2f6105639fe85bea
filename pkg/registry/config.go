package registry

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultTarget is the etcd naming target verifiers register under.
const DefaultTarget = "levee/verifiers"

// DefaultTTL is the lease TTL when Config.TTL is zero: how long a node that
// died without deregistering stays visible.
const DefaultTTL = 5 * time.Second

// MinTTL is the shortest lease TTL: etcd extends shorter leases to about
// this anyway (one and a half election timeouts, rounded up).
const MinTTL = 2 * time.Second

// Errors returned (wrapped) by Config.Validate, one per field.
var (
	ErrNoClient      = errors.New("registry: Client is required")
	ErrInvalidTarget = errors.New("registry: invalid Target")
	ErrInvalidAddr   = errors.New("registry: invalid Addr")
	ErrInvalidTTL    = errors.New("registry: invalid TTL")
)

// Config describes one registration.
type Config struct {
	// Client reaches etcd. Required; the registration never closes it, and
	// closing it ends the registration (the key then expires with its
	// lease).
	Client *clientv3.Client
	// Target is the naming target, DefaultTarget for verifiers: clients
	// dial "etcd:///" + Target. The key is Target + "/" + Addr.
	Target string
	// Addr is the host:port others dial. A listen address such as
	// 0.0.0.0:7701 or :7701, or port 0, is refused: nobody can dial it.
	Addr string
	// TTL is the lease TTL, in whole seconds, at least MinTTL; zero means
	// DefaultTTL. A node that dies without Close disappears within TTL, and
	// so does one cut off from etcd for longer than TTL (until it is back).
	TTL time.Duration
	// Logger receives lease losses and re-registrations; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, ErrNoClient)
	}
	errs = append(errs, CheckTarget(c.Target), CheckAddr(c.Addr), CheckTTL(c.TTL))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("registry config: %w", err)
	}
	return nil
}

// CheckTarget reports whether target can be a naming target: not empty,
// and without a leading or trailing slash (the resolver strips the one
// after "etcd://", and keys are target + "/" + addr). Validate applies it;
// it is exported for configurations that embed a registration and are
// validated before an etcd client exists.
func CheckTarget(target string) error {
	switch {
	case target == "":
		return fmt.Errorf("%w: empty", ErrInvalidTarget)
	case strings.HasPrefix(target, "/") || strings.HasSuffix(target, "/"):
		return fmt.Errorf("%w: %q must not start or end with /", ErrInvalidTarget, target)
	}
	return nil
}

// CheckAddr reports whether addr is an address others can dial: host:port
// with a host that is neither empty nor unspecified (0.0.0.0, ::) and a
// port from 1 to 65535. Validate applies it; it is exported for
// configurations that embed a registration (and learn their address only
// once listening).
func CheckAddr(addr string) error {
	if addr == "" {
		return fmt.Errorf("%w: empty; give the host:port others dial", ErrInvalidAddr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: %q is not host:port: %v", ErrInvalidAddr, addr, err)
	}
	if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
		return fmt.Errorf("%w: %q has an unspecified host that nobody can dial; give the host others reach this one at",
			ErrInvalidAddr, addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("%w: %q needs a port from 1 to 65535 (a listener on port 0 must advertise the port it got)",
			ErrInvalidAddr, addr)
	}
	return nil
}

// CheckTTL reports whether ttl can be a lease TTL: zero (DefaultTTL), or
// whole seconds and at least MinTTL. Validate applies it.
func CheckTTL(ttl time.Duration) error {
	switch {
	case ttl == 0:
	case ttl < MinTTL:
		return fmt.Errorf("%w: must be at least %v, got %v", ErrInvalidTTL, MinTTL, ttl)
	case ttl%time.Second != 0:
		return fmt.Errorf("%w: must be whole seconds (etcd leases are), got %v", ErrInvalidTTL, ttl)
	}
	return nil
}
