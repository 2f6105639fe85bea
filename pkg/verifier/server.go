// Package verifier serves Levee's VerifyService from a pool of Argon2
// workers that never hashes for a caller who already left.
//
// A Server promises:
//
//   - Malformed or hostile input is INVALID_ARGUMENT before it is queued, and
//     nothing proportional to the attacker's numbers is allocated (package
//     verify checks every cap first).
//   - Admission on arrival: when the projected queue wait (the expected cost
//     of the queued work spread over the active workers) would exceed the
//     caller's remaining deadline or MaxQueueWait, or the queue is full, the
//     call ends at once with RESOURCE_EXHAUSTED and the trailer
//     grpc-retry-pushback-ms: -1 ("overloaded, do not retry": only one layer
//     of the fleet retries, and it is not the one in front of an overloaded
//     node).
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
//     deadline.
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
	"errors"
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
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/etcdclient"
	"github.com/leveehq/levee/internal/serving"
	"github.com/leveehq/levee/pkg/bytesize"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/deadline"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/registry"
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
	load    *loadReporter

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

	grpcMetrics := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
		grpcprom.WithHistogramBuckets(latencyBuckets)))
	s.reg.MustRegister(grpcMetrics)
	unary := []grpc.UnaryServerInterceptor{grpcMetrics.UnaryServerInterceptor(), cfg.Deadline.UnaryServerInterceptor(),
		callmeta.UnaryServerInterceptor()}
	stream := []grpc.StreamServerInterceptor{grpcMetrics.StreamServerInterceptor(), cfg.Deadline.StreamServerInterceptor(),
		s.streams.Interceptor()}
	if cfg.Unguarded {
		// A plain server neither refuses expired arrivals nor adds a
		// default deadline.
		unary = slices.Delete(unary, 1, 2)
		stream = slices.Delete(stream, 1, 2)
	}
	if !cfg.TLS.Plaintext() {
		u, st := mtls.Authorize(mtls.RoleAdmin, verifyv1.VerifierAdminService_SetCapacity_FullMethodName)
		unary, stream = append(unary, u), append(stream, st)
	}
	s.grpc = grpc.NewServer(append(cfg.TLS.ServerOptions(tls.RequireAndVerifyClientCert),
		grpc.MaxRecvMsgSize(verify.MaxRequestSize),
		// Gateways ping every connection (their ProbeInterval, 10 s at
		// least) to find a hung verifier; grpc's default policy would
		// answer pings more often than every 5 minutes with GOAWAY.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		orca.CallMetricsServerOption(s.load),
	)...)
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

// Registry returns the registry holding the verifier's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

func (s *Server) setServing(on bool) {
	serving.SetHealth(s.health, on, verifyv1.VerifyService_ServiceDesc.ServiceName)
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
	rg, err := s.newRegistrar(lis)
	if err != nil {
		lis.Close()
		if mlis != nil {
			mlis.Close()
		}
		return err
	}
	if rg != nil {
		defer rg.cli.Close()
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := s.grpc.Serve(lis); err != nil {
			return fmt.Errorf("verifier: serve: %w", err)
		}
		return nil
	})
	stopHTTP := serving.HTTP(g, "verifier", mlis, promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	g.Go(func() error {
		s.stall.run(gctx)
		return nil
	})
	g.Go(func() error {
		if err := s.warm(gctx); err != nil && gctx.Err() == nil {
			s.log.Warn("warm-up failed; serving on the prior cost estimate", "err", err)
		}
		var reg *registry.Registration
		if gctx.Err() == nil {
			s.setServing(true)
			s.log.Info("verifier serving", "addr", lis.Addr().String(), "workers", s.cfg.Workers,
				"memory_budget", bytesize.Size(s.pool.Stats().MemoryBudget).Approx(),
				"expected_hash", s.model.Estimate(s.policy))
			reg = rg.register(gctx)
		}
		<-gctx.Done()
		rg.deregister(reg)
		s.drain()
		stopHTTP()
		return nil
	})
	return g.Wait()
}

