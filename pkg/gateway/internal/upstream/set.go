// Package upstream is the gateway's view of its verifiers. One Node per
// verifier owns everything the gateway learns about it — its connection and
// health, the calls it holds (slots), its circuit breaker, its answers for
// outlier ejection, its service time, its queue sizes and its metrics — and
// a Set holds the nodes the gateway may pick from.
//
// The forwarding path asks the Set to Pick a node (which reserves a slot),
// makes the call, and hands what came back to Node.Observe, once: that one
// call releases the slot and feeds every mechanism that watches the node,
// and its Verdict says what the answer meant. Set.Tick, once a second of
// the gateway's clock, does what is judged by the second (standing queues,
// worker counts no answer repeated, outliers) and refreshes the gauges.
package upstream

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/backoff"
	"github.com/leveehq/levee/pkg/breaker"
)

// Clock tells time. Durations are taken between its readings, so it must be
// monotonic (the system clock's readings are). Tests inject a fake.
type Clock interface {
	Now() time.Time
}

// Config configures a Set.
type Config struct {
	// Static are verifier addresses always in the set, beside those
	// registered in etcd (Snapshot, Events).
	Static []string
	// NewBreaker returns a breaker under the current settings, for a new
	// node or for every node when the settings change (ResetBreakers).
	NewBreaker func() *breaker.Breaker
	// QueueDelay is the queue let stand at each verifier beyond its
	// workers, in time (gateway.Config.VerifierQueueDelay).
	QueueDelay time.Duration
	// RetireFor bounds how long a node that left keeps its connection for
	// the calls it still holds.
	RetireFor time.Duration
	// Probe is the keepalive ping interval and timeout of each connection;
	// 0 dials with grpc's defaults (the unguarded gateway).
	Probe time.Duration
	// Transport is the dial option carrying the gateway's identity.
	Transport grpc.DialOption
	// AfterJudging, if set, runs after the outliers are judged on a bad
	// answer (at most every outlierJudgeEvery), with the time judged at.
	AfterJudging func(now time.Time)
	// Clock tells time; nil means the system clock.
	Clock Clock
	// Logger receives membership and ejection logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the per-verifier metrics; nil registers none.
	Registry prometheus.Registerer
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Set is the verifiers of one gateway: the static ones plus those
// registered in etcd. Picking reads an immutable snapshot without locks.
type Set struct {
	cfg      Config
	clock    Clock
	log      *slog.Logger
	dialOpts []grpc.DialOption
	metrics  *metrics

	mu      sync.Mutex
	static  map[string]bool
	dynamic map[string]string // etcd key → addr
	byAddr  map[string]*Node
	closed  bool
	wg      sync.WaitGroup // one per node goroutine

	snap atomic.Pointer[[]*Node]
	rr   atomic.Uint64 // round-robin position of Next

	outlierMu     sync.Mutex   // one judgement at a time
	outlierJudged atomic.Int64 // unix nanos of the last judgeSoon
}

// New makes the set and dials its static verifiers; Close must follow.
func New(cfg Config) *Set {
	s := &Set{
		cfg:     cfg,
		clock:   cfg.Clock,
		log:     cfg.Logger,
		static:  map[string]bool{},
		dynamic: map[string]string{},
		byAddr:  map[string]*Node{},
		dialOpts: []grpc.DialOption{
			cfg.Transport,
			// One layer retries, and it is the gateway's own, budgeted.
			grpc.WithDisableRetry(),
		},
	}
	if s.clock == nil {
		s.clock = systemClock{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if cfg.Probe > 0 {
		s.dialOpts = append(s.dialOpts,
			// A hung verifier (stopped, paused, its host wedged) keeps its
			// TCP connection, and its health stream says nothing: an
			// HTTP/2 ping unanswered for Probe closes the connection,
			// which ends the health stream and takes it out of rotation.
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: cfg.Probe, Timeout: cfg.Probe, PermitWithoutStream: true}),
			// And when it answers again, it is back within a couple of
			// seconds, not grpc's default backoff of up to two minutes.
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
				MinConnectTimeout: 2 * time.Second,
			}))
	}
	s.metrics = newMetrics(cfg.Registry, s)
	empty := []*Node{}
	s.snap.Store(&empty)
	s.mu.Lock()
	for _, a := range cfg.Static {
		s.static[a] = true
	}
	s.reconcileLocked()
	s.mu.Unlock()
	return s
}

// List returns the current nodes, sorted by address; callers must not
// modify it.
func (s *Set) List() []*Node { return *s.snap.Load() }

