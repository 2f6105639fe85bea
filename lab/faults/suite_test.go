package faults

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leveehq/levee/lab/drive"
)

// TestFaultSuiteOnCompose is the fault suite's short version (docs/faults.md
// has the long one's figures): it builds the images from this tree, starts
// the compose fleet under a project name of its own, and applies each fault
// under load from the lab's clients: a verifier killed, the budgetd leader
// killed, etcd's quorum lost, the gateway cut off from budgetd, a rolling
// restart of the verifiers, every verifier paused, every verifier's CPU cut.
// Each fault is judged by counting (see the checks in faults.go). The fleet
// is removed at the end, volumes included.
//
// The suite runs as `levee-lab -faults`, a program built here without the
// race detector, as an operator runs it: the lab's load generator shares
// the fleet's two cores, and race instrumentation would multiply what it
// takes from them. The test reads its faults.json and its exit status.
func TestFaultSuiteOnCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the images and runs the compose fleet through seven faults for about six minutes")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		if os.Getenv("LEVEE_REQUIRE_DOCKER") != "" {
			t.Fatalf("LEVEE_REQUIRE_DOCKER is set (CI) but docker is not installed: %v", err)
		}
		t.Skip("docker is not installed: the fault suite runs on the compose fleet")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := drive.ModuleRoot(wd)
	if root == "" {
		t.Fatalf("no Levee source tree above %s", wd)
	}
	build := exec.CommandContext(ctx, filepath.Join(root, "scripts", "docker-build.sh"))
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/docker-build.sh: %v\n%s", err, out)
	}
	labBin := t.TempDir()
	if err := drive.GoBuild(ctx, filepath.Join(root, "lab"), labBin, "./cmd/levee-lab"); err != nil {
		t.Fatal(err)
	}
	lab := filepath.Join(labBin, "levee-lab")

	// A project of its own: a fleet someone runs here is not touched (its
	// ports are, so the two cannot run at once).
	const project = "leveefaultstest"
	out := t.TempDir()
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer dcancel()
		c := drive.ComposeConfig{Root: root, Project: project}
		if out, err := c.Down(dctx); err != nil {
			t.Errorf("removing the test's compose fleet: %v\n%s", err, out)
		}
	})
	run := exec.CommandContext(ctx, lab, "-fleet", "compose", "-faults", "-faults-short",
		"-compose-dir", root, "-compose-project", project, "-out", out)
	run.Dir = root
	output, runErr := run.CombinedOutput()
	t.Logf("levee-lab -faults -faults-short:\n%s", output)

	raw, err := os.ReadFile(filepath.Join(out, "faults.json"))
	if err != nil {
		t.Fatalf("no faults.json (levee-lab: %v)", runErr)
	}
	var sums []Summary
	if err := json.Unmarshal(raw, &sums); err != nil {
		t.Fatal(err)
	}
	if len(sums) != len(Names) {
		t.Fatalf("%d faults judged, want %d (%s)", len(sums), len(Names), strings.Join(Names, ", "))
	}
	failed := 0
	for _, s := range sums {
		if !s.OK {
			failed++
			for _, c := range s.Checks {
				if !c.OK {
					t.Errorf("fault %s: %s: %s (want %s)", s.Name, c.What, c.Got, c.Want)
				}
			}
		}
		// The lab's books: every arrival was sent or dropped, every one sent
		// ended, and no answer was wrong.
		if s.Offered == 0 || s.Ended+s.Dropped != s.Offered || s.Wrong != 0 {
			t.Errorf("%s: offered %d, ended %d, dropped %d, wrong answers %d", s.Name, s.Offered, s.Ended, s.Dropped, s.Wrong)
		}
	}
	// Its exit status says the same.
	if (failed > 0) != (runErr != nil) {
		t.Errorf("levee-lab exited with %v while %d faults failed", runErr, failed)
	}
}
