package budget

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/types/known/durationpb"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/backoff"
	"github.com/leveehq/levee/pkg/ledger"
)

// Refresh timing bounds.
const (
	// minRefresh is the shortest wait between two refreshes, whatever
	// budgetd suggests.
	minRefresh = 10 * time.Millisecond
	// failBackoffBase is the first wait after a failed refresh; it doubles
	// per consecutive failure up to RefreshInterval.
	failBackoffBase = 100 * time.Millisecond
	// maxValidFor bounds what a lease may claim, so that a confused server
	// cannot hand out tokens that never expire.
	maxValidFor = 10 * time.Minute
)

// Client leases retry tokens from budgetd for every key of one process and
// reports what the process sent. Make one per process with New; it is safe
// for concurrent use. Close stops its refresher.
type Client struct {
	cfg   Config
	log   *slog.Logger
	clock Clock
	now   func() time.Time
	rpc   budgetv1.BudgetServiceClient
	conn  *grpc.ClientConn // owned; nil when cfg.Conn was given

	keysMu sync.Mutex
	byKey  map[string]*Budget
	keys   atomic.Pointer[[]*Budget] // copy-on-write, for the refresher
	closed bool

	refreshMu sync.Mutex // one refresh at a time
	nudge     chan struct{}
	stop      context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	lastLease atomic.Pointer[time.Time]
	lastErr   atomic.Pointer[errorAt]
	failures  atomic.Int64 // consecutive failed refreshes
	leader    atomic.Pointer[string]
	refreshOK atomic.Uint64
	refreshNG atomic.Uint64
	inFallbk  atomic.Bool // client-level, for logging transitions once
}

type errorAt struct {
	err error
	at  time.Time
}

// New validates cfg, connects to budgetd (without waiting for it: until the
// first lease arrives every key is in fallback) and starts the refresher,
// which asks for a first lease at once.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: cfg.Logger, clock: cfg.Clock, byKey: map[string]*Budget{}, nudge: make(chan struct{}, 1)}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.clock == nil {
		c.clock = systemClock{}
	}
	c.now = c.clock.Now
	c.inFallbk.Store(true)
	empty := []*Budget{}
	c.keys.Store(&empty)

	cc := cfg.Conn
	if cc == nil {
		conn, err := dial(cfg.Target, cfg.DialOptions)
		if err != nil {
			return nil, fmt.Errorf("budget: dial %q: %w", cfg.Target, err)
		}
		c.conn, cc = conn, conn
	}
	c.rpc = budgetv1.NewBudgetServiceClient(cc)

	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if err := reg.Register(&collector{c: c}); err != nil {
		if c.conn != nil {
			c.conn.Close()
		}
		return nil, fmt.Errorf("budget: register metrics: %w", err)
	}
	for _, k := range cfg.Keys {
		if _, err := c.addKey(k); err != nil {
			return nil, err // unreachable: Validate checked the keys
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	c.wg.Go(func() { c.run(ctx) })
	return c, nil
}

// dial connects round-robin to one target or to a static list of addresses.
func dial(target string, extra []grpc.DialOption) (*grpc.ClientConn, error) {
	addrs, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Round robin over every connected replica, without client-side
		// health checking: measured in TestFleetFailover, excluding
		// replicas that say NOT_SERVING during a leader change put 45 of
		// 100 clients in fallback at once, against 1 without it (a
		// follower that has not seen the new leader yet still answers
		// quickly, and the next refresh finds it).
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		// After an outage, reconnect within seconds, not on grpc's default
		// backoff of up to two minutes: every second in fallback is a second
		// in which the fleet's retries are bounded only per process.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
		// A connection whose packets are dropped (a partition, a hung host)
		// fails no call by itself: each lease times out on it, and after
		// the network heals TCP's own retransmissions may take tens of
		// seconds to notice. An unanswered ping closes it, and the next
		// connection is dialled within the backoff above. (grpc-go pings at
		// most every 10 s; budgetd allows pings every 5 s.)
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}),
	}
	if len(addrs) > 1 {
		// A resolver per Client (WithResolvers), never the global registry.
		r := manual.NewBuilderWithScheme("levee-budgetd")
		state := resolver.State{}
		for _, a := range addrs {
			// Each replica's TLS name is its own host, not the list's
			// made-up authority: a certificate names budgetd1, budgetd2.
			host, _, err := net.SplitHostPort(a)
			if err != nil {
				host = a
			}
			state.Endpoints = append(state.Endpoints, resolver.Endpoint{Addresses: []resolver.Address{{Addr: a, ServerName: host}}})
		}
		r.InitialState(state)
		opts = append(opts, grpc.WithResolvers(r))
		target = r.Scheme() + ":///budgetd"
	}
	return grpc.NewClient(target, append(opts, extra...)...)
}

