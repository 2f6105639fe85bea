package verifier

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/verify"
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
	// The detector's late tick runs once this process is scheduled again,
	// which on a busy machine can be after the releases above.
	h.waitFor("the stall detector to count the SIGSTOP", func() bool {
		return h.metric("levee_verifier_stalls_total", nil) >= 1
	})
	if got := h.metric("levee_verifier_cost_stretch", nil); got != 1 {
		t.Errorf("cost stretch %v after three runs that spanned the stall, want 1 (not learnt)", got)
	}
	if got := h.metric("levee_verifier_expected_service_seconds", nil); got != calibrated {
		t.Errorf("expected hash %vs, calibrated %vs: want equal", got, calibrated)
	}
}

// A caller chooses which stored hashes it sends; what it sends must not move
// the estimate everyone else's calls are admitted by. Forty valid Argon2id
// hashes of m = 8 KiB sent at once, then one tiny hash beside each honest
// one, leave the policy's estimate where honest runs put it. Before, the
// stretch was the median of the family's last 16 runs whatever their size:
// the tiny hashes took the policy's estimate from 98 ms to 712 ms (the
// clamp), and to 216 ms with one beside each honest call, refusing honest
// deadlines of twice the calibrated cost. (Wide hashes, p = 16, are
// checked on the model, pkg/verify: under the race detector their lanes
// gain nothing from the idle core.)
func TestCheapHashesDoNotSteerTheEstimate(t *testing.T) {
	// Judged by honest runs' speed over seconds: other packages' load
	// would move it as much as the tiny hashes did.
	testlock.Quiet(t)
	cfg := testConfig()
	cfg.Workers = 2
	cfg.QueueCapacity = 64
	cfg.Policy.Params = verify.Params{Memory: 16 << 10, Iterations: 1, Parallelism: 1}
	h := start(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	honest := storedArgon2("m=16384,t=1,p=1")
	tiny := storedArgon2("m=8,t=1,p=1")
	verifyAll := func(what string, stored ...string) {
		t.Helper()
		var waits []func() error
		for i, s := range stored {
			waits = append(waits, h.goVerify(ctx, fmt.Sprintf("%s-%d", what, i), s))
		}
		for i, w := range waits {
			wantOK(t, fmt.Sprintf("%s %d", what, i), w())
		}
	}
	for range 8 {
		verifyAll("honest", honest)
	}
	before := h.expected()
	t.Logf("policy estimate after honest runs: %v (calibrated %.1f ms)", before,
		1e3*h.metric("levee_verifier_calibrated_service_seconds", nil))

	flood := make([]string, 40)
	for i := range flood {
		flood[i] = tiny
	}
	verifyAll("tiny", flood...)
	if got := h.expected(); got > before*3/2 {
		t.Errorf("policy estimate %v after 40 tiny hashes, was %v", got, before)
	}
	for range 10 {
		verifyAll("tiny", tiny)
		verifyAll("honest", honest)
	}
	if got := h.expected(); got > before*3/2 {
		t.Errorf("policy estimate %v after a tiny hash beside each honest one, was %v", got, before)
	}
}
