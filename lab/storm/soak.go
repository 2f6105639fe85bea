package storm

import (
	"context"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leveehq/levee/lab/experiment"
)

// Soak is a long run of healthy load that watches every member of one
// Levee fleet for growth (SoakMode): resident memory, goroutines and open
// file descriptors, each member's early level against its late one, with
// the fleet's goodput beside them.
type Soak struct {
	// Duration is the judged load, after a warm-up long enough for the
	// verifiers' heaps to reach their resident size.
	Duration time.Duration
	// Load is the offered load, as a fraction of C.
	Load float64
}

// DefaultSoak is the documented soak: 30 minutes at 0.8 C.
func DefaultSoak() Soak { return Soak{Duration: 30 * time.Minute, Load: 0.8} }

// Validate reports every invalid field.
func (s Soak) Validate() error {
	if s.Duration < time.Minute || s.Duration > 24*time.Hour || !(s.Load > 0 && s.Load <= 2) {
		return fmt.Errorf("storm: soak: want a duration in [1m, 24h] and a load in (0, 2] × C, got %v and %v", s.Duration, s.Load)
	}
	return nil
}

// soakWarmup precedes the judged span: long enough for each verifier's
// heap to fill to its resident size (its garbage collector is off until
// then), which is its level, not growth.
const soakWarmup = 20 * time.Second

// soakMetrics are the columns a soak watches, with how much each may grow
// from its early level to its late one: by a factor, plus a constant.
var soakMetrics = []struct {
	suffix, what string
	factor, plus float64
}{
	{"_rss_mb", "resident memory (MB)", 1.2, 16},
	{"_goroutines", "goroutines", 1.1, 10},
	{"_fds", "open file descriptors", 1, 10},
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

// SoakResult is a soak's record.
type SoakResult struct {
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
func (r SoakResult) OK() bool {
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

// runSoak runs the soak against one Levee fleet.
func runSoak(ctx context.Context, cfg Config, q experiment.Request) (_ *SoakResult, err error) {
	f, err := startFleet(ctx, cfg, "levee")
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	capacity, err := experiment.MeasureCapacity(ctx, f.Target, f.TLS, q, cfg.Capacity)
	if err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, 2*time.Second); err != nil {
		return nil, err
	}
	e := cfg.Experiment
	e.Load, e.Warmup, e.Baseline, e.After, e.AfterWindow = cfg.Soak.Load, soakWarmup, cfg.Soak.Duration, 0, 0
	e.Trigger = experiment.Trigger{Kind: experiment.None}
	res, err := experiment.Run(ctx, f, cfg.Clients, q, capacity, e, cfg.Logger)
	if err != nil {
		return nil, err
	}
	return judgeSoak(res), nil
}

// judgeSoak compares each member's early and late levels over the
// baseline (the judged span).
func judgeSoak(res *experiment.Result) *SoakResult {
	out := &SoakResult{Result: res, Served: res.Verdict.BaselineRatio}
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
		for _, m := range soakMetrics {
			member, ok := strings.CutSuffix(c, m.suffix)
			if !ok {
				continue
			}
			all := res.Series.Scraped(c)
			early, late := median(all, base.From, base.From+fifth), median(all, base.To-fifth, base.To)
			if math.IsNaN(early) {
				continue
			}
			if math.IsNaN(late) {
				out.Unjudged = append(out.Unjudged, fmt.Sprintf("%s: %s measured early, not late", member, m.what))
				continue
			}
			out.Growth = append(out.Growth, Growth{Member: member, Metric: m.what, Early: early, Late: late,
				Allowed: early*m.factor + m.plus})
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

// writeSoak writes the soak's report: report.md (each member's levels),
// the per-second CSV, and plots of memory, goroutines and goodput.
func writeSoak(out string, cfg Config, r *SoakResult) ([]string, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("storm: report: %w", err)
	}
	res := r.Result
	files := []string{filepath.Join(out, "soak.csv")}
	if err := writeFile(files[0], res.Series.WriteCSV); err != nil {
		return nil, err
	}
	// One curve per member and metric.
	palette := []color.Color{colorGoodput, colorAttempts, colorOffered, color.RGBA{R: 120, G: 60, B: 160, A: 255},
		color.RGBA{R: 200, G: 120, B: 0, A: 255}, color.RGBA{R: 0, G: 140, B: 140, A: 255}, color.Gray{Y: 90}}
	for _, m := range soakMetrics {
		var lines []line
		for i, g := range r.Growth {
			if g.Metric == m.what {
				lines = append(lines, line{name: g.Member, ys: res.Series.Scraped(g.Member + m.suffix), scale: 1,
					color: palette[i%len(palette)]})
			}
		}
		if len(lines) == 0 {
			continue
		}
		path := filepath.Join(out, "soak"+strings.ReplaceAll(m.suffix, "_", "-")+".png")
		if err := plotLines(fmt.Sprintf("soak: %s per member", m.what), m.what, lines, experiment.Window{}, 0, 0, "", path); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	gp := filepath.Join(out, "soak-goodput.png")
	if err := plotRun(res, gp); err != nil {
		return files, err
	}
	files = append(files, gp)
	path := filepath.Join(out, "report.md")
	err := writeFile(path, func(w io.Writer) error {
		verdict := "**no growth**"
		if !r.OK() {
			verdict = "**GREW or did not serve**"
		}
		fmt.Fprintf(w, "# Levee soak\n\nMade by `%s` on %s: one Levee fleet (%s), C = %.0f/s, %.2f C of %s for %v after a %v warm-up: %s.\n\n",
			cfg.Command, time.Now().UTC().Format(time.DateOnly), cfg.Source, res.Capacity.PerSecond, cfg.Soak.Load,
			describeClients(cfg.Clients), cfg.Soak.Duration, soakWarmup, verdict)
		fmt.Fprintf(w, "Served %.2f %% of the judged span's arrivals (goodput %.0f/s). Each level is the median over the first and the last fifth of the span; "+
			"a metric may grow by %s.\n\n", 100*r.Served, res.Verdict.Baseline, growthRule())
		for _, u := range r.Unjudged {
			fmt.Fprintf(w, "- **not judged**: %s\n", u)
		}
		fmt.Fprintln(w, "| member | metric | early | late | allowed | |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
		for _, g := range r.Growth {
			mark := "ok"
			if !g.OK() {
				mark = "**grew**"
			}
			fmt.Fprintf(w, "| %s | %s | %.1f | %.1f | ≤ %.1f | %s |\n", g.Member, g.Metric, g.Early, g.Late, g.Allowed, mark)
		}
		fmt.Fprintln(w, "\n![resident memory](soak-rss-mb.png)\n\n![goroutines](soak-goroutines.png)\n\n![open files](soak-fds.png)\n\n![goodput](soak-goodput.png)")
		return nil
	})
	return append(files, path), err
}

func growthRule() string {
	var parts []string
	for _, m := range soakMetrics {
		if m.factor == 1 {
			parts = append(parts, fmt.Sprintf("%s + %g", m.what, m.plus))
		} else {
			parts = append(parts, fmt.Sprintf("%s × %g + %g", m.what, m.factor, m.plus))
		}
	}
	return strings.Join(parts, ", ")
}
