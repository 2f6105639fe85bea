package observe

import (
	"context"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leveehq/levee/internal/promscrape"
	"github.com/leveehq/levee/lab/drive"
	"github.com/leveehq/levee/pkg/wellknown"
)

// Scraped column names the verdicts and reports read.
const (
	ColWasted   = "wasted"
	ColQueueP50 = "queue_wait_p50_ms"
	ColQueueP99 = "queue_wait_p99_ms"
	ColLabCPU   = "lab_cpu"
	ColHostCPU  = "host_cpu"
	ColLimit    = "gw_limit"
	// ColMarginCapacity is the capacity behind the gateway's bistability
	// margin.
	ColMarginCapacity = "gw_margin_capacity"
	// ColRefusedTenantShare counts the gateway's refusals of calls whose
	// tenant was over its share (reason tenant_share).
	ColRefusedTenantShare = "gw_refused_tenant_share"
)

// TenantArrivalsColumn is the column of the calls the verifiers received
// for tenant, summed over verifiers (their attempts counter by tenant).
func TenantArrivalsColumn(tenant string) string { return "verifiers_tenant_" + tenant + "_arrivals" }

// TenantWorkColumn is the column of the seconds the verifiers' workers
// spent hashing for tenant, summed over verifiers.
func TenantWorkColumn(tenant string) string { return "verifiers_tenant_" + tenant + "_work_s" }

// fetchMetrics reads a Prometheus text page.
func fetchMetrics(ctx context.Context, url string) (promscrape.Families, error) {
	return promscrape.Fetch(ctx, url)
}

// sumOf sums the samples of metric name whose labels include labels.
func sumOf(mfs promscrape.Families, name string, labels map[string]string) float64 {
	return mfs.Sum(name, labels)
}

// countWhere counts the samples of gauge name equal to v (none when the
// gauge has no series at all).
func countWhere(mfs promscrape.Families, name string, v float64) float64 {
	mf := mfs[name]
	n := 0.0
	for _, m := range mf.GetMetric() {
		if m.GetGauge().GetValue() == v {
			n++
		}
	}
	return n
}

