package budgetd

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/pkg/budgetstatus"
	"github.com/leveehq/levee/pkg/ledger"
)

// Status implements BudgetService.Status: the leader's view, forwarded by a
// follower. With no leader known, the replica answers with what it knows
// itself (settings and configuration errors) and an empty leader.
func (s *Server) Status(ctx context.Context, req *budgetv1.StatusRequest) (*budgetv1.StatusResponse, error) {
	if k := req.GetKey(); k != "" {
		if err := ledger.ValidateName(k); err != nil {
			return nil, status.Error(codes.InvalidArgument, "key: "+err.Error())
		}
	}
	return s.status(ctx, req)
}

func (s *Server) status(ctx context.Context, req *budgetv1.StatusRequest) (*budgetv1.StatusResponse, error) {
	if resp := s.localStatus(req.GetKey(), true); resp != nil {
		return resp, nil
	}
	if isForwarded(ctx) {
		return nil, errForwardedTwice
	}
	leader := s.knownLeader()
	if leader == "" {
		return s.localStatus(req.GetKey(), false), nil
	}
	resp, err := s.fwd.status(ctx, leader, req)
	if err != nil {
		s.metrics.forwarded.WithLabelValues("status", "error").Inc()
		return nil, err
	}
	s.metrics.forwarded.WithLabelValues("status", "ok").Inc()
	return resp, nil
}

// localStatus describes the budgets as this replica knows them; with
// asLeader, only if it leads (else nil).
func (s *Server) localStatus(key string, asLeader bool) *budgetv1.StatusResponse {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if asLeader && !s.leading {
		return nil
	}
	resp := &budgetv1.StatusResponse{Replica: s.self, ConfigErrors: s.settings.errors()}
	if s.leading {
		resp.Leader = s.self
	}
	keys := []string{key}
	if key == "" {
		set := map[string]bool{}
		for k := range s.ledgers {
			set[k] = true
		}
		for _, k := range s.settings.keys() {
			set[k] = true
		}
		keys = make([]string, 0, len(set))
		for k := range set {
			keys = append(keys, k)
		}
		sort.Strings(keys)
	}
	for _, k := range keys {
		b := &budgetv1.BudgetStatus{Key: k, Settings: s.settings.forKey(k).Proto()}
		if l := s.ledgers[k]; l != nil {
			st := l.Status(now)
			b.Settings = st.Settings.Proto()
			b.TokensAvailable = st.Tokens
			b.FirstAttemptsPerSecond = st.FirstPerSecond
			b.RetriesPerSecond = st.RetriesPerSecond
			if st.FirstPerSecond > 0 {
				b.RetryRatio = st.RetriesPerSecond / st.FirstPerSecond
			}
			b.FirstAttemptsTotal, b.RetriesTotal = st.FirstTotal, st.RetriesTotal
			b.TokensGrantedTotal, b.TokensDeniedTotal = st.GrantedTotal, st.DeniedTotal
			for _, c := range st.Clients {
				if c.SinceReport > s.cfg.LeaseValidity {
					continue // idle: its lease has run out
				}
				b.Clients = append(b.Clients, &budgetv1.ClientStatus{
					ClientId:               c.ID,
					Has:                    c.Has,
					Wants:                  c.Wants,
					FirstAttemptsPerSecond: c.FirstPerSecond,
					SinceReport:            durationpb.New(c.SinceReport),
				})
			}
		}
		resp.Budgets = append(resp.Budgets, b)
	}
	return resp
}

// httpHandler serves the status page at / and the metrics at /metrics.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("/{$}", s.statusPage)
	return mux
}

// statusPage is the status as plain text (?json for JSON, ?key=k for one
// key), headed by this replica's own role, rendered as the operator's
// tools render it (package budgetstatus).
func (s *Server) statusPage(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key != "" {
		if err := ledger.ValidateName(key); err != nil {
			http.Error(w, "key: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), shutdownGrace)
	defer cancel()
	resp, err := s.status(ctx, &budgetv1.StatusRequest{Key: key})
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, asJSON := r.URL.Query()["json"]
	if asJSON {
		w.Header().Set("Content-Type", "application/json")
		_ = budgetstatus.Write(w, resp, true)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "budgetd %s: %s\n\n", s.Addr(), s.role())
	_ = budgetstatus.Write(w, resp, false)
}

// role describes this replica for people.
func (s *Server) role() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.grantingLocked(time.Now()):
		return "leader"
	case s.leading:
		return "leader, not granting (etcd session not confirmed)"
	case s.leaderAddr != "" && s.leaderAddr != s.self:
		return "follower of " + s.leaderAddr
	case !s.sessionUp:
		return "no etcd session; no leader known"
	default:
		return "campaigning; no leader known"
	}
}
