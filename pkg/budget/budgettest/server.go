// Package budgettest is a BudgetService for tests of the budget client and
// of anything that embeds it: a real gRPC server whose accounting is the
// real ledger.Ledger (one per key), with switches to make Lease fail with a
// chosen code, hang, or stop serving altogether, and a record of every
// report it accepted. It has no leader election, no etcd and no forwarding.
package budgettest

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/pkg/ledger"
	"github.com/leveehq/levee/pkg/mtls"
)

var _ budgetv1.BudgetServiceServer = (*Server)(nil)

// Config configures a Server.
type Config struct {
	// Now is the ledgers' clock; nil means time.Now. Share a Clock's Now
	// with the client under test to make the accounting deterministic.
	Now func() time.Time
	// ValidFor is the lease duration sent (and the ledgers' lease period);
	// zero means 2 s.
	ValidFor time.Duration
	// RefreshAfter is sent as is (no jitter, for determinism); zero means
	// half of ValidFor.
	RefreshAfter time.Duration
	// Settings apply to keys not given their own with SetSettings; the zero
	// value means ledger.DefaultSettings().
	Settings ledger.Settings
	// Leader is sent as LeaseResponse.leader; empty means "budgettest".
	Leader string
	// TLS, when set, serves mutual TLS with this identity, as budgetd
	// does; nil is plaintext.
	TLS *mtls.Source
}

// Report is one key's report as the server accepted it.
type Report struct {
	Seq           int // the LeaseRequest it came in, from 1
	ClientID      string
	Key           string
	FirstAttempts uint64
	// FallbackFirstAttempts is the part of FirstAttempts the client sent in
	// fallback; Span the time the counts cover (zero: not sent).
	FallbackFirstAttempts uint64
	Span                  time.Duration
	Retries               uint64
	TokensWanted          uint32
	TokensGranted         uint32
	At                    time.Time
	ValidFor              time.Duration
	KeysInRequest         int // reports in that LeaseRequest
}

// Server is a BudgetService backed by ledger.Ledger.
type Server struct {
	budgetv1.UnimplementedBudgetServiceServer

	cfg Config

	mu       sync.Mutex
	ledgers  map[string]*ledger.Ledger
	settings map[string]ledger.Settings
	reports  []Report
	seq      int
	changed  chan struct{} // closed and replaced at every accepted request
	failWith codes.Code
	omit     map[string]bool
	hold     chan struct{} // when non-nil, Lease waits for it to close
	calls    int

	srvMu sync.Mutex
	addr  string
	grpc  *grpc.Server
	done  chan struct{}
}

// NewServer returns a Server that is not serving yet; call Start.
func NewServer(cfg Config) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ValidFor <= 0 {
		cfg.ValidFor = 2 * time.Second
	}
	if cfg.RefreshAfter <= 0 {
		cfg.RefreshAfter = cfg.ValidFor / 2
	}
	if cfg.Settings == (ledger.Settings{}) {
		cfg.Settings = ledger.DefaultSettings()
	}
	if cfg.Leader == "" {
		cfg.Leader = "budgettest"
	}
	return &Server{
		cfg:      cfg,
		ledgers:  map[string]*ledger.Ledger{},
		settings: map[string]ledger.Settings{},
		changed:  make(chan struct{}),
	}
}

// Start serves on 127.0.0.1 on a free port the first time, and on the same
// address after Stop, so that clients reconnect to it. It returns the
// address.
func (s *Server) Start() (string, error) {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	if s.grpc != nil {
		return s.addr, nil
	}
	addr := s.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("budgettest: listen: %w", err)
	}
	s.addr = lis.Addr().String()
	s.grpc = grpc.NewServer(s.cfg.TLS.ServerOptions(tls.RequireAndVerifyClientCert)...)
	budgetv1.RegisterBudgetServiceServer(s.grpc, s)
	s.done = make(chan struct{})
	srv, done := s.grpc, s.done
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	return s.addr, nil
}

// Addr returns the address Start listened on ("" before).
func (s *Server) Addr() string {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	return s.addr
}

// Stop stops serving at once (connections close; clients see UNAVAILABLE)
// and waits for the serving goroutine. The ledgers are kept, as if the
// leader came back. Stop is idempotent; Start serves again.
func (s *Server) Stop() {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	if s.grpc == nil {
		return
	}
	s.grpc.Stop()
	<-s.done
	s.grpc, s.done = nil, nil
}

// Fail makes every Lease fail with code from now on; codes.OK stops failing.
func (s *Server) Fail(code codes.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failWith = code
}

// Omit makes Lease leave key out of its answers (its report is still
// accounted), as a confused server would; Omit(key, false) undoes it.
func (s *Server) Omit(key string, omit bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.omit == nil {
		s.omit = map[string]bool{}
	}
	s.omit[key] = omit
}

// Hold makes every Lease wait (until release or its caller's deadline)
// before doing anything, as a budgetd stuck behind etcd would; release lets
// them all go and is idempotent.
func (s *Server) Hold() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	s.hold = ch
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.hold == ch {
				s.hold = nil
			}
			s.mu.Unlock()
			close(ch)
		})
	}
}

// SetSettings sets key's settings, creating its ledger now if it has none
// (so that it starts earning MinPerSecond from now).
func (s *Server) SetSettings(key string, st ledger.Settings) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settings[key] = st
	if l := s.ledgers[key]; l != nil {
		l.SetSettings(st, s.cfg.Now())
		return
	}
	s.ledgers[key] = ledger.NewLedger(st, s.cfg.ValidFor, s.cfg.Now())
}

