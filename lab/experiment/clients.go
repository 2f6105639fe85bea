package experiment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/lab/observe"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/verify"
)

// Kind is a client population's behaviour.
type Kind string

// The populations a mix draws from.
const (
	// Naive is an ordinary SDK: Attempts attempts, each with its own
	// Timeout, the next sent at once after any error, no backoff, no budget,
	// no attempt header.
	Naive Kind = "naive"
	// Levee is pkg/client: one deadline for the call, retries only for
	// retryable codes, full-jitter backoff over the server's pushback, and
	// every retry funded by the fleet-wide budget (budgetd), reported from a
	// few client processes.
	Levee Kind = "levee"
	// Human is a person at a login page: waits up to Patience, then, or
	// after any error, waits Think and tries again, Tries times in all,
	// whatever the answer said.
	Human Kind = "human"
	// NoDeadline sends no deadline at all (the fleet applies its default);
	// the lab gives up on it after Cap.
	NoDeadline Kind = "nodeadline"
)

// Kinds are the populations, in the order reports list them.
var Kinds = []Kind{Naive, Levee, Human, NoDeadline}

// Clients describes the populations calling the fleet.
type Clients struct {
	// Mix is each population's share of the arrivals; shares need not sum
	// to 1 (they are normalised).
	Mix map[Kind]float64
	// Priorities is each priority's share of every population's arrivals,
	// sent as levee-priority; empty sends none (the fleet's default).
	Priorities map[callmeta.Priority]float64

	Naive      NaiveConfig
	Levee      LeveeConfig
	Human      HumanConfig
	NoDeadline NoDeadlineConfig

	// Adversary is one caller sending a share of the calls badly, beside
	// the mix (Kind NoAdversary: none).
	Adversary Adversary

	// Tenants, when set, replace the mix: each tenant's arrivals are its
	// own Poisson process at its Load × the experiment's Load × C, of its
	// own kind, calling with its own stored hash and naming it in
	// levee-tenant; the series records each tenant on its own too.
	Tenants []Tenant

	// Conns is how many gRPC connections the lab opens to the target.
	Conns int
	// MaxInFlight caps the logical requests in flight at once: arrivals
	// beyond it are not sent and are counted as generator_dropped, so that
	// the lab never becomes the bottleneck it measures.
	MaxInFlight int
}

// NaiveConfig is the naive clients' SDK: how many attempts, and each one's
// timeout.
type NaiveConfig struct {
	Attempts int
	Timeout  time.Duration // per attempt
}

// LeveeConfig is pkg/client.
type LeveeConfig struct {
	Deadline    time.Duration // for the whole call, retries included
	MaxAttempts int
	// BudgetKey is the fleet budget key the lab's clients lease from.
	BudgetKey string
	// Processes is how many client processes the population stands for,
	// each with its own budget client reporting to budgetd.
	Processes int
}

// HumanConfig is a person retrying by hand.
type HumanConfig struct {
	Patience time.Duration // per try
	Think    time.Duration // between tries
	Tries    int
}

// NoDeadlineConfig is a caller that sends no deadline.
type NoDeadlineConfig struct {
	Cap time.Duration // the lab gives up after this
}

// DefaultClients are naive clients only: three immediate attempts, 2 s
// timeout each; no priority header.
func DefaultClients() Clients {
	return Clients{
		Mix:         map[Kind]float64{Naive: 1},
		Naive:       NaiveConfig{Attempts: 3, Timeout: 2 * time.Second},
		Levee:       LeveeConfig{Deadline: 2 * time.Second, MaxAttempts: 3, BudgetKey: "storm", Processes: 4},
		Human:       HumanConfig{Patience: 5 * time.Second, Think: time.Second, Tries: 3},
		NoDeadline:  NoDeadlineConfig{Cap: 30 * time.Second},
		Adversary:   DefaultAdversary(),
		Conns:       4,
		MaxInFlight: 50000,
	}
}

