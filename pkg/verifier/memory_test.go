package verifier

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/residentheap"
	"github.com/leveehq/levee/pkg/workpool"
)

// A burst of stored hashes of m = 1 MiB against a 3 MiB budget on four
// workers: three hash at once, never four, whatever the queue holds. The
// hashes are held on their workers (the harness's gate) so that they
// overlap for certain; the in-use gauge is sampled throughout and the
// pool's peak checked at the end.
func TestMemoryBudgetBoundsConcurrentHashes(t *testing.T) {
	const budget = 3 << 20
	cfg := testConfig()
	cfg.Workers = 4
	cfg.QueueCapacity = 32
	cfg.MemoryBudget = budget
	h := start(t, cfg)

	stored := storedArgon2("m=1024,t=1,p=1")
	hashesBefore := h.hashCount()
	release := h.hold("big")

	stop := make(chan struct{})
	sampled := make(chan float64, 1)
	go func() {
		var peak float64
		defer func() { sampled <- peak }()
		for {
			peak = max(peak, h.metric("levee_verifier_memory_in_use_bytes", nil))
			select {
			case <-stop:
				return
			default:
			}
		}
	}()

	const calls = 20
	var waits []func() error
	for range calls {
		waits = append(waits, h.goVerify(context.Background(), "big", stored))
	}
	h.waitQueued(calls - 3)
	st := h.srv.pool.Stats()
	if st.Busy != 3 || st.MemoryInUse != budget {
		t.Errorf("with %d calls of 1 MiB queued against a 3 MiB budget on 4 workers: busy=%d in use=%d, want 3 and %d",
			calls, st.Busy, st.MemoryInUse, budget)
	}
	if got := h.metric("levee_verifier_memory_budget_bytes", nil); got != budget {
		t.Errorf("levee_verifier_memory_budget_bytes = %v, want %d", got, budget)
	}
	// The ORCA load report tells balancers the budget is full.
	if got := h.srv.load.ServerMetrics().MemUtilization; got != 1 {
		t.Errorf("ORCA mem_utilization with the budget full = %v, want 1", got)
	}
	release()
	for i, w := range waits {
		wantOK(t, fmt.Sprintf("call %d", i), w())
	}
	close(stop)
	if peak := <-sampled; peak > budget || peak == 0 {
		t.Errorf("sampled levee_verifier_memory_in_use_bytes peaked at %v, want in (0, %d]", peak, budget)
	}
	// The policy's 64 KiB hashes: the four workers, not the budget, bound them.
	if got := h.srv.slots(); got != 4 {
		t.Errorf("slots = %d, want the 4 workers", got)
	}
	if peak := h.srv.pool.Stats().PeakMemory; peak != budget {
		t.Errorf("pool PeakMemory = %d, want exactly the budget %d (three overlapping, never four)", peak, budget)
	}
	if got := h.hashCount() - hashesBefore; got != calls {
		t.Errorf("hashes = %v, want %d", got, calls)
	}
}

// A stored hash that needs more memory than the whole budget is refused at
// once with FAILED_PRECONDITION naming both sizes, without a pushback
// trailer, counted as over_memory, and never hashed.
func TestOverBudgetHashRefusedNeverHashed(t *testing.T) {
	cfg := testConfig()
	cfg.MemoryBudget = 1 << 20
	h := start(t, cfg)
	hashesBefore := h.hashCount()

	var trailer metadata.MD
	_, err := h.verify.Verify(as(context.Background(), "huge"), &verifyv1.VerifyRequest{
		EncodedHash: storedArgon2("m=2048,t=1,p=1"), Password: []byte("pw"),
	}, grpc.Trailer(&trailer))
	st := wantCode(t, err, codes.FailedPrecondition)
	for _, want := range []string{"2MiB", "1MiB", "memory budget"} {
		if !strings.Contains(st.Message(), want) {
			t.Errorf("message %q does not name %q", st.Message(), want)
		}
	}
	if pb := trailer.Get(callmeta.PushbackKey); len(pb) != 0 {
		t.Errorf("pushback trailer %v on a refusal no retry can fix", pb)
	}
	if got := h.hashCount() - hashesBefore; got != 0 {
		t.Errorf("hashes = %v after the refusal, want 0", got)
	}
	if got := h.metric("levee_verifier_dropped_total", map[string]string{"reason": reasonTooBig}); got != 1 {
		t.Errorf("dropped{reason=%s} = %v, want 1", reasonTooBig, got)
	}
	for _, tenant := range h.hashed() {
		if tenant == "huge" {
			t.Errorf("the over-budget hash was hashed")
		}
	}

	// One that fits exactly is hashed; the workers trailer says how many
	// policy hashes (64 KiB) the budget holds: the one worker bounds it.
	_, err = h.verify.Verify(as(context.Background(), "fits"), &verifyv1.VerifyRequest{
		EncodedHash: storedArgon2("m=1024,t=1,p=1"), Password: []byte("pw"),
	}, grpc.Trailer(&trailer))
	wantOK(t, "hash of exactly the budget", err)
	if got := trailer.Get(callmeta.WorkersKey); len(got) != 1 || got[0] != "1" {
		t.Errorf("%s = %v, want [1]", callmeta.WorkersKey, got)
	}
}

