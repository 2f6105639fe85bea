// Command levee-lab is Levee's lab: it drives a real fleet through the
// triggers of a metastable failure and reports whether it came back
// (docs/lab.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/leveehq/levee/lab"
	"github.com/leveehq/levee/lab/drive"
)

const usage = `usage: levee-lab [flags]

Drives a real fleet through the triggers of a metastable failure and says
whether it came back. By default: the local Levee fleet (separate processes)
and its control (the same binaries, -unguarded), each measured for its
capacity C, then loaded at 0.7 C by naive clients (three immediate attempts,
2 s timeout each) while every verifier is stopped (SIGSTOP) for 10 s; report
in ./storm-out.

  levee-lab                                         the default experiment
  levee-lab -trigger cpu -duration 20s -load 0.9    a CPU cut of the verifiers
  levee-lab -trigger kill:budgetd-leader -mix levee:1
  levee-lab -grid                                   the whole grid (hours)
  levee-lab -ramp                                   0.2 C → 10 C → 0.2 C: any hysteresis?
  levee-lab -sim                                    a 19 s failover at C = 1,000/s, simulated
  levee-lab -fleet compose -faults                  the fault suite on the compose fleet (docs/faults.md)
  levee-lab -soak 30m                               30 minutes at 0.8 C: does any member grow?
  levee-lab -fleet target -target host:7700 -trigger spike -spike 3

See docs/lab.md for every experiment and verdict.

flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "levee-lab:", err)
		}
		os.Exit(1)
	}
}

// run parses args into the lab's Config and runs it once: the thin main's
// whole job, callable from a test.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, verbose, err := parse(args, stderr, nil)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg.Progress = stdout
	cfg.Command = strings.Join(append([]string{"levee-lab"}, reportedArgs(args)...), " ")
	if cfg.Source == lab.Local && cfg.Mode != lab.SimMode && cfg.Local.Bin.Dir == "" {
		if cfg.Local.Bin, err = findBinaries(ctx, stderr); err != nil {
			return err
		}
	}
	rep, err := lab.Run(ctx, cfg)
	if rep != nil && len(rep.Files) > 0 {
		fmt.Fprintf(stdout, "report: %s\n", filepath.Join(cfg.Out, "report.md"))
	}
	if err != nil {
		return err
	}
	// A suite or a soak whose checks failed exits non-zero, as a test
	// would: scripts and CI read the status.
	return rep.Failed()
}

// findBinaries finds the fleet's programs next to this one (the product's
// commands installed beside levee-lab), or builds them from the Levee source
// tree holding the working directory (go -C lab run ./cmd/levee-lab).
func findBinaries(ctx context.Context, stderr io.Writer) (drive.Binaries, error) {
	if exe, err := os.Executable(); err == nil {
		if b := (drive.Binaries{Dir: filepath.Dir(exe)}); b.Check() == nil {
			return b, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return drive.Binaries{}, err
	}
	root := drive.ModuleRoot(wd)
	if root == "" {
		return drive.Binaries{}, errors.New("levee-lab: no verifier, gateway and budgetd next to this program and no Levee source tree here: " +
			"give -bin DIR, or run from the source tree (go -C lab run ./cmd/levee-lab)")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "levee", "storm-bin")
	fmt.Fprintf(stderr, "building the fleet's binaries into %s ...\n", dir)
	return drive.BuildBinaries(ctx, root, dir)
}
