package budgetd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/embeddedetcd"
	"github.com/leveehq/levee/internal/etcdclient"
	"github.com/leveehq/levee/internal/etcdlog"
	"github.com/leveehq/levee/internal/serving"
	"github.com/leveehq/levee/pkg/etcdauth"
	"github.com/leveehq/levee/pkg/ledger"
	"github.com/leveehq/levee/pkg/mtls"
)

var _ budgetv1.BudgetServiceServer = (*Server)(nil)

// maxRecvMsgSize bounds a request: 64 reports of 128-byte keys fit in
// about 12 KiB.
const maxRecvMsgSize = 64 << 10

// shutdownGrace bounds each step of a shutdown that waits on someone else:
// resigning in etcd, finishing in-flight calls.
const shutdownGrace = 2 * time.Second

// Sentinel errors of the accounting; the handlers map them to statuses.
var (
	errNotLeader      = errors.New("not the leader")
	errTooManyKeys    = errors.New("too many budget keys")
	errTooManyClients = errors.New("too many client ids for one identity")
)

// Refusals are built once: the refusal path formats nothing.
var (
	errNoLeader       = status.Error(codes.Unavailable, "budgetd: no leader known; use the local fallback budget")
	errForwardedTwice = status.Error(codes.Unavailable, "budgetd: this replica is not the leader (forwarded call); use the local fallback budget")
	errNotGranting    = status.Error(codes.Unavailable, "budgetd: the leader cannot confirm its etcd session; use the local fallback budget")
)

// Server is one budgetd replica. Create it with New; serve it with Serve or
// Run.
type Server struct {
	budgetv1.UnimplementedBudgetServiceServer

	cfg     Config
	log     *slog.Logger
	reg     *prometheus.Registry
	now     func() time.Time
	metrics *metrics
	health  *health.Server
	probes  *serving.Probes  // liveness and readiness on the metrics port
	streams *serving.Streams // ended at stop, so GracefulStop need not wait for them
	grpc    *grpc.Server
	conns   *serving.Connections // bounds and counts the gRPC listener's connections
	fwd     *forwarder
	served  atomic.Bool
	// sessions counts the etcd sessions this replica has had.
	sessions atomic.Int64

	mu   sync.Mutex
	self string // the advertised address, set by Serve
	// leading is true from winning the election until the session ends or
	// the replica resigns; grants also stop after grantUntil (the real
	// clock), unless etcd renewed the session since.
	leading    bool
	grantUntil time.Time
	sessionUp  bool
	leaderAddr string // as observed in etcd; "" when unknown
	ledgers    map[string]*ledger.Ledger
	reporters  *reporters // with ledgers: what each identity is credited with this term
	settings   settingsTable
}

// New builds a replica; nothing runs until Serve.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		reg:      cfg.Registry,
		now:      cfg.Now,
		health:   health.NewServer(),
		probes:   serving.NewProbes(),
		streams:  serving.NewStreams(),
		settings: newSettingsTable(cfg.Prefix+"config/", cfg.Defaults),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s.metrics = newMetrics(s.reg)
	s.fwd = newForwarder(cfg.LeaseValidity, cfg.TLS)
	s.publishSettingsLocked()

	grpcMetrics := grpcprom.NewServerMetrics()
	s.reg.MustRegister(grpcMetrics)
	s.reg.MustRegister(cfg.TLS.Collectors()...) // certificate expiry and reloads
	s.conns = cfg.ServerLimits.Connections()
	s.reg.MustRegister(s.conns.Collectors()...)
	unary := []grpc.UnaryServerInterceptor{grpcMetrics.UnaryServerInterceptor()}
	stream := []grpc.StreamServerInterceptor{grpcMetrics.StreamServerInterceptor(), s.streams.Interceptor()}
	if !cfg.TLS.Plaintext() {
		u, st := Policy().Interceptors()
		unary, stream = append(unary, u), append(stream, st)
	}
	// Budget clients ping their connection every 10 s to find a dead one
	// (pkg/budget): cfg.ServerLimits.MinPingInterval must stay below.
	s.grpc = grpc.NewServer(slices.Concat(cfg.TLS.ServerOptions(tls.RequireAndVerifyClientCert), cfg.ServerLimits.ServerOptions(), []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRecvMsgSize),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	})...)
	budgetv1.RegisterBudgetServiceServer(s.grpc, s)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	grpcMetrics.InitializeMetrics(s.grpc)
	s.setHealth(false)
	return s, nil
}

