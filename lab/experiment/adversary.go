package experiment

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/verify"
)

// AdversaryKind is what a careless or hostile caller does with requests
// that are each valid on their own.
type AdversaryKind string

// The adversaries.
const (
	// NoAdversary: the populations of the mix alone.
	NoAdversary AdversaryKind = ""
	// Cheap sends valid Argon2id hashes far below any real policy
	// (m = 8 KiB, t = 1): each costs the fleet almost nothing, and an
	// estimate that counted runs rather than work would think the fleet
	// fast.
	Cheap AdversaryKind = "cheap"
	// Tight sends the lab's hash with a deadline of Adversary.Deadline,
	// near or under what a hash and the queue ahead take.
	Tight AdversaryKind = "tight"
	// Cancel sends the lab's hash and cancels the call Adversary.CancelAfter
	// after sending it.
	Cancel AdversaryKind = "cancel"
)

// AdversaryKinds are the adversaries, in the order reports list them.
var AdversaryKinds = []AdversaryKind{Cheap, Tight, Cancel}

// Adversary is a share of the calls sent beside the honest populations by
// one caller that chooses its hashes, deadlines or cancellations badly or
// on purpose. Its calls are single attempts, are not recorded in the
// series (the honest clients' record, which verdicts judge), and are
// counted in Result.Adversary.
type Adversary struct {
	Kind AdversaryKind
	// Share is the adversary's share of all calls, in [0, 0.9]: beside
	// honest arrivals at rate r it sends r × Share / (1 − Share).
	Share float64
	// Deadline is a Tight call's deadline.
	Deadline time.Duration
	// CancelAfter is how long after sending a Cancel call is cancelled.
	CancelAfter time.Duration
}

// DefaultAdversary is none; its Tight and Cancel figures are those of the
// reproductions: 15 ms deadlines, cancelled after 30 ms.
func DefaultAdversary() Adversary {
	return Adversary{Share: 0.1, Deadline: 15 * time.Millisecond, CancelAfter: 30 * time.Millisecond}
}

// Validate reports every invalid field.
func (a Adversary) Validate() error {
	if a.Kind == NoAdversary {
		return nil
	}
	var errs []string
	known := false
	for _, k := range AdversaryKinds {
		known = known || k == a.Kind
	}
	if !known {
		errs = append(errs, fmt.Sprintf("unknown adversary %q (want cheap, tight or cancel)", a.Kind))
	}
	if !(a.Share > 0 && a.Share <= 0.9) {
		errs = append(errs, fmt.Sprintf("adversary share must be in (0, 0.9], got %v", a.Share))
	}
	if a.Kind == Tight && a.Deadline <= 0 {
		errs = append(errs, fmt.Sprintf("tight adversary: deadline must be positive, got %v", a.Deadline))
	}
	if a.Kind == Cancel && a.CancelAfter <= 0 {
		errs = append(errs, fmt.Sprintf("cancel adversary: cancel-after must be positive, got %v", a.CancelAfter))
	}
	if len(errs) > 0 {
		return fmt.Errorf("clients: %s", strings.Join(errs, "; "))
	}
	return nil
}

// AdversaryCounts is how the adversary's calls ended.
type AdversaryCounts struct {
	Kind   AdversaryKind
	Sent   int64
	ByCode map[codes.Code]int64
}

// String is the counts in one line.
func (c AdversaryCounts) String() string {
	var parts []string
	for code := range codes.Code(17) {
		if n := c.ByCode[code]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", code, n))
		}
	}
	return fmt.Sprintf("adversary %s: %d calls (%s)", c.Kind, c.Sent, strings.Join(parts, ", "))
}

// cheapRequest is a valid Argon2id hash of m = 8 KiB, t = 1 and its
// password.
func cheapRequest() (Request, error) {
	return NewRequest(verify.Params{Memory: 8, Iterations: 1, Parallelism: 1})
}

// adversary sends its calls on the population's connections, unrecorded.
type adversary struct {
	cfg  Adversary
	q    Request
	rpcs []verifyv1.VerifyServiceClient
	sent atomic.Int64
	by   [17]atomic.Int64
}

// drive sends open-loop Poisson arrivals at rate(t) × Share / (1 − Share)
// for d (see poisson), then waits for every call to end.
func (a *adversary) drive(ctx context.Context, rng *rand.Rand, start time.Time, rate func(time.Duration) float64, d time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	factor := a.cfg.Share / (1 - a.cfg.Share)
	n := 0
	poisson(ctx, rng, start, func(t time.Duration) float64 { return rate(t) * factor }, d, func(time.Time) {
		rpc := a.rpcs[n%len(a.rpcs)]
		n++
		wg.Go(func() { a.one(ctx, rpc) })
	})
}

func (a *adversary) one(ctx context.Context, rpc verifyv1.VerifyServiceClient) {
	var cctx context.Context
	var cancel context.CancelFunc
	switch a.cfg.Kind {
	case Tight:
		cctx, cancel = context.WithTimeout(ctx, a.cfg.Deadline)
	case Cancel:
		cctx, cancel = context.WithCancel(ctx)
		t := time.AfterFunc(a.cfg.CancelAfter, cancel)
		defer t.Stop()
	default:
		cctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	}
	defer cancel()
	a.sent.Add(1)
	_, err := rpc.Verify(cctx, a.q.verify())
	if c := status.Code(err); int(c) < len(a.by) {
		a.by[c].Add(1)
	}
}

func (a *adversary) counts() *AdversaryCounts {
	c := &AdversaryCounts{Kind: a.cfg.Kind, Sent: a.sent.Load(), ByCode: map[codes.Code]int64{}}
	for i := range a.by {
		if n := a.by[i].Load(); n > 0 {
			c.ByCode[codes.Code(i)] = n
		}
	}
	return c
}
