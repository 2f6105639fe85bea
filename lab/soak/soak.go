// Package soak is the lab's soak: a long run of healthy load on one Levee
// fleet that watches every member for growth — resident memory, goroutines
// and open file descriptors, each member's early level against its late
// one — with the fleet's goodput beside them.
//
// What it promises: a level is a median (of the first and of the last fifth
// of the judged span), so one odd second cannot make or hide growth; a
// member that restarted during the span, or that was measured early and not
// late, is reported as not judged, never as steady; a soak of a fleet that
// did not serve fails.
package soak

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/leveehq/levee/lab/drive"
	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/observe"
)

// Config is one soak.
type Config struct {
	// Duration is the judged load, after a warm-up long enough for the
	// verifiers' heaps to reach their resident size.
	Duration time.Duration
	// Load is the offered load, as a fraction of C.
	Load float64
	// Base is the experiment the soak's is made from (its seed), Clients
	// the populations that load the fleet, and Capacity how C is measured.
	Base     experiment.Spec
	Clients  experiment.Clients
	Capacity experiment.CapacityConfig
	// Logger receives the soak's progress; nil: slog.Default().
	Logger *slog.Logger
}

// DefaultConfig is the documented soak: 30 minutes at 0.8 C.
func DefaultConfig() Config { return Config{Duration: 30 * time.Minute, Load: 0.8} }

// Validate reports every invalid field.
func (s Config) Validate() error {
	if s.Duration < time.Minute || s.Duration > 24*time.Hour || !(s.Load > 0 && s.Load <= 2) {
		return fmt.Errorf("soak: want a duration in [1m, 24h] and a load in (0, 2] × C, got %v and %v", s.Duration, s.Load)
	}
	return nil
}

// Warmup precedes the judged span: long enough for each verifier's heap to
// fill to its resident size (its garbage collector is off until then),
// which is its level, not growth.
const Warmup = 20 * time.Second

// Metric is one level a soak watches, read from the column member+Suffix
// ("v1" + "_rss_mb"), and how much it may grow from its early level to its
// late one: by a factor, plus a constant.
type Metric struct {
	Suffix, What string
	Factor, Plus float64
	// Less names columns of the same member, read in the same scrape,
	// subtracted from the level each second: what the load holds rather
	// than what the process has accumulated. A member without such a
	// column has nothing subtracted.
	Less []string
}

// Watched are the metrics a soak watches. A call in progress holds a
// goroutine at the gateway (its in-flight calls) and at a verifier (its
// queue, plus at most its workers): at 0.8 C the queues swing by dozens
// from one second to the next, so goroutines are judged net of them; a
// goroutine left behind by a call that ended still counts.
var Watched = []Metric{
	{Suffix: "_rss_mb", What: "resident memory (MB)", Factor: 1.2, Plus: 16},
	{Suffix: "_goroutines", What: "goroutines beyond calls in progress", Factor: 1.1, Plus: 10, Less: []string{"_inflight", "_queue"}},
	{Suffix: "_fds", What: "open file descriptors", Factor: 1, Plus: 10},
}

// Levels is member's level of m by second: NaN where its column, or a
// column m.Less names that the member has, was not read.
func (m Metric) Levels(s *observe.Series, member string) []float64 {
	out := s.Scraped(member + m.Suffix)
	cols := s.Columns()
	for _, l := range m.Less {
		if !slices.Contains(cols, member+l) {
			continue
		}
		for i, v := range s.Scraped(member + l) {
			if i < len(out) {
				out[i] -= v // NaN stays NaN
			}
		}
	}
	return out
}

// Growth is one member's level of one metric early and late in a soak.
type Growth struct {
	Member, Metric string
	// Early and Late are the medians over the first and the last fifth of
	// the judged span; Allowed is the most Late may be.
	Early, Late, Allowed float64
}

// OK reports whether the late level is within what is allowed.
func (g Growth) OK() bool { return g.Late <= g.Allowed }

