// Package gateway is Levee's front door: it serves the verification service
// and forwards each call to one of the verifiers, so that the retry loop of an
// overloaded fleet never closes.
//
// The gateway promises:
//
//   - Admission at the edge. An adaptive concurrency limit (pkg/admission)
//     bounds the calls in flight to the verifiers; what is over it, or over
//     its priority class's share, is refused at once with RESOURCE_EXHAUSTED
//     and a jittered grpc-retry-pushback-ms trailer. The refusal path formats
//     nothing, logs nothing and makes no network call.
//   - Deadlines. A forwarded call carries the remaining duration less
//     Deadline.Margin; one with less than the margin left is refused before
//     any hop. Whether the rest covers a hash is the chosen verifier's to
//     say, from its own calibrated cost: the gateway keeps no estimate of its
//     own that one verifier's stall could poison for the fleet.
//   - Balancing on outstanding work: the power of two choices over the
//     verifiers that serve (each one's gRPC health stream) and whose circuit
//     breaker (pkg/breaker) admits the call; a half-open breaker admits a
//     jittered, gradual ramp.
//   - At most one retry per call, on a different verifier, only for a
//     failure local to one node (UNAVAILABLE: connection lost or refused,
//     node draining), only with a token from the fleet-wide retry budget
//     (pkg/budget), only if the deadline still covers a verification. A
//     verifier's "overloaded, do not retry" is passed back, never retried.
//   - Runtime settings from etcd (Settings) apply within one watch round
//     trip, without a restart.
//   - A recovery autopilot (AutopilotConfig) that acts when the fleet shows
//     the metastable signature and stands down when it is gone.
//   - Verifiers come and go through etcd registrations (pkg/registry) or a
//     static list; one that leaves is out of rotation at once, and its
//     connection closes once its outstanding calls are answered.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/etcdclient"
	"github.com/leveehq/levee/internal/etcdwatch"
	"github.com/leveehq/levee/internal/serving"
	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/deadline"
	"github.com/leveehq/levee/pkg/verify"
)

// Gateway is one gateway. Create it with New; serve it with Serve or Run.
type Gateway struct {
	verifyv1.UnimplementedVerifyServiceServer

	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics

	limiter  *admission.Limiter
	backends *backends
	parser   *verify.Verifier

	etcd    *clientv3.Client
	budgets *budget.Client
	retry   *budget.Budget // nil: no in-fleet retries

	grpc    *grpc.Server
	health  *health.Server
	streams *serving.Streams // ended at stop, so GracefulStop need not wait for them

	clientRatio  ratioWindow // arrivals: first attempts vs retries
	fleetRatio   ratioWindow // hops: first vs in-fleet retries
	maxAttempt   maxWindow   // the highest attempt number arriving
	marginGauges marginGauges
	pushbacks    [32]metadata.MD

	calls *callSet
	auto  *autopilot

	brkCfg    atomic.Pointer[breaker.Config]
	settings  atomic.Pointer[Settings]
	closeOnce sync.Once

	outlierMu     sync.Mutex   // one ejectOutliers at a time
	outlierJudged atomic.Int64 // unix nanos of the last judgeSoon
}

var _ verifyv1.VerifyServiceServer = (*Gateway)(nil)