// Calls returns how many Lease calls arrived, failed ones included.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Reports returns every report accepted so far, in order.
func (s *Server) Reports() []Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Report(nil), s.reports...)
}

// Requests returns how many LeaseRequests were accepted.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// WaitRequests blocks until at least n LeaseRequests were accepted, or ctx
// ends.
func (s *Server) WaitRequests(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, changed := s.seq, s.changed
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("budgettest: %d lease requests accepted, waiting for %d: %w", got, n, ctx.Err())
		}
	}
}

// Ledger returns a snapshot of key's ledger (the zero value if it has
// none).
func (s *Server) Ledger(key string) ledger.LedgerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.ledgers[key]; l != nil {
		return l.Status(s.cfg.Now())
	}
	return ledger.LedgerStatus{}
}

// Lease implements BudgetService.Lease over the ledgers.
func (s *Server) Lease(ctx context.Context, req *budgetv1.LeaseRequest) (*budgetv1.LeaseResponse, error) {
	s.mu.Lock()
	s.calls++
	hold := s.hold
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	switch {
	case req.GetClientId() == "":
		return nil, status.Error(codes.InvalidArgument, "client_id is empty")
	case len(req.GetReports()) == 0 || len(req.GetReports()) > 64:
		return nil, status.Errorf(codes.InvalidArgument, "%d reports, want 1..64", len(req.GetReports()))
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWith != codes.OK {
		return nil, status.Error(s.failWith, "budgettest: failing on purpose")
	}
	now := s.cfg.Now()
	s.seq++
	resp := &budgetv1.LeaseResponse{RefreshAfter: durationpb.New(s.cfg.RefreshAfter), Leader: s.cfg.Leader}
	for _, r := range req.GetReports() {
		if r.GetKey() == "" {
			return nil, status.Error(codes.InvalidArgument, "empty key")
		}
		st, ok := s.settings[r.GetKey()]
		if !ok {
			st = s.cfg.Settings
		}
		l := s.ledgers[r.GetKey()]
		if l == nil {
			l = ledger.NewLedger(st, s.cfg.ValidFor, now)
			s.ledgers[r.GetKey()] = l
		}
		g := l.Report(req.GetClientId(), ledger.CountsOf(r), r.GetTokensWanted(), now)
		granted := g.Tokens
		s.reports = append(s.reports, Report{
			Seq: s.seq, ClientID: req.GetClientId(), Key: r.GetKey(),
			FirstAttempts: r.GetFirstAttempts(), Retries: r.GetRetries(),
			FallbackFirstAttempts: r.GetFallbackFirstAttempts(), Span: r.GetSpan().AsDuration(),
			TokensWanted: r.GetTokensWanted(), TokensGranted: granted,
			At: now, ValidFor: s.cfg.ValidFor, KeysInRequest: len(req.GetReports()),
		})
		if s.omit[r.GetKey()] {
			continue
		}
		resp.Leases = append(resp.Leases, &budgetv1.KeyLease{
			Key:      r.GetKey(),
			Tokens:   granted,
			ValidFor: durationpb.New(s.cfg.ValidFor),
			Settings: &budgetv1.Settings{Ratio: st.Ratio, Burst: st.Burst, MinPerSecond: st.MinPerSecond},

			FallbackMinPerSecond: g.FallbackMinPerSecond,
		})
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return resp, nil
}

// Status implements BudgetService.Status from the ledgers.
func (s *Server) Status(_ context.Context, req *budgetv1.StatusRequest) (*budgetv1.StatusResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failWith != codes.OK {
		return nil, status.Error(s.failWith, "budgettest: failing on purpose")
	}
	now := s.cfg.Now()
	resp := &budgetv1.StatusResponse{Leader: s.cfg.Leader, Replica: s.addr}
	for key, l := range s.ledgers {
		if req.GetKey() != "" && req.GetKey() != key {
			continue
		}
		ls := l.Status(now)
		bs := &budgetv1.BudgetStatus{
			Key:                    key,
			Settings:               &budgetv1.Settings{Ratio: ls.Settings.Ratio, Burst: ls.Settings.Burst, MinPerSecond: ls.Settings.MinPerSecond},
			TokensAvailable:        ls.Tokens,
			FirstAttemptsPerSecond: ls.FirstPerSecond,
			RetriesPerSecond:       ls.RetriesPerSecond,
			FirstAttemptsTotal:     ls.FirstTotal,
			RetriesTotal:           ls.RetriesTotal,
			TokensGrantedTotal:     ls.GrantedTotal,
			TokensDeniedTotal:      ls.DeniedTotal,
		}
		if ls.FirstPerSecond > 0 {
			bs.RetryRatio = ls.RetriesPerSecond / ls.FirstPerSecond
		}
		for _, c := range ls.Clients {
			bs.Clients = append(bs.Clients, &budgetv1.ClientStatus{
				ClientId: c.ID, Has: c.Has, Wants: c.Wants,
				FirstAttemptsPerSecond: c.FirstPerSecond, SinceReport: durationpb.New(c.SinceReport),
			})
		}
		resp.Budgets = append(resp.Budgets, bs)
	}
	sort.Slice(resp.Budgets, func(i, j int) bool { return resp.Budgets[i].Key < resp.Budgets[j].Key })
	return resp, nil
}
