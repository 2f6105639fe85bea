package storm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFaultSuiteOnCompose is the fault suite's short version (docs/faults.md
// has the long one's figures): it builds the images from this tree, starts
// the compose fleet under a project name of its own, and applies each fault
// under load from the lab's clients: a verifier killed, the budgetd leader
// killed, etcd's quorum lost, the gateway cut off from budgetd, a rolling
// restart of the verifiers, every verifier paused, every verifier's CPU cut.
// Each fault is judged by counting (see the checks in faults.go). The fleet
// is removed at the end, volumes included.
func TestFaultSuiteOnCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the images and runs the compose fleet through seven faults for about ten minutes")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker is not installed: the fault suite runs on the compose fleet")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := ModuleRoot(wd)
	build := exec.CommandContext(ctx, filepath.Join(root, "scripts", "docker-build.sh"))
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/docker-build.sh: %v\n%s", err, out)
	}

	cfg := DefaultConfig()
	cfg.Mode = FaultsMode
	cfg.Faults.Short = true
	cfg.Source = Compose
	cfg.Compose.Root = root
	// A project of its own: a fleet someone runs here is not touched (its
	// ports are, so the two cannot run at once).
	cfg.Compose.Project = "leveefaultstest"
	cfg.Fleets = []string{"levee"}
	cfg.Out = t.TempDir()
	cfg.Command = "go test -run TestFaultSuiteOnCompose ./pkg/storm"
	cfg.Logger = quietLogger()
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer dcancel()
		if out, err := cfg.Compose.compose(dctx, true, "down", "-v", "--remove-orphans"); err != nil {
			t.Errorf("removing the test's compose fleet: %v\n%s", err, out)
		}
	})
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Faults) != len(FaultNames) {
		t.Fatalf("%d faults judged, want %d (%s)", len(rep.Faults), len(FaultNames), strings.Join(FaultNames, ", "))
	}
	for _, fr := range rep.Faults {
		t.Log(faultLine(fr))
		if !fr.OK() {
			t.Errorf("fault %s: not every check held (report: %s)", fr.Name, filepath.Join(cfg.Out, "report.md"))
		}
		// The lab's books: every arrival was sent or dropped, every one sent
		// ended, and no answer was wrong.
		var offered, ended, dropped, wrong int64
		for i := range fr.Result.Series.secs {
			x := &fr.Result.Series.secs[i]
			offered += x.offered.Load()
			ended += x.arrEnded.Load()
			dropped += x.dropped.Load()
			wrong += x.wrong.Load()
		}
		if offered == 0 || ended+dropped != offered || wrong != 0 {
			t.Errorf("%s: offered %d, ended %d, dropped %d, wrong answers %d", fr.Name, offered, ended, dropped, wrong)
		}
	}
}