// New builds a gateway; Serve (or Close) must follow.
func New(cfg Config) (*Gateway, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The gateway refuses malformed input before a hop, but what a stored
	// hash may cost is each verifier's to judge, under its own limits: it
	// parses with the widest limits any verifier could have.
	parser, err := verify.New(verify.DefaultPolicy(), verify.WidestLimits())
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	limiter, err := admission.New(cfg.Admission)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g := &Gateway{
		cfg:     cfg,
		log:     cfg.Logger,
		reg:     cfg.Registry,
		limiter: limiter,
		parser:  parser,
		health:  health.NewServer(),
		streams: serving.NewStreams(),
		calls:   newCallSet(),
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	if g.reg == nil {
		g.reg = prometheus.NewRegistry()
		g.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	brk := cfg.Breaker
	g.brkCfg.Store(&brk)
	g.settings.Store(&Settings{})
	for i := range g.pushbacks {
		span := cfg.PushbackMax - cfg.PushbackMin
		g.pushbacks[i] = callmeta.PushbackTrailer(cfg.PushbackMin + time.Duration(float64(span)*float64(i)/float64(len(g.pushbacks)-1)))
	}
	probe := cfg.ProbeInterval
	if cfg.Unguarded {
		// A plain proxy dials with grpc's defaults: no keepalive, so a hung
		// verifier keeps its connection and the calls queued on it, and
		// reconnects back off up to two minutes.
		probe = 0
	}
	g.backends = newBackends(g.log, cfg.Verifiers, g.newBreaker, cfg.Deadline.Max, probe, cfg.TLS.DialOption(""), nil)
	g.metrics = newMetrics(g.reg, g)
	g.marginGauges = newMarginGauges(g.reg)
	g.auto = newAutopilot(g, cfg.Autopilot)

	if len(cfg.EtcdEndpoints) > 0 {
		g.etcd, err = etcdclient.New(etcdclient.Config{
			Endpoints:   cfg.EtcdEndpoints,
			DialTimeout: cfg.EtcdDialTimeout,
			TLS:         cfg.TLS,
		})
		if err != nil {
			g.backends.close()
			return nil, fmt.Errorf("gateway: etcd: %w", err)
		}
	}
	if cfg.Unguarded {
		g.log.Warn("unguarded: every defence is off (no admission, deadlines, breakers, retries or autopilot); for the lab's control fleet only")
	}
	if cfg.BudgetTarget != "" && !cfg.Unguarded {
		bc := budget.DefaultConfig()
		bc.Target = cfg.BudgetTarget
		bc.Keys = []string{cfg.BudgetKey}
		bc.Logger = g.log
		bc.Registry = g.reg
		bc.DialOptions = []grpc.DialOption{cfg.TLS.DialOption("")}
		if g.budgets, err = budget.New(bc); err != nil {
			g.closeClients()
			return nil, fmt.Errorf("gateway: budget: %w", err)
		}
		if g.retry, err = g.budgets.Key(cfg.BudgetKey); err != nil {
			g.closeClients()
			return nil, fmt.Errorf("gateway: budget: %w", err)
		}
	}

	unary := []grpc.UnaryServerInterceptor{cfg.Deadline.UnaryServerInterceptor(), callmeta.UnaryServerInterceptor()}
	stream := []grpc.StreamServerInterceptor{cfg.Deadline.StreamServerInterceptor(), g.streams.Interceptor()}
	if cfg.Unguarded {
		// A plain proxy neither refuses expired arrivals nor adds a
		// default deadline.
		unary, stream = unary[1:], stream[1:]
	}
	// Callers of the front door may present a certificate or not; one
	// that is presented must chain to the CA.
	g.grpc = grpc.NewServer(append(cfg.TLS.ServerOptions(tls.VerifyClientCertIfGiven),
		grpc.MaxRecvMsgSize(verify.MaxRequestSize),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	)...)
	verifyv1.RegisterVerifyServiceServer(g.grpc, g)
	healthpb.RegisterHealthServer(g.grpc, g.health)
	reflection.Register(g.grpc)
	g.setServing(false)
	return g, nil
}

// Registry returns the registry holding the gateway's metrics.
func (g *Gateway) Registry() *prometheus.Registry { return g.reg }

// Limiter returns the edge limiter (for status pages and tests).
func (g *Gateway) Limiter() *admission.Limiter { return g.limiter }

// Settings returns the runtime settings in force.
func (g *Gateway) Settings() Settings { return *g.settings.Load() }

func (g *Gateway) newBreaker() *breaker.Breaker {
	b, err := breaker.New(*g.brkCfg.Load())
	if err != nil {
		// The config was validated; settings are merged only when valid.
		panic(fmt.Sprintf("gateway: breaker config: %v", err))
	}
	return b
}

func (g *Gateway) setServing(on bool) {
	serving.SetHealth(g.health, on, verifyv1.VerifyService_ServiceDesc.ServiceName)
}

// Run listens on cfg.ListenAddr (and cfg.MetricsAddr) and serves until ctx
// ends. It is what cmd/gateway calls.
func Run(ctx context.Context, cfg Config) error {
	g, err := New(cfg)
	if err != nil {
		return err
	}
	lis, mlis, err := serving.Listen("gateway", cfg.ListenAddr, cfg.MetricsAddr)
	if err != nil {
		g.Close()
		return err
	}
	return g.Serve(ctx, lis, mlis)
}

// Serve serves gRPC on lis and /metrics on mlis (nil for none) until ctx
// ends, following verifiers and settings in etcd meanwhile; then it stops
// gracefully (health NOT_SERVING, calls in flight answered, at most
// Deadline.Max) and returns after every goroutine it started has ended.
func (g *Gateway) Serve(ctx context.Context, lis, mlis net.Listener) error {
	defer g.Close()
	grp, gctx := errgroup.WithContext(ctx)
	grp.Go(func() error {
		if err := g.grpc.Serve(lis); err != nil {
			return fmt.Errorf("gateway: serve: %w", err)
		}
		return nil
	})
	stopHTTP := serving.HTTP(grp, "gateway", mlis, promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{Registry: g.reg}))
	if g.etcd != nil {
		grp.Go(func() error {
			etcdwatch.Follow(gctx, g.etcd, g.cfg.VerifiersTarget+"/", true, g.backends, g.log, "verifier registrations", 2*time.Second)
			return nil
		})
		grp.Go(func() error {
			etcdwatch.Follow(gctx, g.etcd, g.cfg.SettingsKey, false, settingsHandler{g}, g.log, "gateway settings", 2*time.Second)
			return nil
		})
	}
	grp.Go(func() error {
		g.housekeep(gctx)
		return nil
	})
	if !g.cfg.Unguarded {
		grp.Go(func() error {
			g.auto.run(gctx)
			return nil
		})
	}
	grp.Go(func() error {
		<-gctx.Done()
		g.setServing(false)
		g.log.Info("gateway stopping")
		sctx, cancel := context.WithTimeout(context.Background(), g.cfg.Deadline.Max)
		defer cancel()
		serving.Stop(sctx, g.grpc, g.streams)
		stopHTTP()
		return nil
	})
	g.log.Info("gateway serving", "addr", lis.Addr().String(), "static_verifiers", len(g.cfg.Verifiers),
		"etcd", len(g.cfg.EtcdEndpoints) > 0, "fleet_retries", g.retry != nil)
	return grp.Wait()
}

// fitCeiling keeps the limit's ceiling at what the verifiers can hold (their
// workers plus their queues, see fitQueues), scaled so that the classes below critical
// share exactly that, and critical work has its reserve on top, in the extra
// slot each verifier keeps for it: the limiter's priority shares then divide
// the fleet's real capacity instead of a larger number that per-verifier slots
// would cut blindly, whatever the priority. It runs when a verifier reports a
// new worker count and once a second.
func (g *Gateway) fitCeiling() {
	st := g.settings.Load()
	ceiling := int64(intOr(st.Ceiling, g.cfg.Admission.Ceiling))
	if fleet := g.backends.totalSlots(); fleet > 0 {
		reserve := floatOr(st.CriticalReserve, g.cfg.Admission.CriticalReserve)
		ceiling = min(ceiling, int64(math.Ceil(float64(fleet)/(1-reserve)-1e-9)))
	}
	g.limiter.SetCeiling(int(ceiling))
	g.limiter.SetTarget(g.queueTarget())
}

// queueTarget is the verifier queue wait the limiter aims for: the
// configured target, or twice the wait the verifiers' queues are sized to
// allow when that is longer (VerifierQueueDelay plus one service time of the
// slowest serving verifier; capped at the typical client timeout).
// Each verifier may queue at least one call per worker, and up to
// VerifierQueueDelay of work (fitQueues): a queue wait within that is the
// queue working as meant, not overload. A target at or below it would cut
// the limit whenever the queue filled, and shed until no call ever waited,
// the loss system the queue is there to avoid; above it, the limit still
// falls when the verifiers' queues grow past what this gateway's slots
// explain (other gateways' load, a slower node).
func (g *Gateway) queueTarget() time.Duration {
	target := g.cfg.Admission.TargetQueueWait
	for _, b := range g.backends.list() {
		if b.eligible() {
			target = max(target, 2*(g.cfg.VerifierQueueDelay+b.service.median()))
		}
	}
	if limit := g.cfg.Autopilot.ClientTimeout; limit > 0 {
		target = min(target, max(limit, g.cfg.Admission.TargetQueueWait))
	}
	return target
}

// housekeep refreshes the gauges, the retry ratios, the ceiling and the
// gateway's own health once a second.
func (g *Gateway) housekeep(ctx context.Context) {
	const t0 = time.Second
	t := time.NewTicker(t0)
	defer t.Stop()
	for {
		g.ejectOutliers(time.Now())
		for _, b := range g.backends.list() {
			b.queueSizes.roll() // once a second, here only: the hold is in seconds
		}
		g.fitQueues()
		g.fitCeiling()
		g.setServing(g.ServingVerifiers() > 0)
		g.metrics.observeVerifiers(g.backends.list())
		ratio, firsts := g.clientRatio.roll()
		g.metrics.retryRatio.WithLabelValues("clients").Set(ratio)
		ratio, _ = g.fleetRatio.roll()
		g.metrics.retryRatio.WithLabelValues("gateway").Set(ratio)
		g.updateMargin(firsts / t0.Seconds())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Close stops the gateway at once, without draining. Serve calls it on
// return; it is idempotent.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		g.grpc.Stop()
		g.backends.close()
		g.closeClients()
	})
}

