// Package verifier serves Levee's VerifyService from a pool of Argon2
// workers that never hashes for a caller who already left.
//
// A Server promises:
//
//   - Malformed or hostile input is INVALID_ARGUMENT before it is queued, and
//     nothing proportional to the attacker's numbers is allocated (package
//     verify checks every cap first).
//   - Admission on arrival: when the projected queue wait (the expected cost
//     of the queued work spread over the active workers) would exceed
//     MaxQueueWait, or the queue is full, the node is overloaded: the call
//     ends at once with RESOURCE_EXHAUSTED and the trailer
//     grpc-retry-pushback-ms: -1 ("overloaded, do not retry": only one layer
//     of the fleet retries, and it is not the one in front of an overloaded
//     node). When the wait plus the hash, or the hash alone, would overrun
//     the caller's own deadline, the call ends at once with
//     DEADLINE_EXCEEDED and no pushback: the caller's choice, not overload.
//     docs/verifier.md ("What an answer says") is the whole contract.
//   - At dequeue, a request whose remaining deadline is shorter than its
//     expected service time is dropped without hashing (DEADLINE_EXCEEDED),
//     and a caller who cancels while queued is removed and never hashed.
//   - The queue serves newest first once its oldest entry has waited past
//     LIFOAfter, oldest first again once it drains.
//   - At most Workers hashes run at once, and the Argon2 memory of those
//     running (each stored hash brings its own m) sums to at most
//     MemoryBudget: a hash waits in the queue until both a worker and its
//     memory are free. Small hashes may start ahead of a large one waiting
//     for memory, at most Workers of them, then the large one is next.
//   - A stored hash whose memory alone exceeds MemoryBudget could never run
//     here: it is FAILED_PRECONDITION at once, naming its memory and the
//     budget, and never hashed. Not RESOURCE_EXHAUSTED (retrying cannot
//     help), not INVALID_ARGUMENT (the hash is well-formed and within
//     Limits; it is this node's budget that cannot hold it).
//   - Health is NOT_SERVING until the workers are warm, and again from the
//     moment a drain starts; during a drain new calls get UNAVAILABLE
//     (retryable elsewhere) while queued work is finished or dropped by its
//     deadline. The probes on the metrics port (internal/serving.Probes)
//     follow: readiness only while warm and not draining, never because
//     the workers are busy; liveness whenever the process answers.
//   - With EtcdEndpoints, the node is in etcd under RegistryTarget (for
//     gateways' naming resolver) only while warm and not draining: it
//     registers once SERVING and deregisters before anything else when a
//     drain starts, so gateways stop routing to it before it refuses.
//
// Metrics go to a private registry; see metrics.go for the series.
package verifier

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"sync"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/reflection"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/serving"
	"github.com/leveehq/levee/pkg/bytesize"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/workpool"
)

var (
	_ verifyv1.VerifyServiceServer        = (*Server)(nil)
	_ verifyv1.VerifierAdminServiceServer = (*adminServer)(nil)
)

// Server is one verifier. Create it with New; serve it with Serve or Run.
type Server struct {
	verifyv1.UnimplementedVerifyServiceServer

	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	v       *verify.Verifier
	policy  *verify.Hash // the policy's parameters, for cost estimates
	dummy   *verify.Hash // a hash under the policy of no password: no_user calls verify against it
	pool    *workpool.Pool
	model   *verify.CostModel
	stall   *stallDetector
	metrics *metrics
	health  *health.Server
	streams *serving.Streams // ended at the drain, so GracefulStop need not wait for them
	admin   *adminServer
	grpc    *grpc.Server
	conns   *serving.Connections // bounds and counts the gRPC listener's connections
	load    *loadReporter
	demand  *demand
	probes  *serving.Probes // liveness and readiness on the metrics port

	// beforeHash, when set (by tests, before Serve), runs on the worker just
	// before each hash of a request, after every admission check passed. ctx
	// is the request's, so a test can tell requests apart by their metadata.
	beforeHash func(ctx context.Context, rpc string)

	closeOnce sync.Once
}