// Policy is who may call what on a budgetd port with TLS: Lease budget
// clients (under their own names), Status the admin and readers, each also
// the other replicas (which forward both to the leader); health and reflection anyone the handshake
// admitted; nothing else.
func Policy() mtls.Policy {
	return mtls.Policy{Methods: map[string][]string{
		budgetv1.BudgetService_Lease_FullMethodName:  {mtls.RoleBudget, mtls.RoleBudgetd},
		budgetv1.BudgetService_Status_FullMethodName: {mtls.RoleAdmin, mtls.RoleRead, mtls.RoleBudgetd},
	}, Open: mtls.OpenServices}
}

// Registry returns the registry holding the replica's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// IsLeader says whether this replica leads and grants leases now.
func (s *Server) IsLeader() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grantingLocked(time.Now())
}

// Addr returns the address this replica advertises (empty before Serve).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.self
}

func (s *Server) grantingLocked(realNow time.Time) bool {
	return s.leading && realNow.Before(s.grantUntil)
}

// Run listens on cfg.ListenAddr (and cfg.MetricsAddr) and serves until ctx
// ends. It is what cmd/budgetd calls.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	if cfg.ListenAddr == "" {
		return errors.New("budgetd: ListenAddr must be set")
	}
	lis, mlis, err := serving.Listen("budgetd", cfg.ListenAddr, cfg.MetricsAddr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, lis, mlis)
}

// Serve runs the replica: it starts the embedded etcd if no endpoints are
// configured, campaigns for leadership, watches the configuration, serves
// gRPC on lis and the status page and /metrics on mlis (nil for none)
// until ctx ends. Then it resigns (so that another replica takes over at
// once), stops gRPC, closes its etcd session and client and stops the
// embedded etcd. Serve returns after every goroutine it started has ended;
// it closes the listeners. A Server serves once.
func (s *Server) Serve(ctx context.Context, lis, mlis net.Listener) (err error) {
	closeListeners := func() {
		lis.Close()
		if mlis != nil {
			mlis.Close()
		}
	}
	if !s.served.CompareAndSwap(false, true) {
		closeListeners()
		return errors.New("budgetd: Serve called twice")
	}
	defer s.grpc.Stop()
	defer s.probes.Stop()
	self := s.cfg.AdvertiseAddr
	if self == "" {
		self = lis.Addr().String()
	}
	s.mu.Lock()
	s.self = self
	s.mu.Unlock()

	endpoints := s.cfg.EtcdEndpoints
	where := "external"
	if len(endpoints) == 0 {
		emb, err := embeddedetcd.Start(s.cfg.EmbeddedEtcd, s.log, s.cfg.EtcdLogLevel)
		if err != nil {
			closeListeners()
			return fmt.Errorf("budgetd: %w", err)
		}
		defer emb.Close()
		endpoints, where = emb.Endpoints(), "embedded"
	}
	// Cancelling the client's context ends every call on it, including the
	// ones etcd's concurrency package makes on that context.
	etcdCtx, abandonEtcd := context.WithCancel(context.Background())
	defer abandonEtcd()
	cli, err := etcdclient.New(etcdclient.Config{
		Context:     etcdCtx,
		Endpoints:   endpoints,
		DialTimeout: s.cfg.EtcdDialTimeout,
		TLS:         s.cfg.TLS,
		Logger:      etcdlog.New(s.log, s.cfg.EtcdLogLevel, "etcd-client", nil),
	})
	if err != nil {
		closeListeners()
		return fmt.Errorf("budgetd: etcd client: %w", err)
	}
	defer cli.Close()
	defer s.fwd.close()
	if where == "embedded" && !s.cfg.TLS.Plaintext() {
		// budgetd owns its embedded etcd: no other certificate of the CA may
		// touch its election or settings.
		actx, cancel := context.WithTimeout(ctx, s.cfg.EtcdDialTimeout+10*time.Second)
		err := etcdauth.EnableBudgetd(actx, cli, s.cfg.TLS.Leaf().Subject.CommonName)
		cancel()
		if err != nil {
			closeListeners()
			return fmt.Errorf("budgetd: embedded etcd's access control: %w", err)
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	// The etcd work ends before gRPC stops, so that the replica resigns
	// while it can still answer (forwarding to its successor).
	var etcdWork sync.WaitGroup
	etcdWork.Go(func() { s.runElection(gctx, cli) })
	etcdWork.Go(func() { s.observeLeader(gctx, cli) })
	etcdWork.Go(func() { s.watchConfig(gctx, cli) })
	etcdWork.Go(func() { s.forgetLoop(gctx) })

	g.Go(func() error {
		if err := s.grpc.Serve(s.conns.Listener(lis)); err != nil {
			return fmt.Errorf("budgetd: serve: %w", err)
		}
		return nil
	})
	stopHTTP := serving.HTTP(g, "budgetd", mlis, s.probes.Handler(s.httpHandler()))
	// Ready while listening and not stopping, leader or not: a follower
	// forwards, and one without a leader tells its clients to fall back.
	s.probes.SetReady(true)
	s.log.Info("budgetd serving", "addr", lis.Addr().String(), "advertise", self, "etcd", where, "endpoints", endpoints)
	g.Go(func() error {
		<-gctx.Done()
		s.health.Shutdown()
		s.probes.SetReady(false)
		s.awaitEtcdWork(&etcdWork, abandonEtcd)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		serving.Stop(sctx, s.grpc, s.streams)
		stopHTTP()
		return nil
	})
	err = g.Wait()
	s.log.Info("budgetd stopped", "advertise", self)
	return err
}

// awaitEtcdWork waits for the election, observer, watcher and forget
// goroutines. Resigning takes a round trip to etcd, which is worth a grace
// while this replica has a session; without one there is nothing to
// resign, and a campaign interrupted by the loss of etcd would wait for
// etcd (the concurrency package resigns on the client's context), so the
// client is abandoned at once.
func (s *Server) awaitEtcdWork(wg *sync.WaitGroup, abandon func()) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	s.mu.Lock()
	up := s.sessionUp
	s.mu.Unlock()
	if !up {
		abandon()
		<-done
		return
	}
	timer := time.NewTimer(shutdownGrace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		s.log.Warn("etcd did not answer while stopping; abandoning the session")
		abandon()
		<-done
	}
}

// setHealth publishes whether this replica can answer.
func (s *Server) setHealth(on bool) {
	serving.SetHealth(s.health, on, budgetv1.BudgetService_ServiceDesc.ServiceName)
}

// updateHealthLocked: a leader serves; so does a follower with a session
// that knows a leader to forward to.
func (s *Server) updateHealthLocked() {
	s.setHealth(s.leading || s.sessionUp && s.leaderAddr != "" && s.leaderAddr != s.self)
}

// knownLeader returns the leader to forward to, or "" if none is known.
// Without an etcd session of its own a replica cannot tell whether the
// leader it saw last still leads (when etcd is gone, it does not), so it
// knows none and refuses at once.
func (s *Server) knownLeader() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.sessionUp || s.leaderAddr == s.self {
		return ""
	}
	return s.leaderAddr
}