func (g *Gateway) closeClients() {
	if g.budgets != nil {
		_ = g.budgets.Close()
	}
	if g.etcd != nil {
		_ = g.etcd.Close()
	}
}

var errNoUserWithHash = errors.New("no_user verification takes no encoded_hash")

// Refusals are built once: the shed path formats nothing.
var (
	errOverLimit = status.Error(codes.ResourceExhausted,
		"gateway overloaded: concurrency limit reached; retry after the pushback")
	errOverShare = status.Error(codes.ResourceExhausted,
		"gateway overloaded: shedding this priority and attempt class; retry after the pushback")
	errBusy = status.Error(codes.ResourceExhausted,
		"gateway overloaded: every verifier's workers are busy; retry after the pushback")
	errNoVerifier = status.Error(codes.Unavailable,
		"no verifier available: none serving, or every circuit breaker open; retry after the pushback")
	errVerifierUnavailable = status.Error(codes.Unavailable,
		"verifier unavailable (connection lost or refused, or node draining); retry after the pushback")
	errVerifierFailed = status.Error(codes.Internal, "verifier failed")
	errAbandoned      = status.Error(codes.DeadlineExceeded,
		"dropped by the recovery autopilot: older than the typical client timeout")
)

// pushback sets a jittered retry-after trailer.
func (g *Gateway) pushback(ctx context.Context) {
	_ = grpc.SetTrailer(ctx, g.pushbacks[rand.IntN(len(g.pushbacks))])
}

