package report

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/soak"
)

// Soak is a report of a soak.
type Soak struct {
	// Command is how it was made; Fleet where the fleet came from
	// ("local"); Config the soak as it ran.
	Command, Fleet string
	Config         soak.Config
	Result         *soak.Result
}

// WriteSoak writes the soak's report under out: report.md (each member's
// levels), the per-second CSV, and plots of memory, goroutines and
// goodput. It returns the files written.
func WriteSoak(out string, rep Soak) ([]string, error) {
	r := rep.Result
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	res := r.Result
	files := []string{filepath.Join(out, "soak.csv")}
	if err := writeFile(files[0], res.Series.WriteCSV); err != nil {
		return nil, err
	}
	// One curve per member and metric.
	palette := []color.Color{colorGoodput, colorAttempts, colorOffered, color.RGBA{R: 120, G: 60, B: 160, A: 255},
		color.RGBA{R: 200, G: 120, B: 0, A: 255}, color.RGBA{R: 0, G: 140, B: 140, A: 255}, color.Gray{Y: 90}}
	for _, m := range soak.Watched {
		var lines []line
		for i, g := range r.Growth {
			if g.Metric == m.What {
				lines = append(lines, line{name: g.Member, ys: m.Levels(res.Series, g.Member), scale: 1,
					color: palette[i%len(palette)]})
			}
		}
		if len(lines) == 0 {
			continue
		}
		path := filepath.Join(out, "soak"+strings.ReplaceAll(m.Suffix, "_", "-")+".png")
		if err := plotLines(fmt.Sprintf("soak: %s per member", m.What), m.What, lines, experiment.Window{}, 0, 0, "", path); err != nil {
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
			rep.Command, time.Now().UTC().Format(time.DateOnly), rep.Fleet, res.Capacity.PerSecond, rep.Config.Load,
			describeClients(rep.Config.Clients), rep.Config.Duration, soak.Warmup, verdict)
		fmt.Fprintf(w, "Served %.2f %% of the judged span's arrivals (goodput %.0f/s). Each level is the median over the first and the last fifth of the span; "+
			"a metric may grow by %s.\n\n", 100*r.Served, res.Verdict.Baseline, soak.GrowthRule())
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
