// Command demand-trace samples verifiers' /metrics once a second while a
// lab run loads them, and writes what an autoscaler would see: each
// verifier's demand ratio (wellknown.MetricVerifierDemand) beside its
// queue length and its refusals on arrival, as CSV and as a plot. It only reads; the load comes from
// levee-lab (docs/lab/hpa-metric/README.md has the command).
//
//	demand-trace -metrics http://127.0.0.1:PORT/metrics,... -for 3m -out DIR
package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"image/color"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/leveehq/levee/pkg/wellknown"
)

// sample is one verifier's series at one second.
type sample struct {
	demand, queue, refused float64 // refused is a counter
	ok                     bool
}

func main() {
	metrics := flag.String("metrics", "", "comma-separated verifier /metrics URLs")
	dur := flag.Duration("for", 3*time.Minute, "how long to sample")
	out := flag.String("out", "hpa-metric", "directory for demand.csv and demand.png")
	flag.Parse()
	urls := strings.Split(*metrics, ",")
	if *metrics == "" {
		fmt.Fprintln(os.Stderr, "demand-trace: -metrics is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	if err := run(ctx, urls, *out); err != nil {
		fmt.Fprintln(os.Stderr, "demand-trace:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, urls []string, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	client := &http.Client{Timeout: 800 * time.Millisecond}
	var rows [][]sample
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		row := make([]sample, len(urls))
		for i, u := range urls {
			row[i] = scrape(ctx, client, u)
		}
		rows = append(rows, row)
		select {
		case <-ctx.Done():
			return write(rows, urls, out)
		case <-tick.C:
		}
	}
}

// scrape reads the few series it needs from the text exposition format.
func scrape(ctx context.Context, c *http.Client, url string) sample {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return sample{}
	}
	resp, err := c.Do(req)
	if err != nil {
		return sample{}
	}
	defer resp.Body.Close()
	var s sample
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, _ := strings.Cut(line, " ")
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			continue
		}
		switch {
		case name == wellknown.MetricVerifierDemand:
			s.demand, s.ok = v, true
		case name == wellknown.MetricVerifierQueueLength:
			s.queue = v
		case strings.HasPrefix(name, wellknown.MetricVerifierDropped+"{") && strings.Contains(name, `reason="arrival"`):
			s.refused += v
		}
	}
	return s
}

func write(rows [][]sample, urls []string, out string) error {
	f, err := os.Create(filepath.Join(out, "demand.csv"))
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	head := []string{"second"}
	for i := range urls {
		v := fmt.Sprintf("verifier%d_", i+1)
		head = append(head, v+"demand_ratio", v+"queue_length", v+"refused_per_second")
	}
	_ = w.Write(head)
	demand := make([]plotter.XYs, len(urls))
	queue := make([]plotter.XYs, len(urls))
	for t, row := range rows {
		rec := []string{strconv.Itoa(t)}
		for i, s := range row {
			if !s.ok {
				rec = append(rec, "", "", "")
				continue
			}
			var refused float64
			if t > 0 && rows[t-1][i].ok {
				refused = s.refused - rows[t-1][i].refused
			}
			rec = append(rec, ff(s.demand), ff(s.queue), ff(refused))
			demand[i] = append(demand[i], plotter.XY{X: float64(t), Y: s.demand})
			queue[i] = append(queue[i], plotter.XY{X: float64(t), Y: s.queue})
		}
		_ = w.Write(rec)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return plotTrace(demand, queue, filepath.Join(out, "demand.png"))
}

func ff(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

var colors = []color.Color{color.RGBA{30, 90, 200, 255}, color.RGBA{230, 140, 30, 255}, color.RGBA{30, 140, 60, 255}}

func plotTrace(demand, queue []plotter.XYs, path string) error {
	top, bottom := plot.New(), plot.New()
	top.Title.Text = wellknown.MetricVerifierDemand + " (the HPA's metric), per verifier, each second"
	top.Y.Label.Text = "demand ÷ capacity"
	top.Y.Min = 0
	bottom.Title.Text = wellknown.MetricVerifierQueueLength + " (what a queue-depth autoscaler would follow)"
	bottom.Y.Label.Text = "queued calls"
	bottom.X.Label.Text = "seconds"
	bottom.Y.Min = 0
	for i := range demand {
		c := colors[i%len(colors)]
		for _, pl := range []struct {
			p   *plot.Plot
			xys plotter.XYs
		}{{top, demand[i]}, {bottom, queue[i]}} {
			if len(pl.xys) == 0 {
				continue
			}
			l, err := plotter.NewLine(pl.xys)
			if err != nil {
				return err
			}
			l.Color, l.Width = c, vg.Points(1.2)
			pl.p.Add(l)
			pl.p.Legend.Add(fmt.Sprintf("verifier %d", i+1), l)
		}
	}
	top.Add(plotter.NewGrid())
	bottom.Add(plotter.NewGrid())
	img := vgimg.New(vg.Points(900), vg.Points(620))
	dc := draw.New(img)
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(10)}, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