// admit runs the edge limiter: on success the caller owes a limiter
// Release. Its refusal comes before the request is even parsed.
func (g *Gateway) admit(ctx context.Context, f callmeta.Facts) error {
	g.clientRatio.add(f.Attempt <= 1)
	g.maxAttempt.add(int64(f.Attempt))
	switch g.limiter.Acquire(admission.Class{Priority: f.Priority, Retry: f.Attempt > 1}) {
	case admission.ReasonAdmitted:
	case admission.ReasonPriority:
		g.metrics.refuse(f, reasonIndexPriority)
		g.pushback(ctx)
		return errOverShare
	default:
		g.metrics.refuse(f, reasonIndexLimit)
		g.pushback(ctx)
		return errOverLimit
	}
	g.auto.sawInflight(g.limiter.InFlight())
	return nil
}

// pickFor reserves a slot on a verifier for f, or refuses: the pick is the
// last check before the hop, because it asks the chosen verifier's breaker,
// and a half-open breaker's probe spent on a call refused afterwards would
// test nothing (see breaker.Breaker.Cancel). The caller owes the slot's
// release (backend.release after the hop, backend.unsent before it).
func (g *Gateway) pickFor(ctx context.Context, f callmeta.Facts) (*backend, error) {
	b, serving := g.backends.pick(nil, g.slotQueue(f))
	if b != nil {
		return b, nil
	}
	g.pushback(ctx)
	if !serving {
		g.metrics.refuse(f, reasonIndexNoVerifier)
		return nil, errNoVerifier
	}
	g.metrics.refuse(f, reasonIndexBusy)
	return nil, errBusy
}

