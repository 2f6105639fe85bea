package experiment

import (
	"math"

	"github.com/leveehq/levee/lab/observe"
)

// TenantVerdict is what one experiment says of one tenant, over the
// baseline window (a run without a trigger is all baseline after its
// warm-up) unless said otherwise.
type TenantVerdict struct {
	Tenant Tenant
	// Offered and Served are the tenant's logical requests per second that
	// arrived and that succeeded (by the second they ended).
	Offered, Served float64
	// ServedFraction is the share of the tenant's logical requests arriving
	// in the window that succeeded: what the tenant's users saw.
	ServedFraction float64
	// Work is the hashing the tenant's successes cost, per second, in
	// hashes of the policy (Served × Cost): the lab's own estimate of its
	// hashing time, blind to hashes computed for callers that had left.
	// WorkShare is its share of all tenants' Work.
	Work, WorkShare float64
	// VerifierWorkShare is the tenant's share of the seconds the
	// verifiers' workers spent hashing for the tenants, as they count it;
	// NaN when the verifiers do not export it.
	VerifierWorkShare float64
	// Attempts counts the tenant's attempts in the window by how they
	// ended (observe.CodeNames): where its calls were lost.
	Attempts [observe.NCodes]int64
	// Recovered, Recovery and Stuck judge the tenant's recovery after the
	// trigger as Verdict does for all arrivals, against the tenant's own
	// baseline share.
	Recovered bool
	Recovery  float64 // seconds
	Stuck     bool
}

// JudgeTenants computes each tenant's verdict from a series that recorded
// them (observe.Series.SetTenants), in the order of ts.
func JudgeTenants(s *observe.Series, ts []Tenant, base, trig, obs Window, afterWindow int) []TenantVerdict {
	if len(ts) == 0 || len(s.Tenants()) != len(ts) {
		return nil
	}
	out := make([]TenantVerdict, len(ts))
	total := 0.0
	for i, t := range ts {
		col := func(f func(*observe.TenantSecond) int64) []float64 {
			return s.TenantCol(i, func(x *observe.TenantSecond) float64 { return float64(f(x)) })
		}
		goodput := col(func(x *observe.TenantSecond) int64 { return x.Goodput.Load() })
		arrOK := col(func(x *observe.TenantSecond) int64 { return x.ArrivedOK.Load() })
		arrEnded := col(func(x *observe.TenantSecond) int64 { return x.ArrivedEnded.Load() })
		v := verdictOf(goodput, arrOK, arrEnded, base, trig, obs, afterWindow)
		tv := TenantVerdict{Tenant: t, Served: v.Baseline, ServedFraction: v.BaselineRatio,
			Offered:   observe.Mean(col(func(x *observe.TenantSecond) int64 { return x.Offered.Load() }), base.From, base.To),
			Recovered: v.Recovered, Recovery: v.Recovery.Seconds(), Stuck: v.Stuck}
		tv.Work = tv.Served * float64(max(t.Cost, 1))
		total += tv.Work
		for sec := base.From; sec < base.To; sec++ {
			if x := s.Tenant(sec, i); x != nil {
				for c := range tv.Attempts {
					tv.Attempts[c] += x.Codes[c].Load()
				}
			}
		}
		tv.VerifierWorkShare = math.NaN()
		out[i] = tv
	}
	verifier := make([]float64, len(ts))
	verifierTotal := 0.0
	for i, t := range ts {
		out[i].WorkShare = math.NaN()
		if total > 0 {
			out[i].WorkShare = out[i].Work / total
		}
		verifier[i] = observe.SumKnown(s.Scraped(observe.TenantWorkColumn(t.Name)), base.From, base.To)
		verifierTotal += verifier[i]
	}
	if !math.IsNaN(verifierTotal) && verifierTotal > 0 {
		for i := range out {
			out[i].VerifierWorkShare = verifier[i] / verifierTotal
		}
	}
	return out
}

// GoodputOverC is the fleet's goodput over the baseline as a multiple of
// the capacity C measured before the run.
func (r *Result) GoodputOverC() float64 {
	if r.Capacity.PerSecond <= 0 {
		return math.NaN()
	}
	return r.Verdict.Baseline / r.Capacity.PerSecond
}

// The tenant experiments' targets (docs/lab.md, "Tenants").
const (
	// QuietServedTarget is the share of its logical requests the quietest
	// tenant must have served beside a flood.
	QuietServedTarget = 0.99
	// GoodputTarget is the fleet's goodput, × C, that sharing must keep.
	GoodputTarget = 0.9
	// ShareTolerance is how far, relative to the equal share 1/n, each
	// tenant's share of hashing time may be from it: within 5 % of a half
	// is 0.475 to 0.525 for two tenants.
	ShareTolerance = 0.05
)

// QuietTenant is the verdict of the tenant offering the least load (the
// first of those, on a tie); false without tenants.
func (r *Result) QuietTenant() (TenantVerdict, bool) {
	if len(r.Tenants) == 0 {
		return TenantVerdict{}, false
	}
	q := r.Tenants[0]
	for _, t := range r.Tenants[1:] {
		if t.Tenant.Load < q.Tenant.Load {
			q = t
		}
	}
	return q, true
}

// QuietServed says whether the quietest tenant had QuietServedTarget of its
// logical requests served.
func (r *Result) QuietServed() bool {
	q, ok := r.QuietTenant()
	return ok && q.ServedFraction >= QuietServedTarget
}

// GoodputKept says whether the fleet's goodput was at least GoodputTarget
// × C.
func (r *Result) GoodputKept() bool { return r.GoodputOverC() >= GoodputTarget }

// HashingShares are the tenants' shares of hashing time: the verifiers'
// own count when every tenant has one, else the lab's estimate (served ×
// cost); verifiers says which.
func (r *Result) HashingShares() (shares []float64, verifiers bool) {
	verifiers = len(r.Tenants) > 0
	for _, t := range r.Tenants {
		verifiers = verifiers && !math.IsNaN(t.VerifierWorkShare)
	}
	for _, t := range r.Tenants {
		if verifiers {
			shares = append(shares, t.VerifierWorkShare)
		} else {
			shares = append(shares, t.WorkShare)
		}
	}
	return shares, verifiers
}

// EqualHashing is the largest distance of a tenant's share of hashing time
// from the equal share 1/n, relative to it, and whether every tenant is
// within ShareTolerance; false without tenants or shares.
func (r *Result) EqualHashing() (worst float64, ok bool) {
	shares, _ := r.HashingShares()
	if len(shares) == 0 {
		return math.NaN(), false
	}
	fair := 1 / float64(len(shares))
	for _, s := range shares {
		if math.IsNaN(s) {
			return math.NaN(), false
		}
		worst = math.Max(worst, math.Abs(s-fair)/fair)
	}
	return worst, worst <= ShareTolerance
}