// ID returns the client ID reported to budgetd.
func (c *Client) ID() string { return c.cfg.ClientID }

// Key returns the Budget of key, adding the key to the next lease request
// if it is new (and asking the refresher to refresh soon). Until its first
// lease arrives a new key is in fallback. Callers should keep the *Budget
// rather than call Key per request (it takes a lock).
func (c *Client) Key(key string) (*Budget, error) {
	b, added, err := c.addKeyNew(key)
	if err != nil {
		return nil, err
	}
	if added {
		select {
		case c.nudge <- struct{}{}:
		default:
		}
	}
	return b, nil
}

func (c *Client) addKey(key string) (*Budget, error) {
	b, _, err := c.addKeyNew(key)
	return b, err
}

func (c *Client) addKeyNew(key string) (*Budget, bool, error) {
	c.keysMu.Lock()
	defer c.keysMu.Unlock()
	if b := c.byKey[key]; b != nil {
		return b, false, nil
	}
	if c.closed {
		return nil, false, ErrClosed
	}
	if err := ValidateKey(key); err != nil {
		return nil, false, err
	}
	if len(c.byKey) >= MaxKeys {
		return nil, false, fmt.Errorf("%w: at most %d", ErrTooManyKeys, MaxKeys)
	}
	b := newBudget(key, &c.cfg, c.clock)
	c.byKey[key] = b
	keys := append(append([]*Budget(nil), *c.keys.Load()...), b)
	c.keys.Store(&keys)
	return b, true, nil
}

// Close stops the refresher, waits for it, disarms every lease timer and
// closes the connection if New dialled it: nothing the Client started is
// left running. Its Budgets stay usable, in fallback for good (a lease that
// can no longer be renewed is voided at once rather than left to expire).
// Close is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.keysMu.Lock()
		c.closed = true
		c.keysMu.Unlock()
		c.stop()
		c.wg.Wait()
		c.refreshMu.Lock() // wait out a Refresh in flight
		for _, b := range *c.keys.Load() {
			b.close()
		}
		c.refreshMu.Unlock()
		if c.conn != nil {
			c.closeErr = c.conn.Close()
		}
	})
	return c.closeErr
}

// run is the refresher: refresh, wait, repeat until ctx ends.
func (c *Client) run(ctx context.Context) {
	var wait time.Duration // the first refresh is immediate
	for {
		if wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-c.clock.After(wait):
			case <-c.nudge:
			}
		}
		if ctx.Err() != nil {
			return
		}
		next, err := c.refresh(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			wait = c.failBackoff(int(c.failures.Load()))
		default:
			wait = next
		}
	}
}

// failBackoff is the wait after n consecutive failures: full jitter below
// failBackoffBase × 2^(n-1), capped at RefreshInterval, so a fleet that lost
// budgetd together does not come back together.
func (c *Client) failBackoff(n int) time.Duration {
	return backoff.Full(n, failBackoffBase, c.cfg.RefreshInterval)
}

// Refresh reports and renews every key now, whatever the schedule. It
// returns the Lease error if budgetd did not answer (every key is then in
// fallback), an error naming the keys budgetd left without a lease, or
// ErrClosed after Close. The background refresher does the same on its own;
// Refresh is for a process that wants its first lease before serving, and
// for tests.
func (c *Client) Refresh(ctx context.Context) error {
	_, err := c.refresh(ctx)
	return err
}

