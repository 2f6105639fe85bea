// Package metastable is the arithmetic of metastable failure: the load a
// fleet's callers offer once a trigger has made their attempts fail, and
// whether that load can hold the fleet in failure after the trigger is gone.
//
// A caller population offering A logical requests per second, making up to N
// attempts each, offers L = A(1 + p + … + p^(N−1)) attempts per second when
// each attempt fails with probability p; a retry budget of ratio r caps the
// retries at r per first attempt, so L ≤ A(1 + r). How p follows from L
// depends on the fleet:
//
//   - A queueing fleet (a plain FIFO server) that receives more than its
//     capacity C builds a queue without end, and every attempt waits past its
//     caller's timeout: p = 1 when L > C, else 0. Started from failure
//     (p = 1), it stays there exactly when A × min(N, 1 + r) > C: with
//     C = 1,000/s, A = 800/s and 3 attempts, 2,400 > 1,000.
//   - A fleet that sheds what it cannot serve at once, as Levee's admission
//     does, answers C per second and refuses the rest: p = 1 − C/L when
//     L > C. Its load after a trigger falls towards the largest fixed point
//     of L = A(1 + min(p + … + p^(N−1), r)). At a congested fixed point its
//     goodput A(1 − p^N) is all of C, which needs A > C: a fleet that sheds
//     cheaply has no congested state below capacity, however its callers
//     retry. It can still have congested states of its own making — an
//     estimate, a limit or a breaker stuck in a bad state — which this
//     arithmetic does not see and the lab (levee-lab) does.
//
// A congested fixed point exists when the load reached from total failure
// stays above C. Margin expresses it as a number: 1 − L/C, positive when the
// fleet comes back by itself (and then the headroom left), negative when its
// callers can keep it congested.
package metastable

import "math"

// Population is a group of callers that retry alike.
type Population struct {
	// Offered is its first attempts per second.
	Offered float64
	// Attempts is the most attempts one logical request makes (1: none
	// retried).
	Attempts int
	// RetryRatio caps its retries per first attempt (a retry budget); +Inf
	// or any value ≥ Attempts−1 means no budget.
	RetryRatio float64
}

// retries is the retries per first attempt when each attempt fails with
// probability p.
func (pop Population) retries(p float64) float64 {
	sum, term := 0.0, 1.0
	for i := 1; i < pop.Attempts; i++ {
		term *= p
		sum += term
	}
	if r := pop.RetryRatio; r >= 0 && r < sum {
		return r
	}
	return sum
}

// Fleet is what the arithmetic needs of a fleet.
type Fleet struct {
	// Capacity C is the answers per second it gives at saturation.
	Capacity float64
	// Sheds says whether it refuses what it cannot serve at once (Levee),
	// rather than queueing it past its callers' timeouts (a plain server).
	Sheds bool
}

// failure is the probability that an attempt fails at load l.
func (f Fleet) failure(l float64) float64 {
	if l <= f.Capacity || l <= 0 {
		return 0
	}
	if f.Sheds {
		return 1 - f.Capacity/l
	}
	return 1
}

// CongestedLoad is the attempts per second the populations settle at when
// every attempt has just failed (a trigger): the largest fixed point of
// L = load(failure(L)) at or below the load of total failure. It is at least
// the populations' first attempts and at most their Offered × Attempts.
func CongestedLoad(f Fleet, pops []Population) float64 {
	load := func(p float64) float64 {
		l := 0.0
		for _, pop := range pops {
			if pop.Offered > 0 && pop.Attempts >= 1 {
				l += pop.Offered * (1 + pop.retries(p))
			}
		}
		return l
	}
	h := func(l float64) float64 { return load(f.failure(l)) }
	lo, hi := load(0), load(1)
	if h(hi) >= hi || hi <= lo {
		return hi
	}
	// h never falls as L grows (more load, more failures, more retries),
	// h(lo) ≥ lo and h(hi) < hi: the largest fixed point is the highest
	// crossing. Scan down a geometric grid for the first L with h(L) ≥ L,
	// then bisect between it and the grid point above. (Iterating from the
	// top finds the same point, but needs thousands of steps when callers
	// make many attempts near capacity.)
	const steps = 1000
	above := hi
	for k := 1; k <= steps; k++ {
		x := hi * math.Pow(lo/hi, float64(k)/steps)
		if h(x) < x {
			above = x
			continue
		}
		a, b := x, above
		for range 100 {
			m := (a + b) / 2
			if h(m) >= m {
				a = m
			} else {
				b = m
			}
		}
		return a
	}
	return lo
}

// Margin is 1 − CongestedLoad/C: above zero the fleet returns from any
// trigger by itself, at or below zero its callers' retries can hold it in
// failure. NaN when the capacity is unknown (zero).
func Margin(f Fleet, pops []Population) float64 {
	if !(f.Capacity > 0) {
		return math.NaN()
	}
	return 1 - CongestedLoad(f, pops)/f.Capacity
}