// New builds a verifier and starts its workers; Serve (or Close) must follow.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := verify.NewWithPeppers(cfg.Policy, cfg.Limits, cfg.Peppers)
	if err != nil {
		return nil, fmt.Errorf("verifier: %w", err)
	}
	budget, budgetSource := cfg.ResolveMemoryBudget()
	pool, err := workpool.New(workpool.Config{
		Workers:       cfg.Workers,
		QueueCapacity: cfg.QueueCapacity,
		MaxQueueWait:  cfg.MaxQueueWait,
		LIFOAfter:     cfg.LIFOAfter,
		MemoryBudget:  budget,
		Unguarded:     cfg.Unguarded,
	})
	if err != nil {
		return nil, fmt.Errorf("verifier: %w", err)
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Logger,
		reg:     cfg.Registry,
		v:       v,
		policy:  v.PolicyHash(),
		pool:    pool,
		model:   verify.NewCostModel(max(runtime.GOMAXPROCS(0)/cfg.Workers, 1), nil),
		stall:   newStallDetector(),
		health:  health.NewServer(),
		streams: serving.NewStreams(),
		probes:  serving.NewProbes(),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log.Debug("memory budget", "bytes", budget, "budget", bytesize.Size(budget).Approx(), "source", budgetSource)
	if maxHash := int64(cfg.Limits.MaxMemoryKiB) << 10; maxHash > budget {
		s.log.Warn("stored hashes may ask for more memory than the budget holds; those are refused with FAILED_PRECONDITION",
			"max_memory", bytesize.Size(maxHash).Approx(), "memory_budget", bytesize.Size(budget).Approx())
	}
	if cfg.Unguarded {
		s.log.Warn("unguarded: every overload defence is off (unbounded FIFO queue, no deadline checks); for the lab's control fleet only")
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	// The stand-in for users who do not exist: a real hash under the policy
	// (and pepper) of a random password nobody knows, so that verifying
	// against it costs what verifying a real user costs.
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		pool.Close()
		return nil, fmt.Errorf("verifier: %w", err)
	}
	if s.dummy, err = v.HashPassword(secret, rand.Reader); err != nil {
		pool.Close()
		return nil, fmt.Errorf("verifier: no_user stand-in: %w", err)
	}
	s.metrics = newMetrics(s.reg, pool, s.model, s.policy, s.stall)
	s.admin = newAdminServer(pool, cfg.Workers, cfg.EnableCapacityKnob, s.log)
	s.load = newLoadReporter(pool, cfg.QueueCapacity)
	s.demand = newDemand(pool, v, s.model, s.policy, time.Now)
	s.reg.MustRegister(s.demand.collector())

	grpcMetrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets(latencyBuckets)))
	s.reg.MustRegister(grpcMetrics)
	s.reg.MustRegister(cfg.TLS.Collectors()...) // certificate expiry and reloads
	s.conns = cfg.ServerLimits.Connections()
	s.reg.MustRegister(s.conns.Collectors()...)
	unary := []grpc.UnaryServerInterceptor{grpcMetrics.UnaryServerInterceptor(), cfg.Deadline.UnaryServerInterceptor(),
		callmeta.UnaryServerInterceptor(), s.demand.interceptor()}
	stream := []grpc.StreamServerInterceptor{grpcMetrics.StreamServerInterceptor(), cfg.Deadline.StreamServerInterceptor(),
		s.streams.Interceptor()}
	if cfg.Unguarded {
		// A plain server neither refuses expired arrivals nor adds a
		// default deadline.
		unary = slices.Delete(unary, 1, 2)
		stream = slices.Delete(stream, 1, 2)
	}
	if !cfg.TLS.Plaintext() {
		// Before anything reads the call's metadata: a stranger is refused
		// before the node spends a byte on it.
		u, st := Policy().Interceptors()
		unary, stream = append([]grpc.UnaryServerInterceptor{u}, unary...), append([]grpc.StreamServerInterceptor{st}, stream...)
	}
	// Gateways ping every connection (their ProbeInterval, 10 s at least)
	// to find a hung verifier: cfg.ServerLimits.MinPingInterval must stay below.
	s.grpc = grpc.NewServer(slices.Concat(cfg.TLS.ServerOptions(tls.RequireAndVerifyClientCert), cfg.ServerLimits.ServerOptions(), []grpc.ServerOption{
		grpc.MaxRecvMsgSize(verify.MaxRequestSize),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		orca.CallMetricsServerOption(s.load),
	})...)
	verifyv1.RegisterVerifyServiceServer(s.grpc, s)
	verifyv1.RegisterVerifierAdminServiceServer(s.grpc, s.admin)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	if err := orca.Register(s.grpc, orca.ServiceOptions{ServerMetricsProvider: s.load}); err != nil {
		pool.Close()
		return nil, fmt.Errorf("verifier: orca: %w", err)
	}
	reflection.Register(s.grpc)
	grpcMetrics.InitializeMetrics(s.grpc)
	s.setServing(false)
	return s, nil
}

