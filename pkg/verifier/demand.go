package verifier

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/wellknown"
	"github.com/leveehq/levee/pkg/workpool"
)

// DemandWindow is the span over which levee_verifier_demand_ratio averages
// the work that arrived: long enough that a burst of a second is a tenth
// of it, short enough that an autoscaler sees a change within a scrape or
// two.
const DemandWindow = 10 * time.Second

// demand measures the work arriving at the node against the work it can
// do: the expected service time of every well-formed Verify and Hash call
// that arrived (admitted, refused or dropped alike) over the last
// DemandWindow of whole seconds, per second, divided by the workers taking
// work. 1 means calls arrive exactly as fast as the workers can hash them;
// 2 means twice as fast.
//
// It is a rate of arrivals, not a count of what waits: it does not grow
// while a queue builds nor fall while one drains, and shedding, LIFO or
// deadline drops do not move it. That is what an autoscaler may follow
// without oscillating (queue depth rises after it scales too late and
// falls after it scaled too much). The current, partial second is left
// out so that the value does not saw-tooth within each second.
type demand struct {
	pool   *workpool.Pool
	v      *verify.Verifier
	model  *verify.CostModel
	policy *verify.Hash
	now    func() time.Time

	mu   sync.Mutex
	secs [demandSeconds + 1]demandSecond // a ring: the current second and demandSeconds before it
}

const demandSeconds = int(DemandWindow / time.Second)

// demandSecond is the work-seconds that arrived in one second (Unix time).
type demandSecond struct {
	unix int64
	work float64
}

func newDemand(pool *workpool.Pool, v *verify.Verifier, model *verify.CostModel, policy *verify.Hash,
	now func() time.Time) *demand {
	d := &demand{pool: pool, v: v, model: model, policy: policy, now: now}
	for i := range d.secs {
		d.secs[i].unix = -1 // no second: before anything arrived
	}
	return d
}

// add records work-seconds arriving now.
func (d *demand) add(work time.Duration) {
	sec := d.now().Unix()
	d.mu.Lock()
	slot := &d.secs[sec%int64(len(d.secs))]
	if slot.unix != sec {
		*slot = demandSecond{unix: sec}
	}
	slot.work += work.Seconds()
	d.mu.Unlock()
}

// ratio is the demand over capacity described on demand.
func (d *demand) ratio() float64 {
	last := d.now().Unix() - 1 // the newest whole second
	var work float64
	d.mu.Lock()
	for _, s := range d.secs {
		if s.unix <= last && s.unix > last-int64(demandSeconds) {
			work += s.work
		}
	}
	d.mu.Unlock()
	return work / DemandWindow.Seconds() / float64(max(d.pool.Stats().Active, 1))
}

// cost is the expected service time of a call's hash: the stored hash's
// for Verify (the policy's for no_user), the policy's for Hash. A request
// that does not parse is no work: it is refused before it takes a worker.
// Parsing a PHC string is a few microseconds, so counting stays cheap on
// the shed path.
func (d *demand) cost(req any) (time.Duration, bool) {
	switch r := req.(type) {
	case *verifyv1.VerifyRequest:
		if r.GetNoUser() {
			return d.model.Estimate(d.policy), true
		}
		h, err := d.v.Parse(r.GetEncodedHash())
		if err != nil {
			return 0, false
		}
		return d.model.Estimate(h), true
	case *verifyv1.HashRequest:
		return d.model.Estimate(d.policy), true
	}
	return 0, false
}

// interceptor records the demand of each Verify and Hash call as it
// arrives, before the handler admits or refuses it.
func (d *demand) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		switch info.FullMethod {
		case verifyv1.VerifyService_Verify_FullMethodName, verifyv1.VerifyService_Hash_FullMethodName:
			if c, ok := d.cost(req); ok {
				d.add(c)
			}
		}
		return handler(ctx, req)
	}
}

// collector exports ratio as wellknown.MetricVerifierDemand.
func (d *demand) collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: wellknown.MetricVerifierDemand,
		Help: "Work arriving over the work the node can do: expected service seconds of the Verify and Hash calls that arrived (admitted or refused) per second, over the last 10 whole seconds, divided by the active workers. 1: arrivals match capacity. The autoscaling signal.",
	}, d.ratio)
}
