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
//   - Runtime settings from etcd (pkg/gateway/settings) apply within one
//     watch round trip, without a restart.
//   - A recovery autopilot (AutopilotConfig) that acts when the fleet shows
//     the metastable signature and stands down when it is gone.
//   - Verifiers come and go through etcd registrations (pkg/registry) or a
//     static list; one that leaves is out of rotation at once, and its
//     connection closes once its outstanding calls are answered.
package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/etcdclient"
	"github.com/leveehq/levee/internal/etcdwatch"
	"github.com/leveehq/levee/internal/serving"
	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/caller"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/fairshare"
	"github.com/leveehq/levee/pkg/gateway/internal/upstream"
	"github.com/leveehq/levee/pkg/gateway/settings"
	"github.com/leveehq/levee/pkg/verify"
)

// Gateway is one gateway. Create it with New; serve it with Serve or Run.
type Gateway struct {
	verifyv1.UnimplementedVerifyServiceServer

	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	metrics *metrics

	clock     Clock
	limiter   *admission.Limiter
	shares    *fairshare.Shares // the limit shared among tenants
	fair      atomic.Bool       // shares are enforced (FairShare, or the fairness setting)
	verifiers *upstream.Set
	parser    *verify.Verifier

	etcd    *clientv3.Client
	budgets *budget.Client
	retry   *budget.Budget // nil: no in-fleet retries

	grpc    *grpc.Server
	conns   *serving.Connections // bounds and counts the gRPC listener's connections
	health  *health.Server
	probes  *serving.Probes  // liveness and readiness on the metrics port
	streams *serving.Streams // ended at stop, so GracefulStop need not wait for them

	clientRatio  *retryCounts // arrivals: first attempts vs retries
	fleetRatio   *retryCounts // hops: first vs in-fleet retries
	maxAttempt   *recentMax   // the highest attempt number arriving
	marginGauges marginGauges
	pushbacks    [32]metadata.MD

	tickMu   sync.Mutex
	lastTick int64 // the clock's second tick last ran in

	calls *callSet
	auto  *autopilot

	brkCfg    atomic.Pointer[breaker.Config]
	settings  atomic.Pointer[settings.Settings]
	closeOnce sync.Once
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
	clock := cfg.Clock
	if clock == nil {
		clock = systemClock{}
	}
	// One clock for every rule the gateway keeps.
	if cfg.Admission.Clock == nil {
		cfg.Admission.Clock = clock
	}
	if cfg.Breaker.Clock == nil {
		cfg.Breaker.Clock = clock
	}
	limiter, err := admission.New(cfg.Admission)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	cfg.Tenants.Now = clock.Now
	shares, err := fairshare.New(cfg.Tenants)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g := &Gateway{
		cfg:         cfg,
		clock:       clock,
		log:         cfg.Logger,
		reg:         cfg.Registry,
		limiter:     limiter,
		shares:      shares,
		parser:      parser,
		health:      health.NewServer(),
		probes:      serving.NewProbes(),
		streams:     serving.NewStreams(),
		calls:       newCallSet(),
		clientRatio: newRetryCounts(),
		fleetRatio:  newRetryCounts(),
		maxAttempt:  newRecentMax(),
		lastTick:    math.MinInt64,
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	if g.reg == nil {
		g.reg = prometheus.NewRegistry()
		g.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	g.reg.MustRegister(cfg.TLS.Collectors()...) // certificate expiry and reloads
	g.conns = cfg.ServerLimits.Connections()
	g.reg.MustRegister(g.conns.Collectors()...)
	brk := cfg.Breaker
	g.brkCfg.Store(&brk)
	g.settings.Store(&settings.Settings{})
	g.fair.Store(cfg.FairShare && !cfg.Unguarded)
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
	g.verifiers = upstream.New(upstream.Config{
		Static:     cfg.Verifiers,
		NewBreaker: g.newBreaker,
		QueueDelay: cfg.VerifierQueueDelay,
		RetireFor:  cfg.Deadline.Max,
		Probe:      probe,
		Transport:  cfg.TLS.DialOption(cfg.VerifierServerName),
		// A bad answer has the outliers judged at once, and with them the
		// autopilot's verifiers that refuse everything.
		AfterJudging: func(now time.Time) { g.auto.ejectRefusing(now) },
		Clock:        clock,
		Logger:       g.log,
		Registry:     g.reg,
	})
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
			g.verifiers.Close()
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

	// Each call's tenant and priority are bound to its caller's
	// certificate (package caller) before anything reads them; methods
	// other than Verify, Hash, health and reflection are refused.
	callers := caller.Rules{AllowAnonymous: cfg.AllowAnonymous, Plaintext: cfg.TLS.Plaintext()}
	bindUnary, bindStream := callers.Interceptors(verifyv1.VerifyService_Verify_FullMethodName, verifyv1.VerifyService_Hash_FullMethodName)
	unary := []grpc.UnaryServerInterceptor{cfg.Deadline.UnaryServerInterceptor(), bindUnary}
	stream := []grpc.StreamServerInterceptor{cfg.Deadline.StreamServerInterceptor(), bindStream, g.streams.Interceptor()}
	if cfg.Unguarded {
		// A plain proxy neither refuses expired arrivals nor adds a
		// default deadline.
		unary, stream = unary[1:], stream[1:]
	}
	// Callers of the front door present a certificate of the CA, unless
	// anonymous callers are let in; one that is presented must chain to
	// the CA either way.
	clientAuth := tls.RequireAndVerifyClientCert
	if cfg.AllowAnonymous {
		clientAuth = tls.VerifyClientCertIfGiven
	}
	g.grpc = grpc.NewServer(slices.Concat(cfg.TLS.ServerOptions(clientAuth), cfg.ServerLimits.ServerOptions(), []grpc.ServerOption{
		grpc.MaxRecvMsgSize(verify.MaxRequestSize),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	})...)
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
func (g *Gateway) Settings() settings.Settings { return *g.settings.Load() }

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
		if err := g.grpc.Serve(g.conns.Listener(lis)); err != nil {
			return fmt.Errorf("gateway: serve: %w", err)
		}
		return nil
	})
	stopHTTP := serving.HTTP(grp, "gateway", mlis, g.probes.Handler(promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{Registry: g.reg})))
	// Ready while listening and not stopping. Not tied to the verifiers
	// (the health service's answer is): a gateway with none still answers
	// UNAVAILABLE with a pushback, which beats an empty Service.
	g.probes.SetReady(true)
	if g.etcd != nil {
		grp.Go(func() error {
			etcdwatch.Follow(gctx, g.etcd, g.cfg.VerifiersTarget+"/", true, g.verifiers, g.log, "verifier registrations", 2*time.Second)
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
		g.probes.SetReady(false)
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

// housekeep calls tick once a second until ctx ends.
func (g *Gateway) housekeep(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		g.tick()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick does the gateway's per-second work — the verifiers' (upstream.Set.
// Tick), the ceiling, the gateway's own health, the retry ratios and the
// bistability margin — once per second of the gateway's clock, however
// often it is called: a test that drives a fake clock calls it itself, and
// the housekeeping's real ticks in between change nothing.
func (g *Gateway) tick() {
	g.tickMu.Lock()
	defer g.tickMu.Unlock()
	now := g.clock.Now()
	sec := now.Unix()
	if sec == g.lastTick {
		return
	}
	g.lastTick = sec
	g.verifiers.Tick(now)
	g.fitCeiling()
	g.setServing(g.verifiers.Serving() > 0)
	ratio, firsts := g.clientRatio.roll(now)
	g.metrics.retryRatio.WithLabelValues("clients").Set(ratio)
	ratio, _ = g.fleetRatio.roll(now)
	g.metrics.retryRatio.WithLabelValues("gateway").Set(ratio)
	g.updateMargin(now, firsts)
}

// Close stops the gateway at once, without draining. Serve calls it on
// return; it is idempotent.
func (g *Gateway) Close() {
	g.closeOnce.Do(func() {
		g.grpc.Stop()
		g.probes.Stop()
		g.verifiers.Close()
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

// ServingVerifiers returns how many verifiers the gateway would pick from now
// (health SERVING, not retired), breakers aside.
func (g *Gateway) ServingVerifiers() int { return g.verifiers.Serving() }