// slotQueue is how many slots f may use on a verifier beyond its workers
// and queue: one for a critical first attempt, so that critical work still
// finds room when every other slot is held.
func (g *Gateway) slotQueue(f callmeta.Facts) int64 {
	if f.Priority == callmeta.Critical && f.Attempt <= 1 {
		return 1
	}
	return 0
}

// fitQueues sizes each verifier's queue in time: as many calls as its
// workers finish in Config.VerifierQueueDelay at its median service time,
// and at least one per worker (a burst waits one service time at most,
// rather than being refused as by a loss system), or none when the delay is
// zero. A worker count no answer has confirmed for workersTTL is forgotten
// (a verifier that only refuses, or restarted smaller, is not credited with
// the workers it once had). Until a verifier has answered, its service time is unknown and it
// gets the one per worker. It runs once a second and when a verifier reports
// a new worker count (and each answer refits its own verifier); the
// limiter's ceiling follows (fitCeiling).
func (g *Gateway) fitQueues() {
	delay := g.cfg.VerifierQueueDelay
	now := time.Now()
	for _, b := range g.backends.list() {
		b.expireWorkers(now)
		b.fitQueue(delay)
	}
}

// queueFor is fitQueues' arithmetic for one verifier.
func queueFor(workers int64, service, delay time.Duration) int64 {
	if delay <= 0 {
		return 0
	}
	q := workers
	if service > 0 {
		q = max(q, int64(math.Ceil(float64(workers)*float64(delay)/float64(service))))
	}
	return min(q, maxVerifierQueue)
}

// maxVerifierQueue bounds one verifier's queue whatever its service time.
const maxVerifierQueue = 10000

// hopFunc makes one call to a verifier.
type hopFunc func(ctx context.Context, c verifyv1.VerifyServiceClient, opts ...grpc.CallOption) error

// Verify implements VerifyService.Verify.
func (g *Gateway) Verify(ctx context.Context, req *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	f := callmeta.FromContext(ctx)
	if g.cfg.Unguarded {
		g.clientRatio.add(f.Attempt <= 1)
		var resp *verifyv1.VerifyResponse
		return resp, g.forwardUnguarded(ctx, f, func(ctx context.Context, c verifyv1.VerifyServiceClient, opts ...grpc.CallOption) (err error) {
			resp, err = c.Verify(ctx, req, opts...)
			return err
		})
	}
	if err := g.admit(ctx, f); err != nil {
		return nil, err
	}
	if err := g.parser.CheckPassword(req.GetPassword()); err != nil {
		return nil, g.invalid(f, err)
	}
	if req.GetNoUser() {
		if req.GetEncodedHash() != "" {
			return nil, g.invalid(f, errNoUserWithHash)
		}
	} else if _, err := g.parser.Parse(req.GetEncodedHash()); err != nil {
		return nil, g.invalid(f, err)
	}
	var resp *verifyv1.VerifyResponse
	err := g.serve(ctx, f, func(ctx context.Context, c verifyv1.VerifyServiceClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = c.Verify(ctx, req, opts...)
		return err
	})
	return resp, err
}