// buckets merges the cumulative buckets of histogram name (every series):
// upper bound → count.
func buckets(mfs promscrape.Families, name string) map[float64]float64 {
	mf, ok := mfs[name]
	if !ok {
		return nil
	}
	out := map[float64]float64{}
	for _, m := range mf.GetMetric() {
		inf := false
		for _, b := range m.GetHistogram().GetBucket() {
			out[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			inf = inf || math.IsInf(b.GetUpperBound(), 1)
		}
		if !inf { // the text format lists +Inf; the protobuf one need not
			out[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out
}

// quantile of cumulative bucket counts (upper bound → count), linearly
// interpolated within a bucket as Prometheus' histogram_quantile does; NaN
// when empty.
func quantile(q float64, cum map[float64]float64) float64 {
	bounds := make([]float64, 0, len(cum))
	for b := range cum {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return math.NaN()
	}
	total := cum[bounds[len(bounds)-1]]
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lo, below := 0.0, 0.0
	for _, b := range bounds {
		c := cum[b]
		if c >= rank {
			if math.IsInf(b, 1) {
				return lo // beyond the last finite bound: report it
			}
			if c == below {
				return b
			}
			return lo + (b-lo)*(rank-below)/(c-below)
		}
		lo, below = b, c
	}
	return lo
}

// Scraper reads every member's metrics once a second and turns them into
// per-second columns: gauges as read, counters as the change since the last
// read, histograms as quantiles of the change. Reads must not overlap.
type Scraper struct {
	f       *drive.Fleet
	keys    []string // budget keys to show the tokens of
	tenants []string // tenants to read the verifiers' counts of

	prev     map[string]map[string]float64             // member → counter → last value
	prevHist map[string]map[string]map[float64]float64 // member → histogram → buckets
	prevCPU  time.Duration
	prevAt   time.Time
	prevHost [2]float64 // /proc/stat busy and total jiffies
}

// NewScraper reads the members of f, and the tokens budgetd holds for keys.
func NewScraper(f *drive.Fleet, keys []string) *Scraper {
	return &Scraper{f: f, keys: keys, prev: map[string]map[string]float64{},
		prevHist: map[string]map[string]map[float64]float64{}}
}

// SetTenants makes the scraper read the verifiers' counts for each of
// tenants (TenantArrivalsColumn, TenantWorkColumn). Call it before the
// first Read.
func (sc *Scraper) SetTenants(tenants []string) { sc.tenants = append([]string(nil), tenants...) }

// prefix is a member's short column prefix: gw, v1, b2, e1.
func prefix(m *drive.Member) string {
	n := m.Name[strings.LastIndexByte(m.Name, '-')+1:]
	switch m.Role {
	case drive.RoleGateway:
		if n == "1" {
			return "gw"
		}
		return "gw" + n
	case drive.RoleVerifier:
		return "v" + n
	case drive.RoleBudgetd:
		return "b" + n
	}
	return "e" + n
}

// delta returns the increase of counter key of member since the last read
// (a restarted process starts again from zero), or NaN on the first read.
func (sc *Scraper) delta(member, key string, v float64) float64 {
	pm := sc.prev[member]
	if pm == nil {
		pm = map[string]float64{}
		sc.prev[member] = pm
	}
	old, ok := pm[key]
	pm[key] = v
	if !ok || math.IsNaN(v) {
		return math.NaN()
	}
	if v < old {
		return v
	}
	return v - old
}

func (sc *Scraper) histDelta(member, key string, cum map[float64]float64) map[float64]float64 {
	pm := sc.prevHist[member]
	if pm == nil {
		pm = map[string]map[float64]float64{}
		sc.prevHist[member] = pm
	}
	old, ok := pm[key]
	pm[key] = cum
	if !ok || cum == nil {
		return nil
	}
	out := map[float64]float64{}
	for b, c := range cum {
		d := c - old[b]
		if d < 0 { // restarted
			d = c
		}
		out[b] = d
	}
	return out
}

// Read scrapes every member at once (each bounded by timeout: a paused
// member answers nothing, and its columns are left empty) and returns the
// columns of the second just ended.
func (sc *Scraper) Read(ctx context.Context, timeout time.Duration) map[string]float64 {
	type page struct {
		m   *drive.Member
		mfs promscrape.Families
	}
	var mu sync.Mutex
	var pages []page
	var wg sync.WaitGroup
	for _, m := range sc.f.Members {
		if m.Metrics == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if mfs, err := fetchMetrics(cctx, m.Metrics); err == nil {
				mu.Lock()
				pages = append(pages, page{m, mfs})
				mu.Unlock()
			}
		}()
	}
	tokens := map[string]float64{}
	if bs := sc.f.ByRole(drive.RoleBudgetd); len(bs) > 0 && len(sc.keys) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, b := range bs {
				cctx, cancel := context.WithTimeout(ctx, timeout)
				resp, err := sc.f.BudgetdStatus(cctx, b.Addr)
				cancel()
				if err != nil {
					continue
				}
				for _, st := range resp.GetBudgets() {
					mu.Lock()
					tokens[st.GetKey()] = st.GetTokensAvailable()
					mu.Unlock()
				}
				return
			}
		}()
	}
	wg.Wait()

	now := time.Now()
	out := map[string]float64{}
	if cpu := selfCPU(); !sc.prevAt.IsZero() {
		out[ColLabCPU] = (cpu - sc.prevCPU).Seconds() / now.Sub(sc.prevAt).Seconds()
		sc.prevCPU, sc.prevAt = cpu, now
	} else {
		sc.prevCPU, sc.prevAt = cpu, now
	}
	if busy, total, ok := hostCPU(); ok {
		if db, dt := busy-sc.prevHost[0], total-sc.prevHost[1]; sc.prevHost[1] > 0 && dt > 0 {
			out[ColHostCPU] = db / dt * float64(runtime.NumCPU())
		}
		sc.prevHost = [2]float64{busy, total}
	}
	for _, k := range sc.keys {
		if v, ok := tokens[k]; ok {
			out["budget_tokens_"+k] = v
		}
	}
	// A local process's resident memory and open files, read from /proc:
	// every member has them, metrics or not (the lab's etcd has none).
	for _, m := range sc.f.Members {
		if pid := m.PID(); pid > 0 {
			if rss, fds, ok := procUsage(pid); ok {
				out[prefix(m)+"_rss_mb"], out[prefix(m)+"_fds"] = rss, fds
				out[prefix(m)+"_pid"] = float64(pid) // a restart would hide growth
			}
		}
	}
	sort.Slice(pages, func(i, j int) bool { return pages[i].m.Name < pages[j].m.Name })
	queue := map[float64]float64{}
	verifierSums := map[string]float64{}
	wasted, anyVerifier := 0.0, false
	for _, p := range pages {
		pre, name, mfs := prefix(p.m), p.m.Name, p.mfs
		set := func(col string, v float64) {
			if !math.IsNaN(v) {
				out[col] = v
			}
		}
		set(pre+"_cpu", sc.delta(name, "cpu", sumOf(mfs, wellknown.MetricProcessCPU, nil)))
		// What a soak watches for growth (a local process's memory and files
		// come from /proc above; a container's from its own metrics).
		if _, done := out[pre+"_rss_mb"]; !done {
			if _, ok := mfs[wellknown.MetricProcessResident]; ok {
				set(pre+"_rss_mb", sumOf(mfs, wellknown.MetricProcessResident, nil)/1e6)
			}
			if _, ok := mfs[wellknown.MetricProcessOpenFDs]; ok {
				set(pre+"_fds", sumOf(mfs, wellknown.MetricProcessOpenFDs, nil))
			}
		}
		if _, ok := mfs[wellknown.MetricGoGoroutines]; ok {
			set(pre+"_goroutines", sumOf(mfs, wellknown.MetricGoGoroutines, nil))
		}
		if _, ok := mfs[wellknown.MetricProcessStartTime]; ok {
			set(pre+"_start", sumOf(mfs, wellknown.MetricProcessStartTime, nil))
		}
		switch p.m.Role {
		case drive.RoleGateway:
			set(pre+"_limit", sumOf(mfs, wellknown.MetricGatewayLimit, nil))
			set(pre+"_inflight", sumOf(mfs, wellknown.MetricGatewayInflight, nil))
			set(pre+"_admitted", sc.delta(name, "admitted", sumOf(mfs, wellknown.MetricGatewayAdmitted, nil)))
			set(pre+"_failed", sc.delta(name, "failed", sumOf(mfs, wellknown.MetricGatewayFailed, nil)))
			set(pre+"_refused", sc.delta(name, "refused", sumOf(mfs, wellknown.MetricGatewayRefused, nil)))
			for _, r := range []string{"limit", "priority", "busy", "deadline", "no_verifier", "tenant_share"} {
				set(pre+"_refused_"+r, sc.delta(name, "refused_"+r,
					sumOf(mfs, wellknown.MetricGatewayRefused, map[string]string{"reason": r})))
			}
			set(pre+"_breakers_open", countWhere(mfs, wellknown.MetricGatewayVerifierBreaker, 2))
			set(pre+"_breakers_half_open", countWhere(mfs, wellknown.MetricGatewayVerifierBreaker, 1))
			set(pre+"_autopilot", sumOf(mfs, wellknown.MetricGatewayAutopilotEngaged, nil))
			set(pre+"_fleet_retries", sc.delta(name, "fleet_retries", sumOf(mfs, wellknown.MetricGatewayFleetRetries, nil)))
			set(pre+"_margin", sumOf(mfs, wellknown.MetricGatewayMargin, nil))
			set(pre+"_margin_capacity", sumOf(mfs, wellknown.MetricGatewayMarginCapacity, nil))
			set(pre+"_late", sc.delta(name, "late", sumOf(mfs, wellknown.MetricGatewayLate, nil)))
			if _, ok := mfs[wellknown.MetricBudgetFallback]; ok { // the gateway's own retry budget
				set(pre+"_budget_fallback", sumOf(mfs, wellknown.MetricBudgetFallback, nil))
				set(pre+"_budget_tokens", sumOf(mfs, wellknown.MetricBudgetTokens, nil))
				set(pre+"_budget_tokens_fallback", sumOf(mfs, wellknown.MetricBudgetTokens, map[string]string{"source": "fallback"}))
			}
		case drive.RoleVerifier:
			anyVerifier = true
			set(pre+"_expected_ms", 1000*sumOf(mfs, wellknown.MetricVerifierExpectedService, nil))
			set(pre+"_queue", sumOf(mfs, wellknown.MetricVerifierQueueLength, nil))
			arrived := sc.delta(name, "attempts", sumOf(mfs, wellknown.MetricVerifierAttempts, nil))
			dropped := sc.delta(name, "dropped", sumOf(mfs, wellknown.MetricVerifierDropped, nil))
			set(pre+"_arrivals", arrived)
			if arrived > 0 {
				set(pre+"_refusal_rate", dropped/arrived)
			} else if arrived == 0 {
				set(pre+"_refusal_rate", 0)
			}
			if late := sc.delta(name, "late", sumOf(mfs, wellknown.MetricVerifierLate, nil)); !math.IsNaN(late) {
				wasted += late
				set(pre+"_late", late)
			}
			for b, c := range sc.histDelta(name, "queue_wait", buckets(mfs, wellknown.MetricVerifierQueueWait)) {
				queue[b] += c
			}
			for _, r := range verifierDropReasons {
				if d := sc.delta(name, "dropped_"+r, sumOf(mfs, wellknown.MetricVerifierDropped, map[string]string{"reason": r})); !math.IsNaN(d) {
					verifierSums["verifiers_dropped_"+r] += d
				}
			}
			for _, t := range sc.tenants {
				by := map[string]string{"tenant": t}
				if d := sc.delta(name, "tenant_arrivals_"+t, sumOf(mfs, wellknown.MetricVerifierAttempts, by)); !math.IsNaN(d) {
					verifierSums[TenantArrivalsColumn(t)] += d
				}
				if work, ok := tenantWork(mfs, by); ok {
					if d := sc.delta(name, "tenant_work_"+t, work); !math.IsNaN(d) {
						verifierSums[TenantWorkColumn(t)] += d
					}
				}
			}
		case drive.RoleBudgetd:
			set(pre+"_leader", sumOf(mfs, wellknown.MetricBudgetdIsLeader, nil))
		}
	}
	for col, v := range verifierSums {
		out[col] = v
	}
	if anyVerifier {
		out[ColWasted] = wasted
		if q := quantile(0.5, queue); !math.IsNaN(q) {
			out[ColQueueP50] = 1000 * q
		}
		if q := quantile(0.99, queue); !math.IsNaN(q) {
			out[ColQueueP99] = 1000 * q
		}
	}
	return out
}

// verifierDropReasons are the reasons a verifier gives for a call it did
// not hash (levee_verifier_dropped_total{reason}), read into
// verifiers_dropped_<reason> columns summed over verifiers: where calls
// were lost beyond the gateway.
var verifierDropReasons = []string{"arrival", "deadline", "dequeue_expired", "queue_expired", "cancelled", "draining", "over_memory", "pushed_out"}

// tenantWork is the seconds a verifier's workers spent hashing for the
// tenant of labels; ok is false when the verifier does not count them.
func tenantWork(mfs promscrape.Families, labels map[string]string) (float64, bool) {
	if _, ok := mfs[wellknown.MetricVerifierTenantWork]; !ok {
		return 0, false
	}
	return sumOf(mfs, wellknown.MetricVerifierTenantWork, labels), true
}

// selfCPU is the CPU time this process (the lab: load generator and
// scraper) has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hostCPU reads the whole machine's busy and total CPU time (jiffies) from
// /proc/stat: with lab_cpu and the members' own, it shows whether anything
// else was running during an experiment. ok is false where there is no
// /proc/stat.
func hostCPU() (busy, total float64, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, v := range f[1:] {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, 0, false
		}
		if i >= 8 { // guest time is already in user
			break
		}
		total += x
		if i != 3 && i != 4 { // idle, iowait
			busy += x
		}
	}
	return busy, total, true
}

// procUsage reads a process's resident memory (MB) and open file
// descriptors from /proc; ok is false when it cannot (no such process, no
// /proc).
func procUsage(pid int) (rssMB, fds float64, ok bool) {
	if pid <= 0 {
		return 0, 0, false
	}
	dir := "/proc/" + strconv.Itoa(pid)
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return 0, 0, false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, found := strings.CutPrefix(line, "VmRSS:"); found {
			f := strings.Fields(rest) // "1234 kB"
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
					rssMB = kb * 1024 / 1e6
				}
			}
		}
	}
	entries, err := os.ReadDir(dir + "/fd")
	if err != nil {
		return 0, 0, false
	}
	return rssMB, float64(len(entries)), true
}
