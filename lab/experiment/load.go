package experiment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/lab/observe"
	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/client"
	"github.com/leveehq/levee/pkg/mtls"
)

// population is a mix of clients ready to call one fleet during one
// experiment: its connections, its pkg/client processes and their budget
// clients, all recording into one series.
type population struct {
	cfg     Clients
	q       Request
	s       *observe.Series
	conns   []*grpc.ClientConn
	rpcs    []verifyv1.VerifyServiceClient
	levee   []*client.Client
	budgets []*budget.Client

	kinds  []Kind
	kindCw []float64 // cumulative weights
	// With tenants, each arrival picks a tenant by its load instead of a
	// kind from the mix; tenantQ are their stored hashes.
	tenants  []int
	tenantCw []float64
	tenantQ  []Request
	pris     []callmeta.Priority
	priCw    []float64

	rr       atomic.Uint64
	inflight atomic.Int64
}

// newPopulation dials the target and, for the levee population, starts
// cfg.Levee.Processes budget clients against budgetdTarget ("" means no
// budget: pkg/client then never retries).
func newPopulation(cfg Clients, q Request, target, budgetdTarget string, id *mtls.Source, s *observe.Series, log *slog.Logger) (*population, error) {
	p := &population{cfg: cfg, q: q, s: s}
	for k, share := range cfg.Mix {
		if share > 0 && len(cfg.Tenants) == 0 {
			p.kinds = append(p.kinds, k)
		}
	}
	sort.Slice(p.kinds, func(i, j int) bool { return p.kinds[i] < p.kinds[j] }) // a seed gives the same run
	if len(cfg.Tenants) > 0 {
		names := make([]string, len(cfg.Tenants))
		for i, t := range cfg.Tenants {
			names[i] = t.Name
			p.tenants = append(p.tenants, i)
			p.tenantCw = append(p.tenantCw, last(p.tenantCw)+t.Load)
			tq, err := q.costing(t.Cost)
			if err != nil {
				return nil, err
			}
			p.tenantQ = append(p.tenantQ, tq)
		}
		s.SetTenants(names)
	}
	for _, k := range p.kinds {
		p.kindCw = append(p.kindCw, last(p.kindCw)+cfg.Mix[k])
	}
	for _, pr := range []callmeta.Priority{callmeta.Critical, callmeta.Interactive, callmeta.Batch} {
		if share := cfg.Priorities[pr]; share > 0 {
			p.pris = append(p.pris, pr)
			p.priCw = append(p.priCw, last(p.priCw)+share)
		}
	}
	for range cfg.Conns {
		cc, err := grpc.NewClient(target, id.DialOption(""), grpc.WithDisableRetry())
		if err != nil {
			p.close()
			return nil, fmt.Errorf("experiment: dial %s: %w", target, err)
		}
		p.conns = append(p.conns, cc)
		p.rpcs = append(p.rpcs, verifyv1.NewVerifyServiceClient(recordingConn{cc: cc, s: s}))
	}
	if cfg.uses(Levee) {
		for i := range cfg.Levee.Processes {
			cc := cfg.Levee
			ccfg := client.DefaultConfig()
			ccfg.MaxAttempts = cc.MaxAttempts
			ccfg.Deadline.Default = cc.Deadline
			if budgetdTarget != "" {
				bc := budget.DefaultConfig()
				bc.Target = budgetdTarget
				bc.ClientID = fmt.Sprintf("storm/%d/%s", i, budget.DefaultClientID())
				bc.Keys = []string{cc.BudgetKey}
				bc.Logger = log
				bc.DialOptions = []grpc.DialOption{id.DialOption("")}
				b, err := budget.New(bc)
				if err != nil {
					p.close()
					return nil, fmt.Errorf("experiment: budget client: %w", err)
				}
				p.budgets = append(p.budgets, b)
				key, err := b.Key(cc.BudgetKey)
				if err != nil {
					p.close()
					return nil, fmt.Errorf("experiment: budget key: %w", err)
				}
				ccfg.Budget = key
			}
			lc, err := client.New(recordingConn{cc: p.conns[i%len(p.conns)], s: s}, ccfg)
			if err != nil {
				p.close()
				return nil, fmt.Errorf("experiment: levee client: %w", err)
			}
			p.levee = append(p.levee, lc)
		}
	}
	return p, nil
}