// Hash implements VerifyService.Hash.
func (g *Gateway) Hash(ctx context.Context, req *verifyv1.HashRequest) (*verifyv1.HashResponse, error) {
	f := callmeta.FromContext(ctx)
	if g.cfg.Unguarded {
		g.clientRatio.add(f.Attempt <= 1)
		var resp *verifyv1.HashResponse
		return resp, g.forwardUnguarded(ctx, f, func(ctx context.Context, c verifyv1.VerifyServiceClient, opts ...grpc.CallOption) (err error) {
			resp, err = c.Hash(ctx, req, opts...)
			return err
		})
	}
	if err := g.admit(ctx, f); err != nil {
		return nil, err
	}
	if err := g.parser.CheckPassword(req.GetPassword()); err != nil {
		return nil, g.invalid(f, err)
	}
	var resp *verifyv1.HashResponse
	err := g.serve(ctx, f, func(ctx context.Context, c verifyv1.VerifyServiceClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = c.Hash(ctx, req, opts...)
		return err
	})
	return resp, err
}

// forwardUnguarded makes the one hop of an unguarded gateway (Config.Unguarded):
// to the next serving verifier, under the caller's own context, the answer
// passed back as it came.
func (g *Gateway) forwardUnguarded(ctx context.Context, f callmeta.Facts, hop hopFunc) error {
	b := g.backends.next()
	if b == nil {
		return errNoVerifier
	}
	p, a := classIndex(f)
	g.metrics.admitted[p][a].Inc()
	b.pending.Add(1)
	var trailer metadata.MD
	err := hop(callmeta.AppendOutgoing(ctx, f), b.client, grpc.Trailer(&trailer))
	b.pending.Add(-1)
	served := callmeta.ServedFrom(trailer)
	if served.Workers > 0 {
		b.workers.Store(int64(served.Workers))
	}
	if served.Service > 0 {
		b.service.observe(served.Service) // for the bistability margin only
	}
	switch {
	case err != nil:
		g.metrics.failed[p][a].Inc()
	case ctx.Err() != nil:
		g.metrics.late[p][a].Inc()
	default:
		g.metrics.goodput[p][a].Inc()
	}
	return err
}

// releaseAdmission ends an admitted call's hold on the limiter.
func (g *Gateway) releaseAdmission(f callmeta.Facts, s admission.Sample) {
	s.Critical = f.Priority == callmeta.Critical && f.Attempt <= 1
	g.limiter.Release(s)
}

func (g *Gateway) invalid(f callmeta.Facts, err error) error {
	g.releaseAdmission(f, admission.Sample{Outcome: admission.OutcomeIgnore})
	g.metrics.invalid.Inc()
	return status.Error(codes.InvalidArgument, err.Error())
}