// Lease implements BudgetService.Lease.
func (s *Server) Lease(ctx context.Context, req *budgetv1.LeaseRequest) (*budgetv1.LeaseResponse, error) {
	if err := validateLease(req); err != nil {
		s.metrics.leases.WithLabelValues(outcomeInvalid).Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	forwarded := isForwarded(ctx)
	scope := ""
	if who, ok := mtls.PeerOf(ctx); ok {
		// A client leases under its certificate's name, and a tenant's
		// client in its tenant's key space (a front end, which names
		// tenants at the gateway, holds its keys as the gateway does);
		// only a replica forwards a lease it has bound already.
		if forwarded = forwarded && who.Has(mtls.RoleBudgetd); !forwarded {
			id, err := bindClientID(who.Name, req.GetClientId())
			if err != nil {
				s.metrics.leases.WithLabelValues(outcomeForbidden).Inc()
				return nil, err
			}
			req.ClientId = id
			if who.Tenant != "" && !who.Has(mtls.RoleFrontend) {
				scope = TenantScope(who.Tenant)
				if err := scopeKeys(req, scope); err != nil {
					s.metrics.leases.WithLabelValues(outcomeInvalid).Inc()
					return nil, err
				}
			}
		}
	}
	resp, err := s.lease(ctx, req, forwarded)
	if err == nil && scope != "" {
		unscopeKeys(resp, scope)
	}
	return resp, err
}

// lease grants req, bound already, as the leader or through it.
func (s *Server) lease(ctx context.Context, req *budgetv1.LeaseRequest, forwarded bool) (*budgetv1.LeaseResponse, error) {
	if err := plausible(req, s.cfg.MaxClientRate); err != nil {
		s.metrics.leases.WithLabelValues(outcomeImplausible).Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp, err := s.grant(req)
	switch {
	case err == nil:
		s.metrics.leases.WithLabelValues(outcomeLocal).Inc()
		return resp, nil
	case errors.Is(err, errTooManyKeys):
		s.metrics.leases.WithLabelValues(outcomeExhausted).Inc()
		return nil, status.Errorf(codes.ResourceExhausted,
			"budgetd: at most %d budget keys at once; use the local fallback budget for new keys", s.cfg.MaxKeys)
	case errors.Is(err, errTooManyClients):
		s.metrics.leases.WithLabelValues(outcomeExhausted).Inc()
		return nil, status.Errorf(codes.ResourceExhausted,
			"budgetd: at most %d client ids per certificate at once; use the local fallback budget, or reuse a client_id", s.cfg.MaxClientsPerIdentity)
	case errors.Is(err, errNotGranting):
		s.metrics.leases.WithLabelValues(outcomeUnavailable).Inc()
		return nil, err
	}
	if forwarded {
		s.metrics.leases.WithLabelValues(outcomeUnavailable).Inc()
		return nil, errForwardedTwice
	}
	leader := s.knownLeader()
	if leader == "" {
		s.metrics.leases.WithLabelValues(outcomeUnavailable).Inc()
		return nil, errNoLeader
	}
	resp, err = s.fwd.lease(ctx, leader, req)
	if err != nil {
		s.metrics.forwarded.WithLabelValues("lease", "error").Inc()
		s.metrics.leases.WithLabelValues(outcomeUnavailable).Inc()
		return nil, err
	}
	s.metrics.forwarded.WithLabelValues("lease", "ok").Inc()
	s.metrics.leases.WithLabelValues(outcomeForwarded).Inc()
	return resp, nil
}

// grant accounts for req as the leader.
func (s *Server) grant(req *budgetv1.LeaseRequest) (*budgetv1.LeaseResponse, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.leading {
		return nil, errNotLeader
	}
	if !s.grantingLocked(time.Now()) {
		return nil, errNotGranting
	}
	reports := req.GetReports()
	added := 0
	for _, r := range reports {
		if s.ledgers[r.GetKey()] == nil {
			added++
		}
	}
	if added > 0 && len(s.ledgers)+added > s.cfg.MaxKeys {
		return nil, errTooManyKeys
	}
	if !s.reporters.admit(req.GetClientId(), now) {
		return nil, errTooManyClients
	}
	validFor := durationpb.New(s.cfg.LeaseValidity)
	leases := make([]*budgetv1.KeyLease, len(reports))
	for i, r := range reports {
		key := r.GetKey()
		l := s.ledgers[key]
		if l == nil {
			l = ledger.NewLedger(s.settings.forKey(key), s.cfg.LeaseValidity, now)
			s.ledgers[key] = l
		}
		counts := ledger.CountsOf(r)
		claimed := float64(counts.First) + float64(counts.Retries)
		if f := s.reporters.credit(req.GetClientId(), claimed, now); f < 1 {
			counts = counts.Scaled(f)
			s.metrics.uncredited.Add(claimed - float64(counts.First) - float64(counts.Retries))
		}
		g := l.Report(req.GetClientId(), counts, r.GetTokensWanted(), now)
		n := g.Tokens
		leases[i] = &budgetv1.KeyLease{Key: key, Tokens: n, ValidFor: validFor, Settings: l.Settings().Proto(), FallbackMinPerSecond: g.FallbackMinPerSecond}

		label := otherKey
		if s.settings.configured(key) {
			label = key
		}
		s.metrics.granted.WithLabelValues(label).Add(float64(n))
		s.metrics.denied.WithLabelValues(label).Add(float64(r.GetTokensWanted() - n))
		s.metrics.firstAttempts.WithLabelValues(label).Add(float64(counts.First))
		s.metrics.retries.WithLabelValues(label).Add(float64(counts.Retries))
	}
	return &budgetv1.LeaseResponse{
		Leases:       leases,
		RefreshAfter: durationpb.New(s.refreshAfter()),
		Leader:       s.self,
	}, nil
}

// refreshAfter is RefreshInterval jittered by ±RefreshJitter, so that
// clients that started together do not report together.
func (s *Server) refreshAfter() time.Duration {
	j := s.cfg.RefreshJitter * (2*rand.Float64() - 1)
	return time.Duration(float64(s.cfg.RefreshInterval) * (1 + j))
}

// forgetLoop drops clients idle for ForgetAfter, and budget keys nobody
// uses that have no configuration of their own.
func (s *Server) forgetLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.LeaseValidity)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.forget(s.now())
	}
}

func (s *Server) forget(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reporters != nil {
		s.reporters.forget(now, s.cfg.ForgetAfter)
	}
	clients := 0
	for key, l := range s.ledgers {
		l.Forget(now, s.cfg.ForgetAfter)
		n := len(l.Status(now).Clients)
		if n == 0 && !s.settings.configured(key) {
			delete(s.ledgers, key)
		}
		clients += n
	}
	s.metrics.keys.Set(float64(len(s.ledgers)))
	s.metrics.clients.Set(float64(clients))
}
