package budget

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/leveehq/levee/pkg/ledger"
)

// MaxKeys is the most budget keys one Client reports (levee.budget.v1);
// how long a key or client ID may be is ledger.MaxNameLen.
const MaxKeys = 64

// Errors callers branch on.
var (
	// ErrInvalidConfig is wrapped by every error Config.Validate returns.
	ErrInvalidConfig = errors.New("budget: invalid config")
	// ErrInvalidKey is wrapped when a key is not a valid name
	// (ledger.ValidateName).
	ErrInvalidKey = errors.New("budget: invalid key")
	// ErrTooManyKeys is returned by Client.Key beyond MaxKeys keys.
	ErrTooManyKeys = errors.New("budget: too many keys")
	// ErrClosed is returned by Client.Key and Client.Refresh after Close.
	ErrClosed = errors.New("budget: client closed")
)

// Config configures a Client. Start from DefaultConfig and set Target.
type Config struct {
	// Target names the budgetd replicas. Either one gRPC target
	// ("dns:///budgetd.internal:7801", "127.0.0.1:7801") or a comma-separated
	// list of host:port addresses ("10.0.0.1:7801,10.0.0.2:7801"), which is
	// served by a static resolver. Either way calls are balanced round-robin
	// over the replicas that are connected: any replica can answer (followers
	// forward to the leader), so losing one costs no refresh. Ignored when
	// Conn is set.
	Target string
	// Conn, when set, is used instead of dialling Target; the Client does not
	// close it.
	Conn grpc.ClientConnInterface
	// DialOptions are appended to the Client's own when it dials Target
	// (insecure transport credentials and round_robin by default; a
	// credentials option here replaces the insecure default).
	DialOptions []grpc.DialOption

	// ClientID identifies this process to budgetd: at most 128 bytes of
	// [A-Za-z0-9._:/-], stable for the life of the process. DefaultConfig
	// sets host/pid/random.
	ClientID string
	// Keys are leased from the start; Client.Key adds more later.
	Keys []string

	// RefreshInterval is the refresh period until budgetd suggests one, and
	// the longest wait between failed refreshes.
	RefreshInterval time.Duration
	// LeaseTimeout bounds one Lease call.
	LeaseTimeout time.Duration

	// DefaultRatio is the fallback Ratio (retries per first attempt) for a
	// key budgetd never sent settings for. Once it has, its Ratio is used.
	DefaultRatio float64
	// FallbackMinPerSecond is what a key in fallback earns per second
	// whatever this process sends, so a quiet process can still retry, until
	// budgetd has sent the key a lease: from then on the key's fallback earns
	// the process's share of budgetd's fleet-wide min_per_second instead (in
	// proportion to its share of the fleet's first attempts), so that a
	// fleet of any size in fallback earns no more than budgetd would. It is
	// per process; keep it small.
	FallbackMinPerSecond float64
	// FallbackBurst is the most tokens a key in fallback holds unspent.
	FallbackBurst float64

	// TokensHeadroom is added to the tokens a key asks for: want =
	// ceil(Ratio × recent first attempts per second × lease period) +
	// TokensHeadroom, at most MaxTokensWanted. Asking beyond a fair share is
	// harmless: budgetd grants it only from tokens nobody else is using.
	TokensHeadroom uint32
	// MaxTokensWanted caps the tokens a key asks for in one lease.
	MaxTokensWanted uint32

	// Logger receives mode changes (fallback entered, shared again); nil
	// means slog.Default(). Nothing is logged per request.
	Logger *slog.Logger
	// Registry receives the metrics; nil means a new private registry.
	Registry prometheus.Registerer
	// Clock tells time; nil means the system clock. Tests inject a fake.
	Clock Clock
}

// DefaultConfig returns the defaults: refresh every second until budgetd
// says otherwise, 1 s per Lease call, fallback Ratio 0.1, a fallback minimum
// of one token per 10 s and burst of 10, two tokens of headroom, at most
// 1,000 tokens wanted, and a ClientID of host/pid/random. Target is empty.
func DefaultConfig() Config {
	return Config{
		ClientID:             DefaultClientID(),
		RefreshInterval:      time.Second,
		LeaseTimeout:         time.Second,
		DefaultRatio:         0.1,
		FallbackMinPerSecond: 0.1,
		FallbackBurst:        10,
		TokensHeadroom:       2,
		MaxTokensWanted:      1000,
	}
}

// DefaultClientID returns "host/pid/xxxxxxxx": the host name with bytes
// outside the allowed set replaced by '-', the process ID and 32 random bits
// (two processes reusing a PID in two containers stay apart).
func DefaultClientID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	suffix := "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:])
	host = strings.Map(func(r rune) rune {
		if r < 0x80 && ledger.NameByte(byte(r)) {
			return r
		}
		return '-'
	}, host)
	if len(host) > ledger.MaxNameLen-len(suffix) {
		host = host[:ledger.MaxNameLen-len(suffix)]
	}
	return host + suffix
}

// Validate reports every invalid field; each problem wraps ErrInvalidConfig
// and names the field.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.Conn == nil {
		if _, err := parseTarget(c.Target); err != nil {
			bad("Target: %v", err)
		}
	}
	if err := ledger.ValidateName(c.ClientID); err != nil {
		bad("ClientID: %v", err)
	}
	if len(c.Keys) > MaxKeys {
		bad("Keys: %d keys, at most %d", len(c.Keys), MaxKeys)
	}
	for _, k := range c.Keys {
		if err := ValidateKey(k); err != nil {
			bad("Keys: %v", err)
		}
	}
	if c.RefreshInterval < minRefresh {
		bad("RefreshInterval must be at least %v, got %v", minRefresh, c.RefreshInterval)
	}
	if c.LeaseTimeout <= 0 {
		bad("LeaseTimeout must be positive, got %v", c.LeaseTimeout)
	}
	if !inRange(c.DefaultRatio, 0, 10) {
		bad("DefaultRatio must be in [0, 10], got %g", c.DefaultRatio)
	}
	if !inRange(c.FallbackMinPerSecond, 1e-6, 1e6) {
		bad("FallbackMinPerSecond must be in [1e-06, 1e+06] (never zero), got %g", c.FallbackMinPerSecond)
	}
	if !inRange(c.FallbackBurst, 1, 1e9) {
		bad("FallbackBurst must be in [1, 1e+09], got %g", c.FallbackBurst)
	}
	if c.MaxTokensWanted == 0 {
		bad("MaxTokensWanted must be positive")
	}
	return errors.Join(errs...)
}

func inRange(v, lo, hi float64) bool { return !math.IsNaN(v) && v >= lo && v <= hi }

// ValidateKey reports whether key can name a budget (ledger.ValidateName).
// The error wraps ErrInvalidKey and ledger.ErrInvalidName.
func ValidateKey(key string) error {
	if err := ledger.ValidateName(key); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	return nil
}

// parseTarget returns the addresses of a comma-separated list, or the one
// target unchanged when target holds no comma.
func parseTarget(target string) ([]string, error) {
	target = strings.TrimSpace(target)
	if target == "" {
		return nil, errors.New("empty")
	}
	if !strings.Contains(target, ",") {
		return []string{target}, nil
	}
	var addrs []string
	for _, a := range strings.Split(target, ",") {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
			return nil, errors.New("empty address in list")
		case strings.Contains(a, "://"), strings.Contains(a, ":///"):
			return nil, fmt.Errorf("list entry %q: a list holds host:port addresses, not targets", a)
		}
		addrs = append(addrs, a)
	}
	return addrs, nil
}