// Validate reports every invalid field.
func (c Clients) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	total := 0.0
	for k, s := range c.Mix {
		if !slices.Contains(Kinds, k) {
			bad("clients: unknown population %q (want naive, levee, human or nodeadline)", k)
		}
		if !(s >= 0) || math.IsInf(s, 0) {
			bad("clients: share of %s must be a non-negative number, got %v", k, s)
		}
		total += s
	}
	if !(total > 0) {
		bad("clients: the mix has no population with a positive share")
	}
	for p, s := range c.Priorities {
		if p < callmeta.Critical || p > callmeta.Batch {
			bad("clients: unknown priority %v", p)
		}
		if !(s >= 0) || math.IsInf(s, 0) {
			bad("clients: share of priority %v must be a non-negative number, got %v", p, s)
		}
	}
	if c.Naive.Attempts < 1 || c.Naive.Attempts > callmeta.MaxAttempt {
		bad("clients: naive attempts must be in [1, %d], got %d", callmeta.MaxAttempt, c.Naive.Attempts)
	}
	if c.Naive.Timeout <= 0 {
		bad("clients: naive timeout must be positive, got %v", c.Naive.Timeout)
	}
	if c.Levee.Deadline <= 20*time.Millisecond {
		bad("clients: levee deadline must exceed 20ms, got %v", c.Levee.Deadline)
	}
	if c.Levee.MaxAttempts < 1 || c.Levee.MaxAttempts > callmeta.MaxAttempt {
		bad("clients: levee attempts must be in [1, %d], got %d", callmeta.MaxAttempt, c.Levee.MaxAttempts)
	}
	if c.Levee.BudgetKey == "" {
		bad("clients: levee budget key must not be empty")
	}
	if c.Levee.Processes < 1 || c.Levee.Processes > 1000 {
		bad("clients: levee processes must be in [1, 1000], got %d", c.Levee.Processes)
	}
	if c.Human.Patience <= 0 || c.Human.Think < 0 || c.Human.Tries < 1 || c.Human.Tries > 100 {
		bad("clients: human wants positive patience, non-negative think time and 1 to 100 tries, got %v, %v, %d",
			c.Human.Patience, c.Human.Think, c.Human.Tries)
	}
	if c.NoDeadline.Cap <= 0 {
		bad("clients: nodeadline cap must be positive, got %v", c.NoDeadline.Cap)
	}
	if c.Conns < 1 || c.Conns > 64 {
		bad("clients: conns must be in [1, 64], got %d", c.Conns)
	}
	if c.MaxInFlight < 1 {
		bad("clients: max in flight must be positive, got %d", c.MaxInFlight)
	}
	if err := c.Adversary.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := validateTenants(c.Tenants); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// uses says whether any population of kind calls: a tenant of that kind, or
// (without tenants) a positive share of the mix.
func (c Clients) uses(k Kind) bool {
	if len(c.Tenants) > 0 {
		return slices.ContainsFunc(c.Tenants, func(t Tenant) bool { return t.Kind == k })
	}
	return c.Mix[k] > 0
}

// patience is the longest a logical request of the mix can last.
func (c Clients) patience() time.Duration {
	var p time.Duration
	for _, k := range Kinds {
		if !c.uses(k) {
			continue
		}
		switch k {
		case Naive:
			p = max(p, time.Duration(c.Naive.Attempts)*c.Naive.Timeout)
		case Levee:
			p = max(p, c.Levee.Deadline)
		case Human:
			p = max(p, time.Duration(c.Human.Tries)*(c.Human.Patience+c.Human.Think))
		case NoDeadline:
			p = max(p, c.NoDeadline.Cap)
		}
	}
	return p
}

// ParseMix reads "naive:0.7,levee:0.2,human:0.1" (a population alone has
// share 1). Shares are non-negative numbers; each population at most once.
func ParseMix(s string) (map[Kind]float64, error) {
	out := map[Kind]float64{}
	err := parseShares(s, func(name string, share float64) error {
		k := Kind(name)
		if !slices.Contains(Kinds, k) {
			return fmt.Errorf("unknown population %q (want naive, levee, human or nodeadline)", truncate(name))
		}
		if _, dup := out[k]; dup {
			return fmt.Errorf("population %s named twice", k)
		}
		out[k] = share
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mix %q: %w", truncate(s), err)
	}
	return out, nil
}

// ParsePriorities reads "critical:0.1,interactive:0.7,batch:0.2".
func ParsePriorities(s string) (map[callmeta.Priority]float64, error) {
	out := map[callmeta.Priority]float64{}
	err := parseShares(s, func(name string, share float64) error {
		p, err := callmeta.ParsePriority(name)
		if err != nil || p == callmeta.PriorityUnspecified {
			return fmt.Errorf("unknown priority %q (want critical, interactive or batch)", truncate(name))
		}
		if _, dup := out[p]; dup {
			return fmt.Errorf("priority %s named twice", p)
		}
		out[p] = share
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("priorities %q: %w", truncate(s), err)
	}
	return out, nil
}

// parseShares splits "name[:share],..." and calls add for each entry.
func parseShares(s string, add func(name string, share float64) error) error {
	if strings.TrimSpace(s) == "" {
		return errors.New("empty")
	}
	total := 0.0
	for _, part := range strings.Split(s, ",") {
		name, num, hasShare := strings.Cut(strings.TrimSpace(part), ":")
		share := 1.0
		if hasShare {
			v, err := strconv.ParseFloat(num, 64)
			if err != nil || !(v >= 0) || math.IsInf(v, 0) || v > 1e6 {
				return fmt.Errorf("share %q of %q: want a non-negative number", truncate(num), truncate(name))
			}
			share = v
		}
		if name == "" {
			return errors.New("an entry has no name")
		}
		if err := add(name, share); err != nil {
			return err
		}
		total += share
	}
	if !(total > 0) {
		return errors.New("every share is zero")
	}
	return nil
}

// truncate bounds user text quoted back in errors.
func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// attemptKey carries the attempt number of a lab call that sends no attempt
// header (naive, human), for recordingConn.
type attemptKey struct{}

func withAttempt(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, attemptKey{}, n)
}

// tenantKey carries the index (in Clients.Tenants) of the tenant a lab
// call is made for, for recordingConn.
type tenantKey struct{}

func withTenant(ctx context.Context, i int) context.Context {
	return context.WithValue(ctx, tenantKey{}, i)
}

// tenantOf is the tenant index recordingConn counts a call for; -1 for
// none.
func tenantOf(ctx context.Context) int {
	if i, ok := ctx.Value(tenantKey{}).(int); ok {
		return i
	}
	return -1
}

// attemptOf is the attempt number recordingConn counts a call as: the lab's
// own note, else the levee-attempt header pkg/client sent, else 1.
func attemptOf(ctx context.Context) int {
	if n, ok := ctx.Value(attemptKey{}).(int); ok {
		return n
	}
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		if vs := md.Get(callmeta.AttemptKey); len(vs) == 1 {
			if n, err := strconv.Atoi(vs[0]); err == nil {
				return n
			}
		}
	}
	return 1
}