// registrar registers the server in etcd. A nil *registrar (no
// EtcdEndpoints) registers nothing.
type registrar struct {
	cli     *clientv3.Client
	cfg     registry.Config
	timeout time.Duration // bounds deregistration
	log     *slog.Logger
}

// newRegistrar settles what to register before anything is served: the
// advertised address (AdvertiseAddr, or lis's address when that is
// dialable) and the etcd client, which does not wait for etcd.
func (s *Server) newRegistrar(lis net.Listener) (*registrar, error) {
	if len(s.cfg.EtcdEndpoints) == 0 {
		return nil, nil
	}
	addr := advertised(s.cfg.AdvertiseAddr)
	if addr == "" {
		addr = lis.Addr().String()
		if err := registry.CheckAddr(addr); err != nil {
			return nil, fmt.Errorf("verifier: the listen address %s cannot be registered in etcd (gateways could not dial it); "+
				"set AdvertiseAddr (-advertise): %w", addr, err)
		}
	}
	// The registration logs what matters (losses, re-registrations); the
	// client's own retries would only repeat it: no client logger.
	cli, err := etcdclient.New(etcdclient.Config{
		Endpoints:   s.cfg.EtcdEndpoints,
		DialTimeout: s.cfg.EtcdDialTimeout,
		TLS:         s.cfg.TLS,
	})
	if err != nil {
		return nil, fmt.Errorf("verifier: etcd client: %w", err)
	}
	rc := registry.Config{
		Client: cli,
		Target: s.cfg.RegistryTarget,
		Addr:   addr,
		TTL:    s.cfg.RegistryTTL,
		Logger: s.log,
	}
	if err := rc.Validate(); err != nil {
		cli.Close()
		return nil, fmt.Errorf("verifier: %w", err)
	}
	return &registrar{cli: cli, cfg: rc, timeout: s.cfg.EtcdDialTimeout, log: s.log}, nil
}

// register registers the server, retrying until it succeeds or ctx ends
// (the drain started; nil then). Until then the node serves direct
// clients; registry.Register logs the first failure.
func (r *registrar) register(ctx context.Context) *registry.Registration {
	if r == nil {
		return nil
	}
	reg, err := registry.Register(ctx, r.cfg)
	if err != nil {
		r.log.Debug("etcd registration abandoned", "err", err)
		return nil
	}
	return reg
}

// deregister removes the server from etcd (reg may be nil), bounded by
// EtcdDialTimeout; if etcd cannot be reached, the key expires with its
// lease.
func (r *registrar) deregister(reg *registry.Registration) {
	if reg == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	if err := reg.Close(ctx); err != nil {
		r.log.Warn("etcd deregistration failed; gateways drop this verifier when its lease expires", "err", err)
	}
}

// warm runs policy hashes: first on every worker at once, which faults in
// each worker's Argon2 memory before any caller pays for it, then
// calibrationHashes of them one at a time, with the machine otherwise idle:
// their median calibrates the cost model (verify.CostModel.Calibrate). One
// at a time, because hashes run at once share the cores and the memory
// bandwidth, and the model's base is the time of a hash with its cores to
// itself; the stretch learns the rest under load.
func (s *Server) warm(ctx context.Context) error {
	pw := []byte("levee warm-up")
	errs := make(chan error, s.cfg.Workers)
	for range s.cfg.Workers {
		go func() {
			_, err := s.pool.Submit(ctx, 0, s.policy.MemoryBytes(), func() {
				_, _ = s.v.HashPassword(pw, rand.Reader)
			})
			errs <- err
		}()
	}
	var err error
	for range s.cfg.Workers {
		err = errors.Join(err, <-errs)
	}
	if err != nil {
		return err
	}
	// Free the first round's arrays so that the next reuses them.
	runtime.GC()
	took := make([]time.Duration, 0, calibrationHashes)
	for range calibrationHashes {
		var d time.Duration
		var herr error
		if _, err := s.pool.Submit(ctx, 0, s.policy.MemoryBytes(), func() {
			start := time.Now()
			_, herr = s.v.HashPassword(pw, rand.Reader)
			d = time.Since(start)
		}); err != nil {
			return err
		}
		if herr != nil {
			return herr
		}
		if !s.stall.spanned(time.Now().Add(-d), time.Now()) {
			took = append(took, d)
		}
	}
	if len(took) == 0 {
		return errors.New("every calibration hash spanned a stall")
	}
	slices.Sort(took)
	s.model.Calibrate(s.policy, took[len(took)/2], runtime.GOMAXPROCS(0))
	return nil
}