// Result is a soak's record.
type Result struct {
	Result *experiment.Result
	Growth []Growth
	// Served is the share of the judged span's arrivals that succeeded.
	Served float64
	// Unjudged names what could not be judged: a member that restarted
	// during the span (its levels start again from nothing), or one with
	// an early level and no late one.
	Unjudged []string
}

// OK reports whether nothing grew and the fleet served.
func (r Result) OK() bool {
	if len(r.Growth) == 0 || r.Served < 0.95 || len(r.Unjudged) > 0 {
		return false
	}
	for _, g := range r.Growth {
		if !g.OK() {
			return false
		}
	}
	return true
}

// Run soaks f, a running Levee fleet: its capacity C measured, then
// c.Load × C of healthy load for Warmup and c.Duration, judged.
func Run(ctx context.Context, f *drive.Fleet, q experiment.Request, c Config) (*Result, error) {
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	capacity, err := experiment.MeasureCapacity(ctx, f, q, c.Capacity)
	if err != nil {
		return nil, err
	}
	if err := drive.Sleep(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	e := c.Base
	e.Load, e.Warmup, e.Baseline, e.After, e.AfterWindow = c.Load, Warmup, c.Duration, 0, 0
	e.Trigger = experiment.Trigger{Kind: experiment.None}
	res, err := experiment.Run(ctx, f, c.Clients, q, capacity, e, log)
	if err != nil {
		return nil, err
	}
	return Judge(res), nil
}

// Judge compares each member's early and late levels over the baseline
// (the judged span) of res.
func Judge(res *experiment.Result) *Result {
	out := &Result{Result: res, Served: res.Verdict.BaselineRatio}
	base := res.Base
	fifth := max((base.To-base.From)/5, 1)
	for _, c := range res.Series.Columns() {
		// A process that restarted (another PID, another start time) has
		// levels that started again from nothing: growth up to a crash
		// would read as none.
		if member, ok := cutAnySuffix(c, "_pid", "_start"); ok {
			all := res.Series.Scraped(c)
			first := math.NaN()
			for i := base.From; i < min(base.To, len(all)); i++ {
				switch {
				case math.IsNaN(all[i]):
				case math.IsNaN(first):
					first = all[i]
				case all[i] != first:
					out.Unjudged = append(out.Unjudged, fmt.Sprintf("%s restarted %ds into the span", member, i-base.From))
					i = base.To
				}
			}
			continue
		}
		for _, m := range Watched {
			member, ok := strings.CutSuffix(c, m.Suffix)
			if !ok {
				continue
			}
			all := m.Levels(res.Series, member)
			early, late := median(all, base.From, base.From+fifth), median(all, base.To-fifth, base.To)
			if math.IsNaN(early) {
				continue
			}
			if math.IsNaN(late) {
				out.Unjudged = append(out.Unjudged, fmt.Sprintf("%s: %s measured early, not late", member, m.What))
				continue
			}
			out.Growth = append(out.Growth, Growth{Member: member, Metric: m.What, Early: early, Late: late,
				Allowed: early*m.Factor + m.Plus})
		}
	}
	return out
}

// cutAnySuffix cuts the first of suffixes s ends with.
func cutAnySuffix(s string, suffixes ...string) (string, bool) {
	for _, x := range suffixes {
		if b, ok := strings.CutSuffix(s, x); ok {
			return b, true
		}
	}
	return s, false
}

// median of the known values of xs[from:to]; NaN when none.
func median(xs []float64, from, to int) float64 {
	var v []float64
	for i := max(from, 0); i < min(to, len(xs)); i++ {
		if !math.IsNaN(xs[i]) {
			v = append(v, xs[i])
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// GrowthRule says in words how much each watched metric may grow.
func GrowthRule() string {
	var parts []string
	for _, m := range Watched {
		if m.Factor == 1 {
			parts = append(parts, fmt.Sprintf("%s + %g", m.What, m.Plus))
		} else {
			parts = append(parts, fmt.Sprintf("%s × %g + %g", m.What, m.Factor, m.Plus))
		}
	}
	return strings.Join(parts, ", ")
}
