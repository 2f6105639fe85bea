package verifier

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leveehq/levee/pkg/bytesize"
	"github.com/leveehq/levee/pkg/deadline"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/registry"
	"github.com/leveehq/levee/pkg/residentheap"
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
	// pepper. Load them with LoadPepperFile; see docs/verifier.md#pepper.
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
	// server of the lab's control fleet (levee storm): an unbounded FIFO
	// queue (QueueCapacity, MaxQueueWait and LIFOAfter are ignored), no
	// deadline checks at arrival or dequeue, and every queued hash computed
	// even when its caller has left (workpool.Config.Unguarded). Never for
	// production.
	Unguarded bool

	// TLS is the node's identity: it serves mutual TLS with it (a caller
	// must present a certificate of the same CA), presents it to etcd, and
	// SetCapacity then demands the admin role (mtls.RoleAdmin) of the
	// caller's certificate. Nil is plaintext (-insecure), where the knob is
	// guarded by EnableCapacityKnob alone: a trusted network only.
	TLS *mtls.Source

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
		if err := registry.CheckAddr(advertised(c.AdvertiseAddr)); err != nil {
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

// maxPepperFileSize bounds what LoadPepperFile reads: a pepper file is a few
// lines, and anything much bigger is the wrong file.
const maxPepperFileSize = 64 << 10

// LoadPepperFile reads pepper keys from the file at path (format:
// ParsePeppers). It logs on log (nil: slog.Default()) the ids, the current
// id and the count, never key material, and warns when the file is readable
// by every user. Errors name the file and the line, never key material.
func LoadPepperFile(path string, log *slog.Logger) (verify.Peppers, error) {
	if log == nil {
		log = slog.Default()
	}
	f, err := os.Open(path)
	if err != nil {
		return verify.Peppers{}, fmt.Errorf("pepper file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return verify.Peppers{}, fmt.Errorf("pepper file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return verify.Peppers{}, fmt.Errorf("pepper file %s: not a regular file", path)
	}
	if fi.Size() > maxPepperFileSize {
		return verify.Peppers{}, fmt.Errorf("pepper file %s: %d bytes, over the %d a pepper file may have", path, fi.Size(), maxPepperFileSize)
	}
	p, err := ParsePeppers(io.LimitReader(f, maxPepperFileSize))
	if err != nil {
		return verify.Peppers{}, fmt.Errorf("pepper file %s: %w", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o004 != 0 {
		log.Warn("pepper file is readable by every user; restrict it (chmod 0400, or defaultMode 0400 on a Kubernetes secret volume)",
			"path", path, "mode", perm.String())
	}
	log.Info("pepper keys loaded", "path", path, "current", p.Current(), "ids", p.IDs(), "count", p.Len())
	return p, nil
}

// ParsePeppers reads the pepper file format: one entry a line, blank lines
// and lines starting with '#' ignored, surrounding spaces (and a CR) trimmed.
//
//	# new hashes use the key named by current=
//	current=2025-06
//	2025-06:<base64 key>
//	2024-01:<base64 key>
//
// Exactly one current=ID line names the key new hashes use; there is no
// default, so that a key added above or below the others never becomes
// current by accident. Every other line is ID:KEY, with ID 1 to 32 of A-Z,
// a-z, 0-9, '_' and '-' (written into every hash the key peppers), each ID
// once, and KEY in standard base64, padded or not (openssl rand -base64 32),
// of 16 to 64 bytes.
//
// Errors name the line number only: not the key, and not the id either, for
// a line written the wrong way round has the key where the id belongs.
func ParsePeppers(r io.Reader) (verify.Peppers, error) {
	var (
		keys        []verify.Pepper
		current     string
		currentLine int
		firstLine   = map[string]int{}
	)
	defer func() {
		for _, k := range keys {
			clear(k.Key) // NewPeppers keeps its own copies
		}
	}()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxPepperFileSize)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if id, ok := strings.CutPrefix(line, "current="); ok {
			if currentLine != 0 {
				return verify.Peppers{}, fmt.Errorf("line %d: second current= line (first on line %d)", n, currentLine)
			}
			current, currentLine = strings.TrimSpace(id), n
			continue
		}
		id, enc, ok := strings.Cut(line, ":")
		if !ok {
			return verify.Peppers{}, fmt.Errorf("line %d: want ID:BASE64KEY or current=ID", n)
		}
		id, enc = strings.TrimSpace(id), strings.TrimSpace(enc)
		if !verify.ValidPepperID(id) {
			return verify.Peppers{}, fmt.Errorf("line %d: key id: want 1 to %d of A-Z, a-z, 0-9, '_' and '-' before the ':'", n, verify.MaxPepperIDLen)
		}
		key, err := decodePepperKey(enc)
		if err != nil {
			return verify.Peppers{}, fmt.Errorf("line %d: key: not standard base64", n)
		}
		if len(key) < verify.MinPepperKeyLen || len(key) > verify.MaxPepperKeyLen {
			clear(key)
			return verify.Peppers{}, fmt.Errorf("line %d: key: %d bytes, want %d to %d (openssl rand -base64 32)",
				n, len(key), verify.MinPepperKeyLen, verify.MaxPepperKeyLen)
		}
		keys = append(keys, verify.Pepper{ID: id, Key: key})
		if first, dup := firstLine[id]; dup {
			return verify.Peppers{}, fmt.Errorf("line %d: duplicate key id (first on line %d)", n, first)
		}
		firstLine[id] = n
	}
	if err := sc.Err(); err != nil {
		return verify.Peppers{}, err
	}
	switch {
	case len(keys) == 0:
		return verify.Peppers{}, errors.New("no keys (want ID:BASE64KEY lines and a current=ID line)")
	case currentLine == 0:
		return verify.Peppers{}, errors.New("no current=ID line: name the key new hashes use")
	}
	if _, ok := firstLine[current]; !ok {
		return verify.Peppers{}, fmt.Errorf("line %d: current= names no key in the file", currentLine)
	}
	return verify.NewPeppers(current, keys...)
}

// decodePepperKey decodes standard base64, padded or not. Its error has no
// detail: a decoder's quotes an offset into the key.
func decodePepperKey(s string) ([]byte, error) {
	enc := base64.RawStdEncoding
	if strings.HasSuffix(s, "=") {
		enc = base64.StdEncoding
	}
	key, err := enc.Strict().DecodeString(s)
	if err != nil {
		return nil, errors.New("not standard base64")
	}
	return key, nil
}

// advertised fills an empty host (":7701") with this machine's host name, so
// that replicas started from one template (docker compose --scale, a
// Kubernetes Deployment) each register the name their peers resolve them by.
func advertised(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "" {
		return addr
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		return addr
	}
	return net.JoinHostPort(name, port)
}