// Policy is who may call what on a verifier's port with TLS: Verify, Hash
// and the load reports (ORCA) only the gateway, the capacity knob only the
// admin; health and reflection anyone the handshake admitted (a
// certificate of the fleet's CA); nothing else.
func Policy() mtls.Policy {
	gateway, admin := []string{mtls.RoleGateway}, []string{mtls.RoleAdmin}
	return mtls.Policy{Methods: map[string][]string{
		verifyv1.VerifyService_Verify_FullMethodName:             gateway,
		verifyv1.VerifyService_Hash_FullMethodName:               gateway,
		orcaStreamCoreMetrics:                                    gateway,
		verifyv1.VerifierAdminService_SetCapacity_FullMethodName: admin,
		verifyv1.VerifierAdminService_GetCapacity_FullMethodName: admin,
	}, Open: mtls.OpenServices}
}

// orcaStreamCoreMetrics is the ORCA out-of-band load report stream
// (xds.service.orca.v3), which orca.Register serves.
const orcaStreamCoreMetrics = "/xds.service.orca.v3.OpenRcaService/StreamCoreMetrics"

// Registry returns the registry holding the verifier's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

func (s *Server) setServing(on bool) {
	serving.SetHealth(s.health, on, verifyv1.VerifyService_ServiceDesc.ServiceName)
	s.probes.SetReady(on)
}

// Run listens on cfg.ListenAddr (and cfg.MetricsAddr) and serves until ctx
// ends, then drains. It is what cmd/verifier calls.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	lis, mlis, err := serving.Listen("verifier", cfg.ListenAddr, cfg.MetricsAddr)
	if err != nil {
		s.Close()
		return err
	}
	return s.Serve(ctx, lis, mlis)
}

// Serve warms the workers, serves gRPC on lis and /metrics on mlis (nil for
// none) until ctx ends, then drains gracefully: health NOT_SERVING first,
// new work refused, queued work finished or dropped by its deadline, then the
// listeners close. Serve returns after every goroutine it started has ended.
//
// With EtcdEndpoints, Serve registers the node in etcd once it is SERVING
// and deregisters it as the first step of the drain. etcd being unreachable
// never stops the node from serving direct clients: the registration is
// retried (its first failure logged at WARN) until it succeeds or the drain
// starts. Serve refuses at once, before serving, a listen address nobody
// can dial (0.0.0.0) when no AdvertiseAddr is given.
func (s *Server) Serve(ctx context.Context, lis, mlis net.Listener) error {
	defer s.Close()
	announcer, etcd, err := s.announcer(lis)
	if err != nil {
		lis.Close()
		if mlis != nil {
			mlis.Close()
		}
		return err
	}
	if etcd != nil {
		defer etcd.Close()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.grpc.Serve(s.conns.Listener(lis)); err != nil {
			return fmt.Errorf("verifier: serve: %w", err)
		}
		return nil
	})
	stopHTTP := serving.HTTP(g, "verifier", mlis, s.probes.Handler(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})))
	g.Go(func() error {
		s.stall.run(gctx)
		return nil
	})
	g.Go(func() error {
		if err := s.warm(gctx); err != nil && gctx.Err() == nil {
			s.log.Warn("warm-up failed; serving on the prior cost estimate", "err", err)
		}
		if gctx.Err() == nil {
			s.setServing(true)
			s.log.Info("verifier serving", "addr", lis.Addr().String(), "workers", s.cfg.Workers,
				"memory_budget", bytesize.Size(s.pool.Stats().MemoryBudget).Approx(),
				"expected_hash", s.model.Estimate(s.policy))
			announcer.Announce(gctx)
		}
		<-gctx.Done()
		announcer.Withdraw()
		s.drain()
		stopHTTP()
		return nil
	})
	return g.Wait()
}

// Close stops the server and its workers at once, without draining. Serve
// calls it on return; it is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.grpc.Stop()
		s.probes.Stop()
		s.admin.close()
		s.pool.Close()
	})
}