// recordingConn counts every attempt any population sends, and how it
// ended, into the series: one place for every kind, pkg/client's included.
type recordingConn struct {
	cc grpc.ClientConnInterface
	s  *observe.Series
}

func (r recordingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	first, tenant := attemptOf(ctx) <= 1, tenantOf(ctx)
	sent := time.Now()
	r.s.Add(sent, func(x *observe.Second) {
		if first {
			x.First.Add(1)
		} else {
			x.Retries.Add(1)
		}
	})
	r.s.AddTenant(sent, tenant, func(x *observe.TenantSecond) { x.Attempts.Add(1) })
	err := r.cc.Invoke(ctx, method, args, reply, opts...)
	code := classify(ctx, err)
	ended := time.Now()
	r.s.Add(ended, func(x *observe.Second) { x.Codes[code].Add(1) })
	r.s.AddTenant(ended, tenant, func(x *observe.TenantSecond) { x.Codes[code].Add(1) })
	return err
}

func (r recordingConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return r.cc.NewStream(ctx, desc, method, opts...)
}

// classify maps an attempt's end to an outcome class: a deadline that passed
// on the caller's side is the caller timing out, one the server sent before
// it is the server's refusal.
func classify(ctx context.Context, err error) observe.Code {
	if err == nil {
		return observe.CodeOK
	}
	switch status.Code(err) {
	case codes.ResourceExhausted:
		return observe.CodeResourceExhausted
	case codes.Unavailable:
		return observe.CodeUnavailable
	case codes.DeadlineExceeded:
		if ctx.Err() != nil {
			return observe.CodeTimeout
		}
		return observe.CodeDeadlineExceeded
	case codes.Canceled:
		if ctx.Err() != nil {
			return observe.CodeTimeout
		}
		return observe.CodeCanceled
	}
	return observe.CodeOther
}

// Request is one logical request's target: a stored hash and the password
// that matches it.
type Request struct {
	hash     string
	password []byte
	// params are the stored hash's, when NewRequest made it.
	params verify.Params
}

// costing is q's password under a stored hash cost times q's: memory ×
// cost (q itself for a cost of 1).
func (q Request) costing(cost int) (Request, error) {
	if cost <= 1 {
		return q, nil
	}
	if q.params.Memory == 0 {
		return Request{}, errors.New("experiment: a tenant's hash cost needs the lab's own stored hash")
	}
	return NewRequest(Tenant{Cost: cost}.Params(q.params))
}

func (q Request) verify() *verifyv1.VerifyRequest {
	return &verifyv1.VerifyRequest{EncodedHash: q.hash, Password: q.password}
}

// attemptsUntilOK sends up to n attempts of q through rpc, each under
// perAttempt (none: no deadline of its own), waiting pause between them,
// whatever each answer said: the naive SDK (pause 0) and the human (pause:
// think time). It reports success.
func attemptsUntilOK(ctx context.Context, rpc verifyv1.VerifyServiceClient, q Request, f callmeta.Facts, n int,
	perAttempt, pause time.Duration, s *observe.Series) bool {
	for a := 1; a <= n; a++ {
		if a > 1 && pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return false
			case <-t.C:
			}
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if perAttempt > 0 {
			actx, cancel = context.WithTimeout(ctx, perAttempt)
		}
		actx = callmeta.AppendOutgoing(withAttempt(actx, a), f)
		resp, err := rpc.Verify(actx, q.verify())
		cancel()
		if err == nil {
			if !resp.GetMatch() {
				s.Add(time.Now(), func(x *observe.Second) { x.Wrong.Add(1) })
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
	}
	return false
}