func last(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

func pick[T any](rng *rand.Rand, items []T, cw []float64) (T, bool) {
	var zero T
	if len(items) == 0 {
		return zero, false
	}
	u := rng.Float64() * last(cw)
	i := sort.SearchFloat64s(cw, u)
	return items[min(i, len(items)-1)], true
}

func (p *population) close() {
	for _, b := range p.budgets {
		_ = b.Close()
	}
	for _, cc := range p.conns {
		_ = cc.Close()
	}
}

// drive sends open-loop Poisson arrivals at rate(t) logical requests per
// second from the series' start for d (see poisson), then waits for every
// logical request to end (each is bounded by its population's patience;
// ctx ending cuts them short).
func (p *population) drive(ctx context.Context, rng *rand.Rand, rate func(time.Duration) float64, d time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	poisson(ctx, rng, p.s.Start(), rate, d, func(arrival time.Time) {
		kind, _ := pick(rng, p.kinds, p.kindCw)
		tenant, tenanted := pick(rng, p.tenants, p.tenantCw)
		if !tenanted {
			tenant = -1
		} else {
			kind = p.cfg.Tenants[tenant].Kind
		}
		pri, _ := pick(rng, p.pris, p.priCw)
		p.s.Add(arrival, func(x *observe.Second) { x.Offered.Add(1) })
		p.s.AddTenant(arrival, tenant, func(x *observe.TenantSecond) { x.Offered.Add(1) })
		if p.inflight.Load() >= int64(p.cfg.MaxInFlight) {
			p.s.Add(arrival, func(x *observe.Second) { x.Dropped.Add(1) })
			return
		}
		p.inflight.Add(1)
		wg.Go(func() {
			defer p.inflight.Add(-1)
			p.one(ctx, kind, pri, tenant, arrival)
		})
	})
}

// poisson calls send at each arrival of a Poisson process of rate(t) per
// second from start for d, until ctx ends. Arrivals are scheduled, not
// paced by answers: a slow fleet gets the same arrivals as a fast one.
// When the caller falls behind schedule it sends at once what is due, so
// the rate holds on average. send must not block.
func poisson(ctx context.Context, rng *rand.Rand, start time.Time, rate func(time.Duration) float64, d time.Duration,
	send func(arrival time.Time)) {
	next := start
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		t := next.Sub(start)
		if t >= d || ctx.Err() != nil {
			return
		}
		lambda := rate(t)
		if !(lambda > 0) {
			next = next.Add(10 * time.Millisecond)
			continue
		}
		if wait := time.Until(next); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		arrival := next
		next = next.Add(time.Duration(rng.ExpFloat64() / lambda * float64(time.Second)))
		send(arrival)
	}
}

// one runs a logical request of kind (for tenant, an index of
// Clients.Tenants, or -1) and records its fate.
func (p *population) one(ctx context.Context, kind Kind, pri callmeta.Priority, tenant int, arrival time.Time) {
	n := p.rr.Add(1)
	rpc := p.rpcs[n%uint64(len(p.rpcs))]
	f := callmeta.Facts{Priority: pri}
	q := p.q
	if tenant >= 0 {
		f.Tenant, q = p.cfg.Tenants[tenant].Name, p.tenantQ[tenant]
		ctx = withTenant(ctx, tenant)
	}
	var ok bool
	switch kind {
	case Naive:
		ok = attemptsUntilOK(ctx, rpc, q, f, p.cfg.Naive.Attempts, p.cfg.Naive.Timeout, 0, p.s)
	case Human:
		ok = attemptsUntilOK(ctx, rpc, q, f, p.cfg.Human.Tries, p.cfg.Human.Patience, p.cfg.Human.Think, p.s)
	case NoDeadline:
		// No deadline on the wire: the lab's cap is a cancellation.
		cctx, cancel := context.WithCancel(ctx)
		stop := time.AfterFunc(p.cfg.NoDeadline.Cap, cancel)
		ok = attemptsUntilOK(cctx, rpc, q, f, 1, 0, 0, p.s)
		stop.Stop()
		cancel()
	case Levee:
		lc := p.levee[n%uint64(len(p.levee))]
		cctx, cancel := context.WithTimeout(ctx, p.cfg.Levee.Deadline)
		var opts []client.CallOption
		if pri != callmeta.PriorityUnspecified {
			opts = append(opts, client.WithPriority(pri))
		}
		if f.Tenant != "" {
			opts = append(opts, client.WithTenant(f.Tenant))
		}
		v, err := lc.Verify(cctx, q.hash, q.password, opts...)
		cancel()
		ok = err == nil
		if ok && !v.Match {
			p.s.Add(time.Now(), func(x *observe.Second) { x.Wrong.Add(1) })
		}
	}
	end := time.Now()
	took := end.Sub(arrival)
	p.s.Add(end, func(x *observe.Second) {
		if ok {
			x.Goodput.Add(1)
		} else {
			x.Failed.Add(1)
		}
	})
	p.s.Add(arrival, func(x *observe.Second) {
		x.ArrivedEnded.Add(1)
		if ok {
			x.ArrivedOK.Add(1)
			x.Latency[observe.LatBucket(took)].Add(1)
		}
	})
	p.s.AddTenant(end, tenant, func(x *observe.TenantSecond) {
		if ok {
			x.Goodput.Add(1)
		} else {
			x.Failed.Add(1)
		}
	})
	p.s.AddTenant(arrival, tenant, func(x *observe.TenantSecond) {
		x.ArrivedEnded.Add(1)
		if ok {
			x.ArrivedOK.Add(1)
		}
	})
}

// errNoTarget is returned when a fleet has no Verify address to call.
var errNoTarget = errors.New("experiment: the fleet has no target address")
