package gateway

import (
	"context"

	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/fairshare"
)

// call is what the gateway knows of one call to Verify or Hash, worked out
// once when the call arrives and passed down the forwarding pipeline: every
// stage (admission, pick, hop, retry, accounting) reads the call's class
// here instead of deriving it again from the facts, so that no two stages
// can disagree on what class a call is in.
type call struct {
	facts callmeta.Facts // as the caller sent them (callmeta.FromContext)

	// retry is true for an attempt after the caller's first
	// (Facts.AttemptClass "retry"): shed before first attempts, never
	// retried again in the fleet, and counted apart in the retry ratios.
	retry bool
	// critical is true for a critical first attempt, the class that may
	// use the limiter's critical reserve and the extra slot each verifier
	// keeps (slotQueue).
	critical bool
	// class is the call's class for the edge limiter.
	class admission.Class
	// metrics are the call's class's counters (priority × attempt class),
	// looked up once.
	metrics *classMetrics
	// share is the call's hold on its tenant's share, once admitted.
	share fairshare.Ticket
}

// newCall reads the facts the server interceptor stored in ctx and works
// out the rest of the call from them.
func (g *Gateway) newCall(ctx context.Context) call {
	f := callmeta.FromContext(ctx)
	// A tenant's weight is the gateway's setting, never a caller's word:
	// admit sets it from the shares.
	f.Weight = 0
	retry := f.AttemptClass() == callmeta.RetryAttempt
	return call{
		facts:    f,
		retry:    retry,
		critical: f.Priority == callmeta.Critical && !retry,
		class:    admission.Class{Priority: f.Priority, Retry: retry},
		metrics:  g.metrics.forClass(f.Priority, retry),
	}
}

// slotQueue is how many slots the call may use on a verifier beyond its
// workers and queue: one for a critical first attempt, so that critical
// work still finds room when every other slot is held.
func (c call) slotQueue() int64 {
	if c.critical {
		return 1
	}
	return 0
}

// retryFacts are the facts of the call's in-fleet retry: the attempt after
// the caller's.
func (c call) retryFacts() callmeta.Facts {
	f := c.facts
	f.Attempt = max(f.Attempt, 1) + 1
	return f
}