// serve forwards an admitted call: deadline check, pick, hop, at most one
// budgeted retry on another verifier, accounting.
//
// The gateway refuses before a hop only a call that cannot even be
// forwarded (less than the deadline margin left): whether the rest leaves
// time for a hash is each verifier's to say, from its own calibrated cost,
// and its refusal is as cheap as the gateway's. A gateway-wide estimate
// learnt from the verifiers' answers is what once let one stalled verifier
// make the gateway refuse every short deadline while a healthy one idled.
func (g *Gateway) serve(ctx context.Context, f callmeta.Facts, hop hopFunc) error {
	arrived := time.Now()
	outcome := admission.Sample{Outcome: admission.OutcomeIgnore}
	defer func() { g.releaseAdmission(f, outcome) }()

	if !deadline.CanFinish(ctx, g.cfg.Deadline.Margin) {
		g.metrics.refuse(f, reasonIndexDeadline)
		remaining, _ := deadline.Remaining(ctx)
		return status.Errorf(codes.DeadlineExceeded,
			"remaining deadline %v is shorter than the gateway's forwarding margin %v; not forwarded",
			remaining.Round(time.Millisecond), g.cfg.Deadline.Margin)
	}
	b, err := g.pickFor(ctx, f)
	if err != nil {
		return err
	}
	p, a := classIndex(f)
	g.metrics.admitted[p][a].Inc()

	call := g.calls.add(arrived)
	defer g.calls.remove(call)

	// First attempts are counted once, where they start: a caller's retry
	// (attempt 2 and on) is the caller's budget's business, and counting it
	// here too would let retries earn retries.
	first := f.Attempt <= 1
	g.fleetRatio.add(true)
	if g.retry != nil && first {
		g.retry.RecordFirstAttempt()
	}
	res := g.hop(ctx, call, b, f, hop)
	// One layer retries a given failure: the gateway retries a caller's
	// first attempt only, and once it has, tells the caller not to retry
	// that failure again (pushback -1). Both layers retrying would make the
	// fleet's bound (1 + r)² × first attempts instead of (1 + r).
	if res.retryable && first {
		if b2 := g.retryTarget(ctx, f, b); b2 != nil {
			g.metrics.fleetRetries.Inc()
			g.fleetRatio.add(false)
			g.retry.RecordRetry()
			rf := f
			rf.Attempt = max(f.Attempt, 1) + 1
			res = g.hop(ctx, call, b2, rf, hop)
			if res.err != nil && res.pushback == nil {
				res.pushback = callmeta.DoNotRetry // the fleet already retried
			}
		} else {
			g.metrics.fleetNoBudget.Inc()
		}
	}
	outcome = res.sample

	took := time.Since(arrived)
	g.metrics.forwardLatency.Observe(took.Seconds())
	switch {
	case res.answered:
		g.auto.sawWork(took, ctx.Err() == nil)
	case res.expired || ctx.Err() != nil:
		// Forwarded, and its caller gave up or left meanwhile: work the
		// fleet did, or held queued, for nobody.
		g.auto.sawWork(took, false)
	}
	switch {
	case res.err != nil:
		g.metrics.failed[p][a].Inc()
		switch {
		case res.pushback != nil:
			_ = grpc.SetTrailer(ctx, res.pushback)
		case res.err == errVerifierUnavailable:
			g.pushback(ctx)
		}
		return res.err
	case ctx.Err() != nil:
		g.metrics.late[p][a].Inc()
		return status.FromContextError(ctx.Err()).Err()
	}
	g.metrics.goodput[p][a].Inc()
	return nil
}

// retryTarget returns the verifier to retry on, holding a slot there, or nil
// when the retry is not allowed: no budget configured or no token, no time
// left to forward, or no other verifier with a free slot. A token is
// spent only when a target exists.
func (g *Gateway) retryTarget(ctx context.Context, f callmeta.Facts, failed *backend) *backend {
	if g.retry == nil || !deadline.CanFinish(ctx, g.cfg.Deadline.Margin) {
		return nil
	}
	b, _ := g.backends.pick(failed, g.slotQueue(f))
	if b == nil {
		return nil
	}
	if !g.retry.Allow() {
		b.unsent()
		return nil
	}
	return b
}

// hopResult is what one hop tells the caller and the limiter.
type hopResult struct {
	err       error
	answered  bool        // the verifier ran it and answered (OK, or the input was bad)
	expired   bool        // unanswered: the forwarded deadline passed, or the call was cut, while it was out
	retryable bool        // failure local to the node: another may answer
	pushback  metadata.MD // the verifier's pushback trailer, passed back
	sample    admission.Sample
}

