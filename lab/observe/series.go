// Package observe records what the lab sees of a fleet, second by second:
// the clients' own counts of logical requests and attempts (Series), and
// what the fleet's members say of themselves (Scraper) — scraped once a
// second from their /metrics and budgetd's status and, for local processes,
// read from /proc — with the CPU of the lab and of the whole machine beside
// them.
//
// What it promises:
//
//   - Counters become their change over the second (a restarted process
//     counts from zero again), gauges are read as they are, histograms
//     become quantiles of the second's change.
//   - A member that does not answer within the read's timeout (a paused
//     one) leaves its cells empty, never zero.
//   - Every metric name it reads is one package wellknown names, and the
//     product's tests check that each server exports those.
package observe

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Code is how one attempt ended, as the caller saw it.
type Code int

// The outcome classes of an attempt.
const (
	CodeOK                Code = iota
	CodeResourceExhausted      // refused for load
	CodeUnavailable            // no node, node lost or draining
	CodeDeadlineExceeded       // the server said the deadline could not be met
	CodeTimeout                // the caller gave up (its own deadline passed)
	CodeCanceled
	CodeOther
	NCodes
)

// CodeNames name the codes in the series' CSV (attempts_<name>).
var CodeNames = [NCodes]string{"ok", "resource_exhausted", "unavailable", "deadline_exceeded", "client_timeout", "canceled", "other"}

// Latency buckets of logical requests: 1 ms × 2^(i/8), i < NLatBuckets, so
// about 9 % apart, from 1 ms to about 60 s: fine enough to tell a p99 of
// 30 ms from one of 33 ms.
const NLatBuckets = 128

// LatBucket is the latency bucket holding d.
func LatBucket(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= 1 {
		return 0
	}
	return min(int(math.Ceil(8*math.Log2(ms))), NLatBuckets-1)
}

func latUpper(i int) time.Duration {
	return time.Duration(math.Exp2(float64(i)/8) * float64(time.Millisecond))
}

// Second holds what the clients saw in one second of an experiment. Every
// field is written with atomics by the clients' goroutines.
type Second struct {
	Offered      atomic.Int64 // logical requests that arrived in this second
	First        atomic.Int64 // first attempts sent
	Retries      atomic.Int64 // further attempts sent
	Goodput      atomic.Int64 // logical requests that ended in success in this second
	Failed       atomic.Int64 // logical requests that ended without success in this second
	ArrivedOK    atomic.Int64 // of the logical requests that arrived in this second: how many succeeded
	ArrivedEnded atomic.Int64 // ... and how many have ended
	Wrong        atomic.Int64 // answers that said "no match" for the right password
	Dropped      atomic.Int64 // arrivals the generator did not send (its in-flight cap)
	Codes        [NCodes]atomic.Int64
	Latency      [NLatBuckets]atomic.Int64 // successful logical requests, arrival to answer
}

// Series is the per-second record of one experiment: what the clients saw,
// and what the fleet's metrics said (Scraped). Second 0 starts when the load
// starts. It is safe for concurrent use.
type Series struct {
	start time.Time
	secs  []Second

	mu      sync.Mutex
	scraped []map[string]float64 // by second; nil where nothing was scraped
	columns []string             // scraped column names, sorted
	phases  []string             // by second: warmup, baseline, trigger, after

	tenants []string         // recorded on their own too (SetTenants)
	ten     [][]TenantSecond // by second, by tenant
}

// NewSeries allocates a series of n seconds starting at start.
func NewSeries(start time.Time, n int) *Series {
	return &Series{start: start, secs: make([]Second, n), scraped: make([]map[string]float64, n), phases: make([]string, n)}
}

// Len is the number of seconds recorded.
func (s *Series) Len() int { return len(s.secs) }

// Start is when second 0 begins.
func (s *Series) Start() time.Time { return s.start }

// Second returns second i, which must be in [0, Len()).
func (s *Series) Second(i int) *Second { return &s.secs[i] }

// at returns the second holding t, or nil outside the series.
func (s *Series) at(t time.Time) *Second {
	i := int(t.Sub(s.start) / time.Second)
	if i < 0 || i >= len(s.secs) {
		return nil
	}
	return &s.secs[i]
}

// Add calls f with the second holding t; outside the series it does
// nothing.
func (s *Series) Add(t time.Time, f func(*Second)) {
	if sec := s.at(t); sec != nil {
		f(sec)
	}
}

// SetScraped records the scraped values of second i.
func (s *Series) SetScraped(i int, vals map[string]float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < 0 || i >= len(s.scraped) {
		return
	}
	for k := range vals {
		if !slices.Contains(s.columns, k) {
			s.columns = append(s.columns, k)
		}
	}
	slices.Sort(s.columns)
	s.scraped[i] = vals
}

// SetPhase names second i's phase in the CSV: warmup, baseline, trigger,
// after or drain.
func (s *Series) SetPhase(i int, phase string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= 0 && i < len(s.phases) {
		s.phases[i] = phase
	}
}

// Goodput returns the logical requests that succeeded in each second.
func (s *Series) Goodput() []float64 {
	return s.col(func(x *Second) float64 { return float64(x.Goodput.Load()) })
}

// Offered returns the logical requests that arrived in each second.
func (s *Series) Offered() []float64 {
	return s.col(func(x *Second) float64 { return float64(x.Offered.Load()) })
}

