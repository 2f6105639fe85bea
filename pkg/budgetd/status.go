package budgetd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/pkg/ledger"
	"github.com/leveehq/levee/pkg/mtls"
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

// QueryStatus asks the replica at addr for the status of key (all keys if
// empty), presenting id (nil: plaintext).
func QueryStatus(ctx context.Context, addr, key string, id *mtls.Source) (*budgetv1.StatusResponse, error) {
	cc, err := grpc.NewClient(addr, id.DialOption(""))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	defer cc.Close()
	resp, err := budgetv1.NewBudgetServiceClient(cc).Status(ctx, &budgetv1.StatusRequest{Key: key})
	if err != nil {
		return nil, fmt.Errorf("status from %s: %w", addr, err)
	}
	return resp, nil
}

// StatusCommand is the command line's budget status, the one behind both
// `budgetd status` and `levee status`: its flags, and the query it makes
// with the operator's identity.
type StatusCommand struct {
	Addr    string
	Key     string
	JSON    bool
	Timeout time.Duration
	TLS     mtls.Settings
}

// AddFlags registers -addr, -key, -json, -timeout and the TLS flags on fs,
// with their defaults.
func (c *StatusCommand) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", DefaultConfig().ListenAddr, "address of any budgetd replica")
	fs.StringVar(&c.Key, "key", "", "budget key to describe (default: all)")
	fs.BoolVar(&c.JSON, "json", false, "print JSON instead of tables")
	fs.DurationVar(&c.Timeout, "timeout", 5*time.Second, "give up after this long")
	c.TLS.AddFlags(fs)
}

// Run asks the replica at Addr, as the admin identity (or in plaintext with
// -insecure), and writes its answer to w as WriteStatus does, within
// Timeout.
func (c *StatusCommand) Run(ctx context.Context, w io.Writer) error {
	id, err := c.TLS.Load(mtls.IdentityAdmin, mtls.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	resp, err := QueryStatus(ctx, c.Addr, c.Key, id)
	if err != nil {
		return err
	}
	return WriteStatus(w, resp, c.JSON)
}

// WriteStatus writes resp as readable tables, or as JSON (proto field
// names, every field present).
func WriteStatus(w io.Writer, resp *budgetv1.StatusResponse, asJSON bool) error {
	if asJSON {
		b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true, EmitUnpopulated: true}.Marshal(resp)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	var sb strings.Builder
	if resp.GetLeader() == "" {
		fmt.Fprintf(&sb, "leader:  none (clients use their local fallback budgets)\n")
	} else {
		fmt.Fprintf(&sb, "leader:  %s\n", resp.GetLeader())
	}
	fmt.Fprintf(&sb, "replica: %s\n\n", resp.GetReplica())

	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	if len(resp.GetBudgets()) == 0 {
		fmt.Fprintln(tw, "no budgets yet")
	} else {
		fmt.Fprintln(tw, "KEY\tRATIO\tBURST\tMIN/S\tTOKENS\tFIRST/S\tRETRIES/S\tRETRY RATIO\tGRANTED\tDENIED\tCLIENTS")
		for _, b := range resp.GetBudgets() {
			st := b.GetSettings()
			fmt.Fprintf(tw, "%s\t%g\t%g\t%g\t%.1f\t%.1f\t%.1f\t%.3f\t%d\t%d\t%d\n", b.GetKey(),
				st.GetRatio(), st.GetBurst(), st.GetMinPerSecond(), b.GetTokensAvailable(),
				b.GetFirstAttemptsPerSecond(), b.GetRetriesPerSecond(), b.GetRetryRatio(),
				b.GetTokensGrantedTotal(), b.GetTokensDeniedTotal(), len(b.GetClients()))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, b := range resp.GetBudgets() {
		if len(b.GetClients()) == 0 {
			continue
		}
		fmt.Fprintf(&sb, "\nclients of %s:\n", b.GetKey())
		tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  CLIENT\tHAS\tWANTS\tFIRST/S\tSINCE REPORT")
		for _, c := range b.GetClients() {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%.1f\t%v\n", c.GetClientId(), c.GetHas(), c.GetWants(),
				c.GetFirstAttemptsPerSecond(), c.GetSinceReport().AsDuration().Round(time.Millisecond))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if errs := resp.GetConfigErrors(); len(errs) > 0 {
		fmt.Fprintf(&sb, "\nconfig errors:\n")
		for _, e := range errs {
			fmt.Fprintf(&sb, "  %s\n", e)
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}

// httpHandler serves the status page at / and the metrics at /metrics.
func (s *Server) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("/{$}", s.statusPage)
	return mux
}

// statusPage is the status as plain text (?json for JSON, ?key=k for one
// key), headed by this replica's own role.
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
		_ = WriteStatus(w, resp, true)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "budgetd %s: %s\n\n", s.Addr(), s.role())
	_ = WriteStatus(w, resp, false)
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