// refresh sends one LeaseRequest for every key and applies the answer; it
// returns how long to wait before the next one.
func (c *Client) refresh(ctx context.Context) (time.Duration, error) {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	c.keysMu.Lock()
	closed := c.closed
	c.keysMu.Unlock()
	if closed {
		return 0, ErrClosed
	}
	keys := *c.keys.Load()
	if len(keys) == 0 {
		return c.cfg.RefreshInterval, nil
	}
	now := c.now()
	req := &budgetv1.LeaseRequest{ClientId: c.cfg.ClientID, Reports: make([]*budgetv1.KeyReport, len(keys))}
	firsts := make([]uint64, len(keys))
	retries := make([]uint64, len(keys))
	locals := make([]uint64, len(keys))
	for i, b := range keys {
		// Under mu, so that the key cannot change mode between reading its
		// counts and its fallback count.
		b.mu.Lock()
		firsts[i], retries[i] = b.first.Load(), b.retries.Load()
		locals[i] = b.earnedInFallback(firsts[i])
		b.mu.Unlock()
		acked := b.ackFirst.Load()
		req.Reports[i] = &budgetv1.KeyReport{
			Key:           b.key,
			FirstAttempts: firsts[i] - acked,
			// Sent in fallback: the local budget earned on them.
			FallbackFirstAttempts: min(locals[i]-b.ackFallback, firsts[i]-acked),
			Retries:               retries[i] - b.ackRetries.Load(),
			TokensWanted:          b.want(now, firsts[i]),
			Span:                  durationpb.New(max(now.Sub(b.ackAt), 0)),
		}
	}

	rctx, cancel := context.WithTimeout(ctx, c.cfg.LeaseTimeout)
	resp, err := c.rpc.Lease(rctx, req)
	cancel()
	arrived := c.now()
	if err != nil && ctx.Err() != nil {
		return 0, ctx.Err() // stopping (Close), or the caller of Refresh gave up
	}
	if err != nil {
		// Counts stay unacknowledged: the next successful refresh carries them.
		c.failed(arrived, keys, CauseRefresh, err)
		return 0, fmt.Errorf("budget: lease: %w", err)
	}

	byKey := make(map[string]*budgetv1.KeyLease, len(resp.GetLeases()))
	for _, kl := range resp.GetLeases() {
		byKey[kl.GetKey()] = kl
	}
	var missing []*Budget
	shortest := time.Duration(0)
	for i, b := range keys {
		// budgetd took the report, lease or not.
		b.ackFirst.Store(firsts[i])
		b.ackRetries.Store(retries[i])
		b.ackFallback = locals[i]
		b.ackAt = now
		kl := byKey[b.key]
		validFor := min(kl.GetValidFor().AsDuration(), maxValidFor)
		if kl == nil || validFor <= 0 {
			missing = append(missing, b)
			continue
		}
		b.mu.Lock()
		b.renew(kl.GetTokens(), validFor, arrived, ledger.SettingsOf(kl.GetSettings()), kl.GetFallbackMinPerSecond())
		b.mu.Unlock()
		if shortest == 0 || validFor < shortest {
			shortest = validFor
		}
	}
	leader := resp.GetLeader()
	c.leader.Store(&leader)
	c.lastLease.Store(&arrived)
	if len(missing) > 0 {
		// The report was taken, but these keys hold no new tokens: they run
		// on fallback, and the refresher retries on its failure backoff.
		err := fmt.Errorf("budget: lease: budgetd sent no valid lease for %d of %d keys (first %q)", len(missing), len(keys), missing[0].key)
		c.failed(arrived, missing, CauseMissingLease, err)
		return 0, err
	}
	c.succeeded()
	return c.nextRefresh(resp, shortest), nil
}

// nextRefresh is budgetd's refresh_after (RefreshInterval when it sent
// none), no later than three quarters of the shortest lease so renewal
// lands before expiry, less up to 10% of local jitter.
func (c *Client) nextRefresh(resp *budgetv1.LeaseResponse, shortest time.Duration) time.Duration {
	d := resp.GetRefreshAfter().AsDuration()
	if d <= 0 {
		d = c.cfg.RefreshInterval
	}
	if shortest > 0 {
		d = min(d, shortest*3/4)
	}
	d = max(d, minRefresh)
	return d - rand.N(d/10+1)
}

func (c *Client) failed(at time.Time, keys []*Budget, cause string, err error) {
	c.lastErr.Store(&errorAt{err: err, at: at})
	n := c.failures.Add(1)
	c.refreshNG.Add(1)
	for _, b := range keys {
		b.mu.Lock()
		b.enterFallback(at, cause)
		b.mu.Unlock()
	}
	if !c.inFallbk.Swap(true) {
		c.log.Warn("retry budget: falling back to the local budget", "cause", cause, "err", err)
	} else if n == 1 {
		c.log.Info("retry budget: no lease yet; local budget in force", "cause", cause, "err", err)
	}
}

func (c *Client) succeeded() {
	c.failures.Store(0)
	c.refreshOK.Add(1)
	if c.inFallbk.Swap(false) {
		c.log.Info("retry budget: shared budget in force", "leader", *c.leader.Load())
	}
}

// want is how many tokens to ask for: Ratio × the recent first-attempt rate
// × the lease period, plus headroom, capped. It updates the rate estimate,
// so only the refresher calls it.
func (b *Budget) want(now time.Time, first uint64) uint32 {
	if b.rateAt.IsZero() {
		b.rateFirst, b.rateAt = first, now
	} else if dt := now.Sub(b.rateAt).Seconds(); dt > 0 {
		inst := float64(first-b.rateFirst) / dt
		b.rate += 0.5 * (inst - b.rate)
		b.rateFirst, b.rateAt = first, now
	}
	ratio := b.cfg.DefaultRatio
	if s := b.settings.Load(); s != nil {
		ratio = s.Ratio
	}
	period := b.validFor
	if period <= 0 {
		period = 2 * b.cfg.RefreshInterval
	}
	w := math.Ceil(ratio*b.rate*period.Seconds()) + float64(b.cfg.TokensHeadroom)
	return uint32(min(w, float64(b.cfg.MaxTokensWanted)))
}