// Serving is how many nodes could be picked now (health SERVING, not
// retired), breakers and ejections aside.
func (s *Set) Serving() int {
	n := 0
	for _, v := range s.List() {
		if v.Eligible() {
			n++
		}
	}
	return n
}

// Pick chooses a verifier by the power of two choices on outstanding calls
// among those eligible, not ejected, not exclude and with a free slot
// (workers + queue + extra, see Node.Slots), reserves the slot and then
// asks the chosen one's breaker (a half-open breaker admits only its ramp's
// fraction). The caller owes the slot: Observe once the call was sent,
// Unsent if it is refused before. Pick returns nil when no verifier will
// take the call now, and then says whether any was serving at all (busy,
// not down).
func (s *Set) Pick(exclude *Node, extra int64) (chosen *Node, serving bool) {
	list := s.List()
	n := len(list)
	if n == 0 {
		return nil, false
	}
	try := func(c *Node) bool {
		if c == exclude || !c.Eligible() {
			return false
		}
		serving = true
		if c.ejectedNow() {
			return false
		}
		// The slot first, the breaker last: a half-open breaker's probe
		// must not be spent on a verifier with no free slot.
		if !c.reserve(extra) {
			return false
		}
		if !c.brk.Load().Allow() {
			c.release()
			return false
		}
		return true
	}
	// Two distinct random candidates, the less loaded first.
	i := rand.IntN(n)
	j := i
	if n > 1 {
		j = (i + 1 + rand.IntN(n-1)) % n
	}
	a, b := list[i], list[j]
	if b.pending.Load() < a.pending.Load() {
		a, b = b, a
	}
	if try(a) {
		return a, true
	}
	if b != a && try(b) {
		return b, true
	}
	// Both full or refused: walk the rest from a random start (O(n), fair).
	start := rand.IntN(n)
	for k := range n {
		c := list[(start+k)%n]
		if c != a && c != b && try(c) {
			return c, true
		}
	}
	return nil, serving
}

// Next returns the next eligible verifier in round-robin order, slots and
// breakers aside (the unguarded gateway's balancing), or nil when none is.
func (s *Set) Next() *Node {
	list := s.List()
	start := s.rr.Add(1)
	for k := range uint64(len(list)) {
		if v := list[(start+k)%uint64(len(list))]; v.Eligible() {
			return v
		}
	}
	return nil
}

// TotalSlots is what every eligible verifier can hold at once, critical
// slots aside.
func (s *Set) TotalSlots() int64 {
	var n int64
	for _, v := range s.List() {
		if v.Eligible() {
			n += v.Slots(0)
		}
	}
	return n
}

// Capacity is what the eligible verifiers can answer per second: each one's
// workers over its service time (Node.ServiceTime). Zero while none has
// answered lately.
func (s *Set) Capacity() float64 {
	c := 0.0
	for _, v := range s.List() {
		if !v.Eligible() {
			continue
		}
		if d := v.service.median(); d > 0 {
			c += float64(max(v.workers.Load(), 1)) / d.Seconds()
		}
	}
	return c
}

// SlowestService is the longest median service time among the eligible
// verifiers, 0 while none has answered.
func (s *Set) SlowestService() time.Duration {
	var d time.Duration
	for _, v := range s.List() {
		if v.Eligible() {
			d = max(d, v.service.median())
		}
	}
	return d
}

// Tick does, once a second of the gateway's clock, what is judged by the
// second: outliers, each verifier's standing-queue test, worker counts no
// answer repeated for workersTTL (then the queue sizes follow), and the
// per-verifier gauges. The caller calls it once per second.
func (s *Set) Tick(now time.Time) {
	s.EjectOutliers(now)
	for _, v := range s.List() {
		v.judgeStanding()
		v.expireWorkers(now)
		v.service.refresh(now)
		v.fitQueue(now)
	}
	s.UpdateGauges()
}

// ResetBreakers gives every node a breaker under new settings. A breaker
// that was not closed hands over open (a fresh open time under the new
// settings): a settings change is not evidence that a failing verifier
// recovered, and must not put it back in full rotation.
func (s *Set) ResetBreakers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.byAddr {
		nb := s.cfg.NewBreaker()
		if v.brk.Load().State() != breaker.Closed {
			nb.Trip()
		}
		v.brk.Store(nb)
	}
}

// Snapshot implements etcdwatch.Handler for the registration prefix.
func (s *Set) Snapshot(kvs []*mvccpb.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dynamic = map[string]string{}
	for _, kv := range kvs {
		if addr, ok := s.decode(kv); ok {
			s.dynamic[string(kv.Key)] = addr
		}
	}
	s.reconcileLocked()
}

