package report

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/leveehq/levee/lab/experiment"
	"github.com/leveehq/levee/lab/observe"
)

// tenantColors tell the tenants apart in a plot, in their order.
var tenantColors = []color.Color{
	color.RGBA{30, 90, 200, 255}, color.RGBA{200, 40, 40, 255}, color.RGBA{30, 140, 60, 255},
	color.RGBA{230, 140, 30, 255}, color.RGBA{120, 60, 160, 255}, color.RGBA{20, 20, 20, 255},
}

// tenantsLabel names a result's tenant set in file names: a0.3-b10x5 is
// tenant a at 0.3 C and tenant b at 10 C with hashes costing 5 × the
// policy's.
func tenantsLabel(r *experiment.Result) string {
	var parts []string
	for _, t := range r.Tenants {
		p := t.Tenant.Name + strconv.FormatFloat(t.Tenant.Load, 'g', -1, 64)
		if t.Tenant.Cost > 1 {
			p += "x" + strconv.Itoa(t.Tenant.Cost)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "-")
}

// variantLabel is a variant's name in file names: "fair-share off" is
// fair-share-off.
func variantLabel(v string) string { return strings.ReplaceAll(v, " ", "-") }

// plotTenants draws each tenant's offered and served logical requests per
// second (dashed: offered), with the capacity C for reference.
func plotTenants(r *experiment.Result, path string) error {
	n := r.Obs.To
	var ls []line
	for i, t := range r.Tenants {
		c := tenantColors[i%len(tenantColors)]
		offered := r.Series.TenantCol(i, func(x *observe.TenantSecond) float64 { return float64(x.Offered.Load()) })
		served := r.Series.TenantCol(i, func(x *observe.TenantSecond) float64 { return float64(x.Goodput.Load()) })
		ls = append(ls,
			line{name: t.Tenant.Name + " offered", ys: offered[:min(n, len(offered))], scale: 1, color: c, dashed: true},
			line{name: t.Tenant.Name + " served", ys: served[:min(n, len(served))], scale: 1, color: c})
	}
	title := fmt.Sprintf("%s fleet%s: tenants %s (C = %.0f/s)", r.Fleet, variantSuffix(r.Variant), experiment.FormatTenants(tenantsOf(r)), r.Capacity.PerSecond)
	return plotLines(title, "logical requests per second", ls, r.Trig, 0, r.Capacity.PerSecond, "capacity C", path)
}

func variantSuffix(v string) string {
	if v == "" {
		return ""
	}
	return ", " + v
}

func tenantsOf(r *experiment.Result) []experiment.Tenant {
	ts := make([]experiment.Tenant, len(r.Tenants))
	for i, t := range r.Tenants {
		ts[i] = t.Tenant
	}
	return ts
}

// lostLine says where a tenant's failed attempts went: the codes other
// than ok, with their counts.
func lostLine(t experiment.TenantVerdict) string {
	var parts []string
	for c, n := range t.Attempts {
		if c != int(observe.CodeOK) && n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", observe.CodeNames[c], n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

// writeTenantTable writes a row per run and tenant: what it was offered and
// served, its share of hashing time, how its lost attempts ended, and the
// targets (docs/lab.md, "Tenants").
func writeTenantTable(md *strings.Builder, rs []*experiment.Result) {
	var any bool
	for _, r := range rs {
		any = any || len(r.Tenants) > 0
	}
	if !any {
		return
	}
	fmt.Fprintf(md, "\n## Tenants\n\nOver the judged window (the baseline: after the warm-up). *served* is the share of the tenant's "+
		"logical requests arriving in it that succeeded; *hashing share* the tenant's share of hashing time, as the verifiers "+
		"count it where they do (`levee_verifier_tenant_work_seconds_total`), else the lab's estimate (served × hash cost, marked *est.*); "+
		"*attempts lost* how the tenant's attempts that failed ended, by the client's class (`attempts_<code>` in the CSV); "+
		"*gateway tenant_share* the gateway's refusals for a tenant over its share, all tenants together. "+
		"Targets: the quietest tenant served ≥ %.0f %%, goodput ≥ %.1f C, every tenant's hashing share within %.0f %% of an equal share.\n\n",
		100*experiment.QuietServedTarget, experiment.GoodputTarget, 100*experiment.ShareTolerance)
	fmt.Fprintf(md, "| fleet | seed | C | goodput ÷ C | tenant | offered (× C) | served | hashing share | attempts lost | gateway tenant_share | quiet ≥ %.0f %% | goodput ≥ %.1f C | hashing equal ± %.0f %% | lab CPU |\n",
		100*experiment.QuietServedTarget, experiment.GoodputTarget, 100*experiment.ShareTolerance)
	fmt.Fprintf(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		if len(r.Tenants) == 0 {
			continue
		}
		shares, verifiers := r.HashingShares()
		worst, equal := r.EqualHashing()
		equalCell := yesNo(equal)
		if !math.IsNaN(worst) {
			equalCell += fmt.Sprintf(" (%.1f %%)", 100*worst)
		}
		refusedShare := observe.SumKnown(r.Series.Scraped(observe.ColRefusedTenantShare), r.Base.From, r.Base.To)
		labCPU := observe.MeanKnown(r.Series.Scraped(observe.ColLabCPU), 0, r.Obs.To)
		for i, t := range r.Tenants {
			share := fmt.Sprintf("%.3f", shares[i])
			if !verifiers {
				share += " est."
			}
			fleet, seed, c, good, quiet, kept, eq, cpu, refused := "", "", "", "", "", "", "", "", ""
			if i == 0 {
				fleet = r.Fleet + variantSuffix(r.Variant)
				seed = strconv.FormatUint(r.Spec.Seed, 10)
				c = fmt.Sprintf("%.0f/s", r.Capacity.PerSecond)
				good = fmt.Sprintf("%.3f", r.GoodputOverC())
				quiet, kept, eq = yesNo(r.QuietServed()), yesNo(r.GoodputKept()), equalCell
				cpu = fmt.Sprintf("%.2f", labCPU)
				refused = fmtCount(refusedShare)
			}
			fmt.Fprintf(md, "| %s | %s | %s | %s | %s | %.2f | %.2f %% | %s | %s | %s | %s | %s | %s | %s |\n",
				fleet, seed, c, good, t.Tenant, t.Offered/r.Capacity.PerSecond, 100*t.ServedFraction, share, lostLine(t),
				refused, quiet, kept, eq, cpu)
		}
	}
	fmt.Fprintf(md, "\nRefused at the gateway and dropped at the verifiers over the baseline, by reason, all tenants together:\n\n")
	for _, r := range rs {
		if len(r.Tenants) > 0 {
			fmt.Fprintf(md, "- %s%s, %s, seed %d: %s\n", r.Fleet, variantSuffix(r.Variant), experiment.FormatTenants(tenantsOf(r)), r.Spec.Seed, refusalsLine(r))
		}
	}
}

// refusalsLine says where a run's calls were refused or dropped over its
// baseline, all tenants together: the gateway's refusals by reason and the
// verifiers' drops by reason (the scraped gw_refused_* and
// verifiers_dropped_* columns), those that happened.
func refusalsLine(r *experiment.Result) string {
	var parts []string
	for _, c := range r.Series.Columns() {
		name, gw := strings.CutPrefix(c, "gw_refused_")
		if !gw {
			if name, _ = strings.CutPrefix(c, "verifiers_dropped_"); name == c {
				continue
			}
		}
		n := observe.SumKnown(r.Series.Scraped(c), r.Base.From, r.Base.To)
		if n > 0 {
			where := "verifiers"
			if gw {
				where = "gateway"
			}
			parts = append(parts, fmt.Sprintf("%s %s %.0f", where, name, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

var tenantSummaryHeader = []string{"fleet", "variant", "tenants", "trigger", "duration_s", "load", "seed", "capacity_per_s",
	"goodput_per_s", "goodput_over_c", "tenant", "tenant_load", "kind", "cost", "offered_per_s", "served_per_s",
	"served_fraction", "work_share_estimate", "work_share_verifiers", "recovered", "recovery_s", "stuck",
	"attempts_lost", "gateway_refused_tenant_share", "refused_and_dropped", "verifier_arrivals", "quiet_served_ok", "goodput_ok",
	"hashing_equal_worst", "hashing_equal_ok", "lab_cpu_cores", "host_cpu_cores", "other_cpu_cores"}

// writeTenantSummary writes one row per run and tenant.
func writeTenantSummary(w io.Writer, rs []*experiment.Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(tenantSummaryHeader); err != nil {
		return err
	}
	f := func(v float64, prec int) string {
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'f', prec, 64)
	}
	for _, r := range rs {
		e := r.Spec
		worst, equal := r.EqualHashing()
		refused := observe.SumKnown(r.Series.Scraped(observe.ColRefusedTenantShare), r.Base.From, r.Base.To)
		for _, t := range r.Tenants {
			rec := ""
			if t.Recovered {
				rec = f(t.Recovery, 0)
			}
			arrivals := observe.SumKnown(r.Series.Scraped(observe.TenantArrivalsColumn(t.Tenant.Name)), r.Base.From, r.Base.To)
			row := []string{r.Fleet, r.Variant, experiment.FormatTenants(tenantsOf(r)), string(e.Trigger.Kind),
				f(e.TriggerDuration().Seconds(), 0), f(e.Load, 2), strconv.FormatUint(e.Seed, 10), f(r.Capacity.PerSecond, 1),
				f(r.Verdict.Baseline, 1), f(r.GoodputOverC(), 4), t.Tenant.Name, f(t.Tenant.Load, 2), string(t.Tenant.Kind),
				strconv.Itoa(t.Tenant.Cost), f(t.Offered, 1), f(t.Served, 1), f(t.ServedFraction, 4), f(t.WorkShare, 4),
				f(t.VerifierWorkShare, 4), strconv.FormatBool(t.Recovered), rec, strconv.FormatBool(t.Stuck), lostLine(t),
				f(refused, 0), refusalsLine(r), f(arrivals, 0), strconv.FormatBool(r.QuietServed()), strconv.FormatBool(r.GoodputKept()),
				f(worst, 4), strconv.FormatBool(equal),
				f(observe.MeanKnown(r.Series.Scraped(observe.ColLabCPU), 0, r.Obs.To), 2),
				f(observe.MeanKnown(r.Series.Scraped(observe.ColHostCPU), 0, r.Obs.To), 2),
				f(observe.MeanKnown(r.Series.OtherCPU(), 0, r.Obs.To), 2)}
			if err := cw.Write(row); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
