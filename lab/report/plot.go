package report

import (
	"fmt"
	"image/color"
	"math"
	"sort"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/observe"
)

var (
	colorOffered  = color.RGBA{150, 150, 150, 255}
	colorAttempts = color.RGBA{230, 140, 30, 255}
	colorGoodput  = color.RGBA{30, 140, 60, 255}
	colorTrigger  = color.NRGBA{230, 60, 60, 45}
	fleetColors   = map[string]color.Color{
		"levee":   color.RGBA{30, 90, 200, 255},
		"control": color.RGBA{200, 40, 40, 255},
		"target":  color.RGBA{120, 60, 160, 255},
		"sim":     color.RGBA{20, 20, 20, 255},
	}
)

func fleetColor(name string) color.Color {
	if c, ok := fleetColors[name]; ok {
		return c
	}
	return color.Black
}

func xys(ys []float64, scale float64) plotter.XYs {
	pts := make(plotter.XYs, 0, len(ys))
	for i, y := range ys {
		if math.IsNaN(y) {
			continue
		}
		pts = append(pts, plotter.XY{X: float64(i), Y: y * scale})
	}
	return pts
}

func addLine(p *plot.Plot, name string, pts plotter.XYs, c color.Color, width vg.Length, dashed bool) error {
	if len(pts) == 0 {
		return nil
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.LineStyle.Color = c
	l.LineStyle.Width = width
	if dashed {
		l.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}

// shade marks the trigger's span [from, to) up to top.
func shade(p *plot.Plot, from, to int, top float64) error {
	if to <= from {
		return nil
	}
	poly, err := plotter.NewPolygon(plotter.XYs{{X: float64(from), Y: 0}, {X: float64(to), Y: 0}, {X: float64(to), Y: top}, {X: float64(from), Y: top}})
	if err != nil {
		return err
	}
	poly.Color = colorTrigger
	poly.LineStyle.Width = 0
	p.Add(poly)
	p.Legend.Add("trigger", poly)
	return nil
}

func maxOf(xss ...[]float64) float64 {
	m := 0.0
	for _, xs := range xss {
		for _, x := range xs {
			if !math.IsNaN(x) {
				m = math.Max(m, x)
			}
		}
	}
	return m
}

// plotRun draws one run: offered logical requests, attempts sent and goodput
// per second, the trigger shaded.
func plotRun(r *experiment.Result, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s fleet: %s at %.2f C (C = %.0f/s)", r.Fleet, r.Spec.Trigger, r.Spec.Load, r.Capacity.PerSecond)
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "per second"
	offered, attempts, goodput := r.Series.Offered(), r.Series.Attempts(), r.Series.Goodput()
	n := r.Obs.To
	offered, attempts, goodput = offered[:min(n, len(offered))], attempts[:min(n, len(attempts))], goodput[:min(n, len(goodput))]
	top := 1.05 * maxOf(offered, attempts, goodput)
	if err := shade(p, r.Trig.From, r.Trig.To, top); err != nil {
		return err
	}
	for _, l := range []struct {
		name string
		ys   []float64
		c    color.Color
	}{{"offered (logical)", offered, colorOffered}, {"attempts sent", attempts, colorAttempts}, {"goodput", goodput, colorGoodput}} {
		if err := addLine(p, l.name, xys(l.ys, 1), l.c, vg.Points(1.5), false); err != nil {
			return err
		}
	}
	p.Y.Min, p.Y.Max = 0, top
	p.Legend.Top = true
	return p.Save(8*vg.Inch, 4*vg.Inch, path)
}

// plotGateway draws what an adversary must not move: the gateway's
// admission limit and the capacity its bistability margin is computed
// from, beside the capacity C the lab measured.
func plotGateway(r *experiment.Result, path string) error {
	n := r.Obs.To
	col := func(name string) []float64 {
		ys := r.Series.Scraped(name)
		return ys[:min(n, len(ys))]
	}
	title := fmt.Sprintf("%s fleet at %.2f C beside %s: the gateway", r.Fleet, r.Spec.Load, r.Adversary.Kind)
	return plotLines(title, "per second, or calls", []line{
		{name: "admission limit", ys: col(observe.ColLimit), scale: 1, color: colorAttempts},
		{name: "margin's capacity", ys: col(observe.ColMarginCapacity), scale: 1, color: colorGoodput},
	}, r.Trig, 0, r.Capacity.PerSecond, "C measured by the lab", path)
}

// line is one curve of a plot over time.
type line struct {
	name   string
	ys     []float64
	scale  float64
	color  color.Color
	dashed bool
}

// plotLines draws curves over seconds with the trigger's span shaded; top
// (when positive) fixes the y range, and ref (when positive) draws a
// horizontal reference line named refName.
func plotLines(title, ylabel string, lines []line, trig experiment.Window, top, ref float64, refName, path string) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = ylabel
	if top <= 0 {
		for _, l := range lines {
			top = math.Max(top, 1.05*maxOf(l.ys)*l.scale)
		}
		top = math.Max(top, 1.05*ref)
	}
	if err := shade(p, trig.From, trig.To, top); err != nil {
		return err
	}
	n := 0
	for _, l := range lines {
		n = max(n, len(l.ys))
		if err := addLine(p, l.name, xys(l.ys, l.scale), l.color, vg.Points(1.5), l.dashed); err != nil {
			return err
		}
	}
	if ref > 0 {
		if err := addLine(p, refName, plotter.XYs{{X: 0, Y: ref}, {X: float64(n), Y: ref}}, color.Gray{Y: 120}, vg.Points(1), true); err != nil {
			return err
		}
	}
	p.Y.Min, p.Y.Max = 0, top
	p.Legend.Top = true
	return p.Save(8*vg.Inch, 4*vg.Inch, path)
}

// goodputLine is a result's goodput relative to its baseline, to the end of
// its observation.
func goodputLine(r *experiment.Result, name string, c color.Color, dashed bool) (line, bool) {
	if r.Verdict.Baseline <= 0 {
		return line{}, false
	}
	g := r.Series.Goodput()
	return line{name: name, ys: g[:min(r.Obs.To, len(g))], scale: 1 / r.Verdict.Baseline, color: c, dashed: dashed}, true
}

// plotCompare draws the goodput of each result relative to its own baseline,
// one line per fleet: the cure beside the failure.
func plotCompare(rs []*experiment.Result, title, path string) error {
	var ls []line
	for _, r := range rs {
		if l, ok := goodputLine(r, fmt.Sprintf("%s (C = %.0f/s)", r.Fleet, r.Capacity.PerSecond), fleetColor(r.Fleet), false); ok {
			ls = append(ls, l)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	return plotLines(title, "goodput ÷ baseline goodput", ls, rs[0].Trig, 1.5, 0, "", path)
}

// cellVerdict summarises a grid cell's seeds: the worst recovery, and how
// many seeds stuck.
type cellVerdict struct {
	runs, stuck int
	worst       time.Duration
	after       float64 // the lowest after-fraction of its seeds
}

func (c cellVerdict) label() string {
	if c.stuck > 0 {
		return fmt.Sprintf("stuck %d/%d\n%.0f%%", c.stuck, c.runs, 100*c.after)
	}
	return fmt.Sprintf("%.0fs", c.worst.Seconds())
}

func (c cellVerdict) color() color.Color {
	switch {
	case c.stuck > 0:
		// Darker the lower the goodput it is stuck at.
		return color.RGBA{uint8(120 + 100*c.after), 20, 20, 255}
	case c.worst <= 2*time.Second:
		return color.RGBA{80, 170, 90, 255}
	case c.worst <= 10*time.Second:
		return color.RGBA{230, 200, 60, 255}
	}
	return color.RGBA{235, 130, 40, 255}
}

// gridCells groups results of one fleet and trigger kind by (duration, load).
func gridCells(rs []*experiment.Result) (durations []time.Duration, loads []float64, cells map[[2]int]cellVerdict) {
	dset, lset := map[time.Duration]bool{}, map[float64]bool{}
	for _, r := range rs {
		dset[r.Spec.TriggerDuration()] = true
		lset[r.Spec.Load] = true
	}
	for d := range dset {
		durations = append(durations, d)
	}
	for l := range lset {
		loads = append(loads, l)
	}
	sort.Slice(durations, func(i, j int) bool { return durations[i] < durations[j] })
	sort.Float64s(loads)
	cells = map[[2]int]cellVerdict{}
	for _, r := range rs {
		i := sort.Search(len(durations), func(k int) bool { return durations[k] >= r.Spec.TriggerDuration() })
		j := sort.SearchFloat64s(loads, r.Spec.Load)
		c, seen := cells[[2]int{i, j}]
		c.runs++
		if r.Verdict.Stuck {
			c.stuck++
		} else {
			c.worst = max(c.worst, r.Verdict.Recovery)
		}
		if !seen || r.Verdict.AfterFraction < c.after {
			c.after = r.Verdict.AfterFraction
		}
		cells[[2]int{i, j}] = c
	}
	return durations, loads, cells
}

// plotHeatmap draws a grid's recovery times: trigger duration across, load
// up; green recovered within 2 s, yellow within 10 s, orange later, red
// stuck (with the seeds that stuck and the lowest goodput they stuck at).
func plotHeatmap(rs []*experiment.Result, title, path string) error {
	durations, loads, cells := gridCells(rs)
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "trigger duration"
	p.Y.Label.Text = "load (× capacity)"
	var xt, yt []plot.Tick
	for i, d := range durations {
		xt = append(xt, plot.Tick{Value: float64(i) + 0.5, Label: d.String()})
	}
	for j, l := range loads {
		yt = append(yt, plot.Tick{Value: float64(j) + 0.5, Label: fmt.Sprintf("%.2f", l)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(xt)
	p.Y.Tick.Marker = plot.ConstantTicks(yt)
	var labels plotter.XYLabels
	for k, c := range cells {
		x, y := float64(k[0]), float64(k[1])
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x, Y: y}, {X: x + 1, Y: y}, {X: x + 1, Y: y + 1}, {X: x, Y: y + 1}})
		if err != nil {
			return err
		}
		poly.Color = c.color()
		poly.LineStyle.Color = color.White
		poly.LineStyle.Width = vg.Points(2)
		p.Add(poly)
		labels.XYs = append(labels.XYs, plotter.XY{X: x + 0.5, Y: y + 0.5})
		labels.Labels = append(labels.Labels, c.label())
	}
	if len(labels.XYs) > 0 {
		lp, err := plotter.NewLabels(labels)
		if err != nil {
			return err
		}
		for i := range lp.TextStyle {
			lp.TextStyle[i].XAlign = draw.XCenter
			lp.TextStyle[i].YAlign = draw.YCenter
			lp.TextStyle[i].Color = color.White
		}
		p.Add(lp)
	}
	p.X.Min, p.X.Max = 0, float64(len(durations))
	p.Y.Min, p.Y.Max = 0, float64(len(loads))
	w := vg.Length(1.2*float64(len(durations))+1.5) * vg.Inch
	h := vg.Length(0.8*float64(len(loads))+1.5) * vg.Inch
	return p.Save(w, h, path)
}

// plotRamp draws goodput against offered load, on the way up and on the way
// down, for each fleet.
func plotRamp(rs []*experiment.Result, ramp experiment.Ramp, path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("triangle ramp %.1f C → %.0f C → %.1f C: goodput against offered load", ramp.Low, ramp.High, ramp.Low)
	p.X.Label.Text = "offered logical requests (× capacity)"
	p.Y.Label.Text = "goodput (× capacity)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	for _, r := range rs {
		h, err := ramp.Hysteresis(r)
		if err != nil {
			return err
		}
		for _, dir := range []struct {
			name   string
			ys     []float64
			dashed bool
		}{{"up", h.Up, false}, {"down", h.Down, true}} {
			var pts plotter.XYs
			for b, y := range dir.ys {
				if !math.IsNaN(y) {
					pts = append(pts, plotter.XY{X: h.Bins[b], Y: y})
				}
			}
			if err := addLine(p, fmt.Sprintf("%s, way %s", r.Fleet, dir.name), pts, fleetColor(r.Fleet), vg.Points(2), dir.dashed); err != nil {
				return err
			}
			if len(pts) > 0 {
				sc, err := plotter.NewScatter(pts)
				if err != nil {
					return err
				}
				sc.GlyphStyle.Color = fleetColor(r.Fleet)
				sc.GlyphStyle.Shape = draw.CircleGlyph{}
				if dir.dashed {
					sc.GlyphStyle.Shape = draw.BoxGlyph{}
				}
				p.Add(sc)
			}
		}
	}
	ideal, err := plotter.NewLine(plotter.XYs{{X: ramp.Low, Y: ramp.Low}, {X: 1, Y: 1}, {X: ramp.High, Y: 1}})
	if err != nil {
		return err
	}
	ideal.LineStyle.Color = color.Gray{Y: 180}
	ideal.LineStyle.Dashes = []vg.Length{vg.Points(1), vg.Points(3)}
	p.Add(ideal)
	p.Legend.Add("min(offered, C)", ideal)
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Min = 0
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
