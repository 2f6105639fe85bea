package gateway

import (
	"math"
	"time"
)

// fitCeiling keeps the limit's ceiling at what the verifiers can hold
// (upstream.Set.TotalSlots), scaled so that the classes below critical share
// exactly that and critical work has its reserve on top, in the extra slot
// each verifier keeps for it; and the limiter's target at queueTarget. It
// runs once a second and whenever a verifier's slots change.
func (g *Gateway) fitCeiling() {
	st := g.settings.Load()
	ceiling := int64(intOr(st.Ceiling, g.cfg.Admission.Ceiling))
	if fleet := g.verifiers.TotalSlots(); fleet > 0 {
		reserve := floatOr(st.CriticalReserve, g.cfg.Admission.CriticalReserve)
		ceiling = min(ceiling, int64(math.Ceil(float64(fleet)/(1-reserve)-1e-9)))
	}
	g.limiter.SetCeiling(int(ceiling))
	g.limiter.SetTarget(g.queueTarget())
}

// queueTarget is the verifier queue wait the limiter aims for: the
// configured target, or twice the wait a standing queue is sized to allow
// (VerifierQueueDelay plus the slowest serving verifier's service time)
// when that is longer, capped at the typical client timeout. A wait within
// the queue the gateway itself lets form is not overload; a target at or
// below it would shed until no call ever waited (docs/gateway.md, "Queue
// sizes").
func (g *Gateway) queueTarget() time.Duration {
	target := g.cfg.Admission.TargetQueueWait
	for _, v := range g.verifiers.List() {
		if v.Eligible() {
			target = max(target, 2*(g.cfg.VerifierQueueDelay+v.ServiceTime()))
		}
	}
	if limit := g.cfg.Autopilot.ClientTimeout; limit > 0 {
		target = min(target, max(limit, g.cfg.Admission.TargetQueueWait))
	}
	return target
}