// Events implements etcdwatch.Handler.
func (s *Set) Events(evs []*clientv3.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		switch ev.Type {
		case mvccpb.PUT:
			if addr, ok := s.decode(ev.Kv); ok {
				s.dynamic[string(ev.Kv.Key)] = addr
			}
		case mvccpb.DELETE:
			delete(s.dynamic, string(ev.Kv.Key))
		}
	}
	s.reconcileLocked()
}

// decode reads a registration written by endpoints.Manager.AddEndpoint.
func (s *Set) decode(kv *mvccpb.KeyValue) (string, bool) {
	var ep endpoints.Endpoint
	if err := json.Unmarshal(kv.Value, &ep); err != nil || ep.Addr == "" || len(ep.Addr) > 256 {
		s.log.Warn("ignoring a malformed verifier registration", "key", truncate(string(kv.Key), 80))
		return "", false
	}
	return ep.Addr, true
}

// reconcileLocked starts nodes for new addresses, retires those gone, and
// publishes a new snapshot.
func (s *Set) reconcileLocked() {
	if s.closed {
		return
	}
	want := map[string]bool{}
	for a := range s.static {
		want[a] = true
	}
	for _, a := range s.dynamic {
		want[a] = true
	}
	var added, removed []string
	for a := range want {
		if _, ok := s.byAddr[a]; ok {
			continue
		}
		v, err := s.start(a)
		if err != nil {
			s.log.Warn("cannot reach verifier", "addr", a, "err", err)
			continue
		}
		s.byAddr[a] = v
		added = append(added, a)
	}
	for a, v := range s.byAddr {
		if !want[a] {
			delete(s.byAddr, a)
			v.retire()
			removed = append(removed, a)
		}
	}
	list := make([]*Node, 0, len(s.byAddr))
	for _, v := range s.byAddr {
		list = append(list, v)
	}
	slices.SortFunc(list, func(x, y *Node) int { return strings.Compare(x.addr, y.addr) })
	s.snap.Store(&list)
	if len(added) > 0 {
		slices.Sort(added)
		s.log.Info("verifiers joined", "addrs", added, "count", len(list))
	}
	if len(removed) > 0 {
		slices.Sort(removed)
		s.log.Info("verifiers left", "addrs", removed, "count", len(list))
	}
}

// start dials addr and follows its health stream in a goroutine of its own.
func (s *Set) start(addr string) (*Node, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr, s.dialOpts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	v := newNode(s, addr)
	v.cc, v.client, v.stop = cc, verifyv1.NewVerifyServiceClient(cc), cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.watchHealth(ctx, v)
		s.closeWhenIdle(v)
	}()
	return v, nil
}

// watchHealth keeps v.serving equal to what the verifier's health service
// says about VerifyService: SERVING while it serves, false the moment it
// drains or its connection breaks (the stream fails with the connection).
func (s *Set) watchHealth(ctx context.Context, v *Node) {
	hc := healthpb.NewHealthClient(v.cc)
	back := backoff.New(20*time.Millisecond, time.Second)
	service := verifyv1.VerifyService_ServiceDesc.ServiceName
	for ctx.Err() == nil {
		stream, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
		if err == nil {
			for {
				resp, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				v.serving.Store(resp.GetStatus() == healthpb.HealthCheckResponse_SERVING)
				back.Reset()
			}
		}
		if ctx.Err() != nil {
			return
		}
		// The node is out until a new stream says SERVING: a health stream
		// ends when the connection does (the node died or restarts) or the
		// node stops serving it; it is never cut by a deadline
		// (pkg/deadline leaves streams alone).
		v.serving.Store(false)
		s.log.Warn("health stream to verifier ended; out of rotation until it says SERVING again",
			"addr", v.addr, "err", err, "connection", v.cc.GetState().String())
		if !back.Wait(ctx) {
			return
		}
	}
}

// closeWhenIdle closes v's connection once its outstanding calls are
// answered (a draining verifier finishes its queue), or after RetireFor.
// It waits in real time: it bounds a real wait on a real connection.
func (s *Set) closeWhenIdle(v *Node) {
	deadline := time.Now().Add(s.cfg.RetireFor)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for v.pending.Load() > 0 && time.Now().Before(deadline) {
		<-t.C
	}
	_ = v.cc.Close()
}

// Close retires every node and waits for their connections to close.
func (s *Set) Close() {
	s.mu.Lock()
	s.closed = true
	for a, v := range s.byAddr {
		delete(s.byAddr, a)
		v.retire()
	}
	empty := []*Node{}
	s.snap.Store(&empty)
	s.mu.Unlock()
	s.wg.Wait()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