// hop makes one call to b and accounts for it: breaker, per-verifier
// metrics, queue wait for the limiter and the autopilot.
func (g *Gateway) hop(ctx context.Context, call *inflightCall, b *backend, f callmeta.Facts, fn hopFunc) hopResult {
	octx, cancel, err := g.cfg.Deadline.Outgoing(ctx)
	if err != nil {
		b.unsent()
		return hopResult{err: status.Error(codes.DeadlineExceeded, "no time left to forward the call"),
			sample: admission.Sample{Outcome: admission.OutcomeIgnore}}
	}
	defer cancel()
	octx = call.bind(octx, g.auto)
	octx = callmeta.AppendOutgoing(octx, f)

	var trailer metadata.MD
	err = fn(octx, b.client, grpc.Trailer(&trailer))
	b.release()
	served := callmeta.ServedFrom(trailer)
	if served.Workers > 0 && b.sawWorkers(int64(served.Workers)) {
		b.fitQueue(g.cfg.VerifierQueueDelay)
		g.fitCeiling()
	}

	if call.abandoned() {
		// The autopilot cut it: the caller had given up.
		return hopResult{err: errAbandoned, expired: true, sample: admission.Sample{Outcome: admission.OutcomeIgnore}}
	}
	code := status.Code(err)
	// The caller's input and the caller leaving say nothing of the node.
	now := time.Now()
	good := code == codes.OK || code == codes.InvalidArgument || code == codes.Canceled
	b.answers.add(now, good)
	if !good {
		g.judgeSoon(now)
	}
	res := hopResult{err: err, sample: admission.Sample{Outcome: admission.OutcomeIgnore},
		expired: err != nil && octx.Err() != nil}
	switch code {
	case codes.OK, codes.InvalidArgument:
		res.answered = true
		b.brk.Load().Record(true)
		g.metrics.result(b, "ok")
		wait, service := served.QueueWait, served.Service
		if wait >= 0 {
			res.sample = admission.Sample{QueueWait: wait, Outcome: admission.OutcomeOK}
			g.metrics.verifierWait.Observe(wait.Seconds())
			g.auto.sawQueue(wait, service)
		}
		if service > 0 {
			b.service.observe(service)
			if b.fitQueue(g.cfg.VerifierQueueDelay) {
				g.fitCeiling()
			}
		}
	case codes.ResourceExhausted:
		if _, retry, present := callmeta.PushbackFrom(trailer); !present || retry {
			// Not the verifier's own overload refusal (which always says
			// "do not retry"): a transport limit, say. Counting it as
			// overload would let any caller who can provoke it hold the
			// limit at its floor.
			g.metrics.result(b, "other")
			break
		}
		// Overloaded: a load signal for the limiter, not a node fault.
		g.metrics.result(b, "overloaded")
		res.sample = admission.Sample{Outcome: admission.OutcomeOverloaded}
		res.pushback = callmeta.DoNotRetry
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		b.brk.Load().Record(false)
		g.metrics.result(b, "failure")
		// The transport's message names internal addresses; the caller
		// gets a status that names the problem instead.
		res.err = errVerifierFailed
		if code == codes.Unavailable {
			// Connection refused or lost, or the node draining: its health
			// stream takes it out of rotation (a lost connection ends the
			// stream, a drain says NOT_SERVING first); one failed call does
			// not, or a transient error would exclude a healthy node until
			// its health next changed. The breaker counts the failure.
			res.err = errVerifierUnavailable
			_, _, pushedBack := callmeta.PushbackFrom(trailer)
			res.retryable = ctx.Err() == nil && !pushedBack
		}
	default:
		// DEADLINE_EXCEEDED, CANCELED and the rest say nothing about the
		// node's health: a deadline passing under load is the limiter's
		// business, and tripping breakers on overload would turn it into
		// an outage.
		g.metrics.result(b, "other")
	}
	return res
}

// ServingVerifiers returns how many verifiers the gateway would pick from now
// (health SERVING, not retired), breakers aside.
func (g *Gateway) ServingVerifiers() int {
	n := 0
	for _, b := range g.backends.list() {
		if b.eligible() {
			n++
		}
	}
	return n
}
