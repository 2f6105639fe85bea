package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/faults"
)

// Faults is a report of the fault suite.
type Faults struct {
	// Command is how it was made; Fleet where the fleet came from
	// ("compose"); Callers the closed-loop callers that measured its C.
	Command, Fleet string
	Callers        int
	Results        []faults.Result
}

// WriteFaults writes the suite's report under out: report.md (a table per
// fault), faults.json (each fault's Summary) and each run's per-second CSV
// under runs/. It returns the files written.
func WriteFaults(out string, rep Faults) ([]string, error) {
	cfg, results := rep, rep.Results
	if err := os.MkdirAll(filepath.Join(out, "runs"), 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var files []string
	for _, fr := range results {
		path := filepath.Join(out, "runs", fr.Name+".csv")
		if err := writeFile(path, fr.Result.Series.WriteCSV); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	sums := make([]faults.Summary, len(results))
	for i, fr := range results {
		sums[i] = fr.Summary()
	}
	path := filepath.Join(out, "faults.json")
	if err := writeFile(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(sums)
	}); err != nil {
		return files, err
	}
	files = append(files, path)
	path = filepath.Join(out, "report.md")
	err := writeFile(path, func(w io.Writer) error {
		fmt.Fprintf(w, "# Levee fault suite\n\nMade by `%s` on %s. One %s fleet, started once; its capacity C = %.0f/s measured once "+
			"(%d closed-loop callers); each fault applied under open-loop load and undone before the next.\n\n",
			cfg.Command, time.Now().UTC().Format(time.DateOnly), cfg.Fleet, firstCapacity(results), cfg.Callers)
		for _, fr := range results {
			verdict := "**pass**"
			if !fr.OK() {
				verdict = "**FAIL**"
			}
			e := fr.Result.Spec
			fmt.Fprintf(w, "## %s: %s\n\n%s. Trigger %s, %s clients, baseline %.1f %% of arrivals served (%.0f/s). Per second: `runs/%s.csv`.\n\n",
				fr.Name, verdict, fr.What, e.Trigger, mixName(fr.Clients.Mix), 100*fr.Result.Verdict.BaselineRatio, fr.Result.Verdict.Baseline, fr.Name)
			fmt.Fprintln(w, "| check | measured | wanted | |")
			fmt.Fprintln(w, "|---|---|---|---|")
			for _, c := range fr.Checks {
				mark := "ok"
				if !c.OK {
					mark = "**not met**"
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s |\n", c.What, c.Got, c.Want, mark)
			}
			fmt.Fprintln(w)
		}
		return nil
	})
	return append(files, path), err
}

func firstCapacity(results []faults.Result) float64 {
	if len(results) == 0 {
		return 0
	}
	return results[0].Result.Capacity.PerSecond
}

// mixName names a mix of populations: "naive 0.7, levee 0.3".
func mixName(mix map[experiment.Kind]float64) string {
	var parts []string
	for _, k := range experiment.Kinds {
		if s := mix[k]; s > 0 {
			parts = append(parts, fmt.Sprintf("%s %g", k, s))
		}
	}
	return strings.Join(parts, ", ")
}