// calibrationHashes is how many warm-up hashes, run one at a time, calibrate
// the cost model: the median of five ignores two outliers.
const calibrationHashes = 5

// drain takes the node out of service: NOT_SERVING, refuse new work, let
// queued work finish or drop by deadline, then stop the gRPC server.
func (s *Server) drain() {
	s.log.Info("verifier draining")
	s.health.Shutdown() // every service NOT_SERVING, and it stays so
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	defer cancel()
	if err := s.pool.Drain(ctx); err != nil {
		s.log.Warn("drain timed out; cancelling what is left", "timeout", s.cfg.DrainTimeout)
	}
	serving.Stop(ctx, s.grpc, s.streams)
	s.log.Info("verifier drained")
}

// Close stops the server and its workers at once, without draining. Serve
// calls it on return; it is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.grpc.Stop()
		s.admin.close()
		s.pool.Close()
	})
}

// Verify implements VerifyService.Verify.
func (s *Server) Verify(ctx context.Context, req *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	if s.admin.injectFault() {
		return nil, errInjected
	}
	if err := s.v.CheckPassword(req.GetPassword()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	h := s.dummy
	if req.GetNoUser() {
		if req.GetEncodedHash() != "" {
			return nil, status.Error(codes.InvalidArgument, "no_user verification takes no encoded_hash")
		}
	} else {
		var err error
		if h, err = s.v.Parse(req.GetEncodedHash()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		// A pepper key this node does not hold: refused before it takes a
		// queue slot or memory.
		if err := s.v.CheckPepper(h); err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
	}

	tenant := callmeta.FromContext(ctx).Tenant
	s.metrics.attempt(h, tenant)

	// A rehash in the same answer is deferrable: it is planned only when
	// nothing waits for a worker and the deadline has room for both hashes;
	// the job then reserves the cost and memory of both.
	resp := &verifyv1.VerifyResponse{}
	wantRehash := req.GetRehash() && !req.GetNoUser() && s.v.NeedsRehash(h)
	cost, mem := s.model.Estimate(h), h.MemoryBytes()
	if wantRehash {
		both := cost + s.model.Estimate(s.policy)
		if s.pool.Stats().Queued > 0 || !deadline.CanFinish(ctx, both+s.cfg.Deadline.Margin) {
			wantRehash = false
			resp.RehashStatus = verifyv1.RehashStatus_REHASH_STATUS_SKIPPED
		} else {
			cost, mem = both, max(mem, s.policy.MemoryBytes())
		}
	}

	var match, rehash bool
	var verr, herr error
	var fresh *verify.Hash
	if err := s.runCost(ctx, "verify", h, cost, mem, func() bool { return fresh == nil }, func() {
		match, rehash, verr = s.v.Verify(h, req.GetPassword())
		if wantRehash && verr == nil && match && rehash {
			fresh, herr = s.v.HashPassword(req.GetPassword(), rand.Reader)
		}
	}); err != nil {
		return nil, err
	}
	if verr != nil {
		if errors.Is(verr, verify.ErrUnknownPepper) {
			return nil, status.Error(codes.FailedPrecondition, verr.Error())
		}
		return nil, status.Error(codes.InvalidArgument, verr.Error())
	}
	if req.GetNoUser() {
		match, rehash = false, false
	}
	s.metrics.verdict(h, tenant, req.GetNoUser(), match)
	resp.Match, resp.NeedsRehash = match, rehash
	switch {
	case !req.GetRehash() || resp.RehashStatus != verifyv1.RehashStatus_REHASH_STATUS_UNSPECIFIED:
	case fresh != nil:
		resp.NewHash, resp.RehashStatus = fresh.String(), verifyv1.RehashStatus_REHASH_STATUS_DONE
	case herr != nil:
		s.log.Error("rehash failed", "err", herr)
		resp.RehashStatus = verifyv1.RehashStatus_REHASH_STATUS_SKIPPED
	default:
		resp.RehashStatus = verifyv1.RehashStatus_REHASH_STATUS_NOT_NEEDED
	}
	return resp, nil
}

// Hash implements VerifyService.Hash.
func (s *Server) Hash(ctx context.Context, req *verifyv1.HashRequest) (*verifyv1.HashResponse, error) {
	if s.admin.injectFault() {
		return nil, errInjected
	}
	if err := s.v.CheckPassword(req.GetPassword()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var h *verify.Hash
	var herr error
	if err := s.run(ctx, "hash", s.policy, func() {
		h, herr = s.v.HashPassword(req.GetPassword(), rand.Reader)
	}); err != nil {
		return nil, err
	}
	if herr != nil {
		s.log.Error("hash failed", "err", herr)
		return nil, status.Error(codes.Internal, "hashing failed")
	}
	return &verifyv1.HashResponse{EncodedHash: h.String()}, nil
}

// run queues fn (one hash with the cost of h) and accounts for its fate.
func (s *Server) run(ctx context.Context, rpc string, h *verify.Hash, fn func()) error {
	return s.runCost(ctx, rpc, h, s.model.Estimate(h), h.MemoryBytes(), nil, fn)
}

// runCost is run with the expected cost and memory given: those of h, or
// more when fn does more than h's hash. The cost model learns from the run
// unless single (when not nil) says afterwards that fn did more.
func (s *Server) runCost(ctx context.Context, rpc string, h *verify.Hash, cost time.Duration, mem int64,
	single func() bool, fn func()) error {
	alg := h.Algorithm.String()
	res, err := s.pool.Submit(ctx, cost, mem, func() {
		s.metrics.hashes.WithLabelValues(alg).Inc()
		if s.beforeHash != nil {
			s.beforeHash(ctx, rpc)
		}
		fn()
	})
	if err != nil {
		return s.notRun(ctx, rpc, h, res, err)
	}
	// The ORCA interceptor sends a per-call load report only for a call whose
	// handler asked for its recorder: admitted calls only, so that the shed
	// path builds no report (out-of-band reports still carry the load).
	orca.CallMetricsRecorderFromContext(ctx)
	_ = grpc.SetTrailer(ctx, callmeta.Served{QueueWait: res.Wait, Service: res.Service, Workers: s.slots()}.Trailer())
	s.metrics.queueWait.WithLabelValues(rpc).Observe(res.Wait.Seconds())
	s.metrics.service.WithLabelValues(alg).Observe(res.Service.Seconds())
	// Learn only from what measured the node's speed for a caller who
	// waited: not a run whose caller left, nor one that spanned a stall.
	if now := time.Now(); (single == nil || single()) && ctx.Err() == nil &&
		!s.stall.spanned(now.Add(-res.Service), now) {
		s.model.Observe(h, res.Ran)
	}
	if err := ctx.Err(); err != nil {
		s.metrics.late.WithLabelValues(rpc).Inc()
		return status.FromContextError(err).Err()
	}
	s.metrics.goodput.WithLabelValues(rpc).Inc()
	return nil
}

// slots is how many policy hashes may run at once now: the active workers,
// or as many as the memory budget holds when that is fewer.
func (s *Server) slots() int {
	st := s.pool.Stats()
	if m := s.policy.MemoryBytes(); st.MemoryBudget > 0 && m > 0 {
		return int(min(int64(st.Active), max(st.MemoryBudget/m, 1)))
	}
	return st.Active
}

// Refusals are built once: the shed path formats nothing.
var (
	errQueueFull      = status.Error(codes.ResourceExhausted, "verifier overloaded: queue full; do not retry")
	errWaitTooLong    = status.Error(codes.ResourceExhausted, "verifier overloaded: projected queue wait exceeds the maximum; do not retry")
	errWouldMiss      = status.Error(codes.ResourceExhausted, "verifier overloaded: projected queue wait would overrun the deadline; do not retry")
	errDraining       = status.Error(codes.Unavailable, "verifier draining: send to another node")
	errExpired        = status.Error(codes.DeadlineExceeded, "deadline too close to finish verification; dropped before hashing")
	errCancelledQueue = status.Error(codes.Canceled, "caller cancelled while queued; not hashed")
)

// notRun maps a pool error to the caller's status and counts the drop.
func (s *Server) notRun(ctx context.Context, rpc string, h *verify.Hash, res workpool.Result, err error) error {
	priority := callmeta.FromContext(ctx).Priority.String()
	var st error
	reason := reasonArrival
	switch {
	case errors.Is(err, workpool.ErrQueueFull):
		st = errQueueFull
	case errors.Is(err, workpool.ErrWaitTooLong):
		st = errWaitTooLong
	case errors.Is(err, workpool.ErrWouldMissDeadline):
		st = errWouldMiss
	case errors.Is(err, workpool.ErrDeadlineTooShort):
		remaining, _ := deadline.Remaining(ctx)
		return s.count(reasonArrival, priority, status.Errorf(codes.DeadlineExceeded,
			"remaining deadline %v is shorter than the expected %s time %v", remaining.Round(time.Millisecond),
			h.Algorithm, time.Duration(float64(s.model.Estimate(h))*s.pool.Stats().Slowdown).Round(time.Millisecond)))
	case errors.Is(err, workpool.ErrTooBig):
		// Configuration, not load: no pushback trailer, nothing to retry.
		return s.count(reasonTooBig, priority, status.Errorf(codes.FailedPrecondition,
			"the stored %s hash needs %s of memory, more than this verifier's whole memory budget of %s: "+
				"it can never be verified here (raise -memory-budget, or rehash it with a smaller m)",
			h.Algorithm, bytesize.Size(h.MemoryBytes()).Approx(), bytesize.Size(s.pool.Stats().MemoryBudget).Approx()))
	case errors.Is(err, workpool.ErrDraining), errors.Is(err, workpool.ErrClosed):
		return s.count(reasonDraining, priority, errDraining)
	case errors.Is(err, workpool.ErrExpired):
		s.metrics.queueWait.WithLabelValues(rpc).Observe(res.Wait.Seconds())
		return s.count(reasonExpired, priority, errExpired)
	case errors.Is(err, workpool.ErrCancelled):
		s.metrics.queueWait.WithLabelValues(rpc).Observe(res.Wait.Seconds())
		// A gRPC client resets the stream when its deadline passes, and the
		// reset can arrive before the server's copy of the deadline fires
		// (the copy is later by the request's transit time): a cancel within
		// one hop's margin of the deadline is that deadline passing.
		if remaining, ok := deadline.Remaining(ctx); errors.Is(ctx.Err(), context.DeadlineExceeded) ||
			ok && remaining <= s.cfg.Deadline.Margin {
			return s.count(reasonQueueExpired, priority, status.FromContextError(context.DeadlineExceeded).Err())
		}
		return s.count(reasonCancel, priority, errCancelledQueue)
	default:
		s.log.Error("unexpected pool error", "err", err)
		return status.Error(codes.Internal, "internal error")
	}
	_ = grpc.SetTrailer(ctx, callmeta.DoNotRetry)
	return s.count(reason, priority, st)
}

func (s *Server) count(reason, priority string, st error) error {
	s.metrics.dropped.WithLabelValues(reason, priority).Inc()
	return st
}