func TestConfigMemoryBudget(t *testing.T) {
	cfg := testConfig() // policy m = 64 KiB
	cfg.MemoryBudget = 32 << 10
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "MemoryBudget 32KiB (configured) cannot hold one hash of the policy (m = 64 KiB") {
		t.Errorf("Validate with a budget below one policy hash: %v", err)
	}
	if _, err := New(cfg); err == nil {
		t.Error("New accepted a budget below one policy hash")
	}
	cfg.MemoryBudget = -1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "MemoryBudget must not be negative") {
		t.Errorf("Validate with a negative budget: %v", err)
	}
	cfg.MemoryBudget = 64 << 10
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate with room for exactly one policy hash: %v", err)
	}
	if b, src := cfg.ResolveMemoryBudget(); b != 64<<10 || src != "configured" {
		t.Errorf("ResolveMemoryBudget = %d, %q; want 65536, configured", b, src)
	}
}

// Where the budget holds fewer policy hashes than there are workers, the
// workers trailer (which bounds what a gateway sends at once) says so.
func TestSlotsBoundedByMemory(t *testing.T) {
	cfg := testConfig() // policy m = 64 KiB
	cfg.Workers = 4
	cfg.MemoryBudget = 130 << 10 // two policy hashes and change
	h := start(t, cfg)
	var trailer metadata.MD
	_, err := h.verify.Hash(as(context.Background(), "t"), &verifyv1.HashRequest{Password: []byte("pw")}, grpc.Trailer(&trailer))
	wantOK(t, "Hash", err)
	if got := trailer.Get(callmeta.WorkersKey); len(got) != 1 || got[0] != "2" {
		t.Errorf("%s = %v, want [2]", callmeta.WorkersKey, got)
	}
}

// The soft memory limit covers what the pool admits: twice the Argon2
// arrays that may live at once (the running hashes' and the previous
// round's garbage) plus the base, counting stored hashes as wide as the
// limits accept, not only the policy's. It was computed from the policy's
// m: four workers and a 1 GiB budget got 576 MiB, while four stored hashes
// at the 256 MiB cap hold 1 GiB at once, so the collector and the scavenger
// ran on every hash and each one faulted its array in again. And it never
// exceeds twice the budget plus the base, which DefaultMemoryBudget sizes to
// fit the container.
func TestResidentHeapLimitCoversAdmittedArrays(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
		budget  int64
	}{
		{"budget holds every worker's widest hash", 4, 1 << 30},
		{"budget holds one widest hash", 4, 300 << 20},
		{"budget far above the workers", 2, 8 << 30},
		{"one worker", 1, 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig() // policy m = 64 MiB, stored hashes up to 256 MiB
			cfg.Workers = tc.workers
			cfg.MemoryBudget = tc.budget
			widest := int64(cfg.Limits.MaxMemoryKiB) << 10
			admitted := admittedBy(t, cfg, widest)
			limit := cfg.ResidentHeapLimit()
			if need := 2*admitted + residentheap.Base; limit < need {
				t.Errorf("soft limit %d MiB, want ≥ %d MiB: the pool admits %d MiB of %d MiB arrays at once",
					limit>>20, need>>20, admitted>>20, widest>>20)
			}
			if most := 2*tc.budget + residentheap.Base; limit > most {
				t.Errorf("soft limit %d MiB, want ≤ %d MiB (twice the budget plus the base)", limit>>20, most>>20)
			}
		})
	}
}

// admittedBy submits twice cfg.Workers jobs of mem bytes each to a pool
// sized as a verifier built from cfg sizes its own, and returns the most
// memory they held at once.
func admittedBy(t *testing.T, cfg Config, mem int64) int64 {
	t.Helper()
	budget, _ := cfg.ResolveMemoryBudget()
	pool, err := workpool.New(workpool.Config{Workers: cfg.Workers, QueueCapacity: 4 * cfg.Workers,
		MaxQueueWait: time.Hour, LIFOAfter: time.Hour, MemoryBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release := make(chan struct{})
	var wg sync.WaitGroup
	n := 2 * cfg.Workers
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = pool.Submit(ctx, time.Millisecond, mem, func() { <-release })
		}()
	}
	for st := pool.Stats(); st.Busy+st.Queued < n || st.Busy == 0; st = pool.Stats() {
		if ctx.Err() != nil {
			t.Fatalf("jobs not all in the pool: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	peak := pool.Stats().PeakMemory
	close(release)
	wg.Wait()
	return peak
}