// Attempts returns the attempts (first and retries) sent in each second.
func (s *Series) Attempts() []float64 {
	return s.col(func(x *Second) float64 { return float64(x.First.Load() + x.Retries.Load()) })
}

// Columns returns the names of the scraped columns, sorted.
func (s *Series) Columns() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.columns)
}

// Scraped returns the scraped column name by second (NaN where missing).
func (s *Series) Scraped(name string) []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]float64, len(s.scraped))
	for i, m := range s.scraped {
		v, ok := m[name]
		if !ok {
			v = math.NaN()
		}
		out[i] = v
	}
	return out
}

func (s *Series) col(f func(*Second) float64) []float64 {
	out := make([]float64, len(s.secs))
	for i := range s.secs {
		out[i] = f(&s.secs[i])
	}
	return out
}

// LatencyQuantile is the q-quantile of the successful logical requests'
// latency over seconds [from, to), from the buckets (upper bounds); 0 when
// there were none.
func (s *Series) LatencyQuantile(from, to int, q float64) time.Duration {
	var counts [NLatBuckets]int64
	var total int64
	for i := max(from, 0); i < min(to, len(s.secs)); i++ {
		for b := range counts {
			n := s.secs[i].Latency[b].Load()
			counts[b] += n
			total += n
		}
	}
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for b, n := range counts {
		if seen += n; seen >= rank {
			return latUpper(b)
		}
	}
	return latUpper(NLatBuckets - 1)
}

// WriteCSV writes one row per second: the clients' counts, then every
// scraped column (empty where a scrape failed, e.g. of a stopped process).
func (s *Series) WriteCSV(w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cw := csv.NewWriter(w)
	head := []string{"t", "phase", "offered", "first_attempts", "retries", "goodput", "failed", "arrival_success_ratio",
		"wrong_answers", "generator_dropped"}
	for _, c := range CodeNames {
		head = append(head, "attempts_"+c)
	}
	head = append(head, "latency_p50_ms", "latency_p99_ms")
	head = append(head, s.tenantHead()...)
	head = append(head, s.columns...)
	if err := cw.Write(head); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for i := range s.secs {
		x := &s.secs[i]
		ratio := ""
		if n := x.ArrivedEnded.Load(); n > 0 {
			ratio = f(math.Round(float64(x.ArrivedOK.Load())/float64(n)*1e4) / 1e4)
		}
		row := []string{strconv.Itoa(i), s.phases[i], itoa(x.Offered.Load()), itoa(x.First.Load()), itoa(x.Retries.Load()),
			itoa(x.Goodput.Load()), itoa(x.Failed.Load()), ratio, itoa(x.Wrong.Load()), itoa(x.Dropped.Load())}
		for c := range x.Codes {
			row = append(row, itoa(x.Codes[c].Load()))
		}
		ms := func(d time.Duration) string { return f(math.Round(float64(d)/float64(time.Millisecond)*10) / 10) }
		row = append(row, ms(s.LatencyQuantile(i, i+1, 0.5)), ms(s.LatencyQuantile(i, i+1, 0.99)))
		row = append(row, s.tenantRow(i)...)
		for _, c := range s.columns {
			v, ok := s.scraped[i][c]
			if !ok || math.IsNaN(v) {
				row = append(row, "")
				continue
			}
			row = append(row, f(math.Round(v*1e4)/1e4))
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("series csv: %w", err)
	}
	return nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// OtherCPU is, per second, the cores the machine was busy beyond the lab and
// the fleet's members (host_cpu − lab_cpu − every member's _cpu): another
// workload competing with the experiment. NaN where host_cpu is unknown; a
// member not scraped (a paused one) counts as idle.
func (s *Series) OtherCPU() []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]float64, len(s.scraped))
	for i, m := range s.scraped {
		host, ok := m[ColHostCPU]
		if !ok {
			out[i] = math.NaN()
			continue
		}
		used := 0.0
		for k, v := range m {
			if strings.HasSuffix(k, "_cpu") && k != ColHostCPU && !math.IsNaN(v) {
				used += v
			}
		}
		out[i] = host - used
	}
	return out
}

// Mean averages xs over [from, to), clipped to xs; 0 when that is empty.
func Mean(xs []float64, from, to int) float64 {
	from, to = max(from, 0), min(to, len(xs))
	if to <= from {
		return 0
	}
	var sum float64
	for _, x := range xs[from:to] {
		sum += x
	}
	return sum / float64(to-from)
}

// SumKnown sums the values in [from, to) that are not NaN; NaN when all are.
func SumKnown(xs []float64, from, to int) float64 {
	sum, seen := 0.0, false
	for i := max(from, 0); i < min(to, len(xs)); i++ {
		if !math.IsNaN(xs[i]) {
			sum += xs[i]
			seen = true
		}
	}
	if !seen {
		return math.NaN()
	}
	return sum
}

// MeanKnown averages the values in [from, to) that are not NaN; NaN when
// all are.
func MeanKnown(xs []float64, from, to int) float64 {
	sum, n := 0.0, 0
	for i := max(from, 0); i < min(to, len(xs)); i++ {
		if !math.IsNaN(xs[i]) {
			sum += xs[i]
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}
