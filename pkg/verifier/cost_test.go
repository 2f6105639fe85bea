package verifier

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// One hash that spans a stall (a worker held 2 s while its caller waited),
// and hashes that ran on after their callers left, do not lift the cost
// estimate: afterwards calls with deadlines of a few dozen normal hashes
// are admitted and answered. An estimate learnt from every run's wall time
// (an EWMA) rose to hundreds of milliseconds and refused them all, and,
// refusing all the work it could learn from, stayed there.
func TestStalledHashDoesNotPoisonAdmission(t *testing.T) {
	h := start(t, testConfig())
	before := h.expected()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Callers who left while their hash ran on for a second.
	for i := range 3 {
		tenant := fmt.Sprintf("left-%d", i)
		release := h.hold(tenant)
		lctx, lcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		wait := h.goHash(lctx, tenant)
		h.waitFor(tenant+" hashing", func() bool { return len(h.hashed()) > i })
		wantCode(t, wait(), codes.DeadlineExceeded)
		time.Sleep(time.Second)
		release()
		lcancel()
		h.waitFor(tenant+" done", func() bool { return h.metric("levee_verifier_late_total", nil) == float64(i+1) })
	}
	// The stall, with its caller waiting.
	release, wait := h.occupy("stalled")
	time.Sleep(2 * time.Second)
	release()
	wantOK(t, "stalled", wait())

	after := h.expected()
	t.Logf("expected hash %v before, %v after", before, after)
	if after > 2*before {
		t.Errorf("expected hash %v after the stall, was %v: the stall was learnt", after, before)
	}
	timeout := max(30*before, 200*time.Millisecond)
	for i := range 20 {
		cctx, ccancel := context.WithTimeout(ctx, timeout)
		err := h.goHash(cctx, fmt.Sprintf("after-%d", i))()
		ccancel()
		wantOK(t, fmt.Sprintf("call %d with a %v deadline after the stall", i, timeout), err)
	}
}

// Runs that span a stall of the whole process (a real SIGSTOP of this test
// binary, sent by a child shell) teach the cost model nothing, even when
// they are every recent sample: the detector sees the late ticker, and the
// estimate stays the calibrated one.
func TestSIGSTOPIsNotLearnt(t *testing.T) {
	cfg := testConfig()
	cfg.Workers = 3
	h := start(t, cfg)
	calibrated := h.metric("levee_verifier_calibrated_service_seconds", nil)

	var releases []func()
	var waits []func() error
	for i := range 3 {
		r, w := h.occupy(fmt.Sprintf("spans-%d", i))
		releases, waits = append(releases, r), append(waits, w)
	}
	pid := os.Getpid()
	stop := exec.Command("sh", "-c", fmt.Sprintf("sleep 0.2; kill -STOP %d; sleep 0.8; kill -CONT %d", pid, pid))
	if err := stop.Start(); err != nil {
		t.Fatal(err)
	}
	if err := stop.Wait(); err != nil { // returns once we run again
		t.Fatal(err)
	}
	for i, r := range releases {
		r()
		wantOK(t, fmt.Sprintf("spans-%d", i), waits[i]())
	}
	if got := h.metric("levee_verifier_stalls_total", nil); got < 1 {
		t.Fatalf("stalls_total = %v after an 0.8 s SIGSTOP, want ≥ 1", got)
	}
	if got := h.metric("levee_verifier_cost_stretch", nil); got != 1 {
		t.Errorf("cost stretch %v after three runs that spanned the stall, want 1 (not learnt)", got)
	}
	if got := h.metric("levee_verifier_expected_service_seconds", nil); got != calibrated {
		t.Errorf("expected hash %vs, calibrated %vs: want equal", got, calibrated)
	}
}
