package storm

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

// Outcome classes of one attempt, as the caller saw it.
const (
	codeOK                = iota
	codeResourceExhausted // refused for load
	codeUnavailable       // no node, node lost or draining
	codeDeadlineExceeded  // the server said the deadline could not be met
	codeTimeout           // the caller gave up (its own deadline passed)
	codeCanceled
	codeOther
	nCodes
)

var codeNames = [nCodes]string{"ok", "resource_exhausted", "unavailable", "deadline_exceeded", "client_timeout", "canceled", "other"}

// Latency buckets of logical requests: 1 ms × 2^(i/8), i < nLatBuckets, so
// about 9 % apart, from 1 ms to about 60 s: fine enough to tell a p99 of
// 30 ms from one of 33 ms.
const nLatBuckets = 128

func latBucket(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms <= 1 {
		return 0
	}
	return min(int(math.Ceil(8*math.Log2(ms))), nLatBuckets-1)
}

func latUpper(i int) time.Duration {
	return time.Duration(math.Exp2(float64(i)/8) * float64(time.Millisecond))
}

// second holds what the clients saw in one second of an experiment. Every
// field is written with atomics by the clients' goroutines.
type second struct {
	offered  atomic.Int64 // logical requests that arrived in this second
	first    atomic.Int64 // first attempts sent
	retries  atomic.Int64 // further attempts sent
	goodput  atomic.Int64 // logical requests that ended in success in this second
	failed   atomic.Int64 // logical requests that ended without success in this second
	arrOK    atomic.Int64 // of the logical requests that arrived in this second: how many succeeded
	arrEnded atomic.Int64 // ... and how many have ended
	wrong    atomic.Int64 // answers that said "no match" for the right password
	dropped  atomic.Int64 // arrivals the generator did not send (its in-flight cap)
	codes    [nCodes]atomic.Int64
	latency  [nLatBuckets]atomic.Int64 // successful logical requests, arrival to answer
}

// Series is the per-second record of one experiment: what the clients saw,
// and what the fleet's metrics said (Scraped). Second 0 starts when the load
// starts.
type Series struct {
	start time.Time
	secs  []second

	mu      sync.Mutex
	scraped []map[string]float64 // by second; nil where nothing was scraped
	columns []string             // scraped column names, sorted
	phases  []string             // by second: warmup, baseline, trigger, after
}

// newSeries allocates a series of n seconds starting at start.
func newSeries(start time.Time, n int) *Series {
	return &Series{start: start, secs: make([]second, n), scraped: make([]map[string]float64, n), phases: make([]string, n)}
}

// Len is the number of seconds recorded.
func (s *Series) Len() int { return len(s.secs) }

// at returns the second holding t, or nil outside the series.
func (s *Series) at(t time.Time) *second {
	i := int(t.Sub(s.start) / time.Second)
	if i < 0 || i >= len(s.secs) {
		return nil
	}
	return &s.secs[i]
}

func (s *Series) add(t time.Time, f func(*second)) {
	if sec := s.at(t); sec != nil {
		f(sec)
	}
}

// setScraped records the scraped values of second i.
func (s *Series) setScraped(i int, vals map[string]float64) {
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

func (s *Series) setPhase(i int, phase string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= 0 && i < len(s.phases) {
		s.phases[i] = phase
	}
}

// Goodput returns the logical requests that succeeded in each second.
func (s *Series) Goodput() []float64 {
	return s.col(func(x *second) float64 { return float64(x.goodput.Load()) })
}

// Offered returns the logical requests that arrived in each second.
func (s *Series) Offered() []float64 {
	return s.col(func(x *second) float64 { return float64(x.offered.Load()) })
}

// Attempts returns the attempts (first and retries) sent in each second.
func (s *Series) Attempts() []float64 {
	return s.col(func(x *second) float64 { return float64(x.first.Load() + x.retries.Load()) })
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

func (s *Series) col(f func(*second) float64) []float64 {
	out := make([]float64, len(s.secs))
	for i := range s.secs {
		out[i] = f(&s.secs[i])
	}
	return out
}

// latencyQuantile is the q-quantile of the successful logical requests'
// latency over seconds [from, to), from the buckets (upper bounds); 0 when
// there were none.
func (s *Series) latencyQuantile(from, to int, q float64) time.Duration {
	var counts [nLatBuckets]int64
	var total int64
	for i := max(from, 0); i < min(to, len(s.secs)); i++ {
		for b := range counts {
			n := s.secs[i].latency[b].Load()
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
	return latUpper(nLatBuckets - 1)
}

// WriteCSV writes one row per second: the clients' counts, then every
// scraped column (empty where a scrape failed, e.g. of a stopped process).
func (s *Series) WriteCSV(w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cw := csv.NewWriter(w)
	head := []string{"t", "phase", "offered", "first_attempts", "retries", "goodput", "failed", "arrival_success_ratio",
		"wrong_answers", "generator_dropped"}
	for _, c := range codeNames {
		head = append(head, "attempts_"+c)
	}
	head = append(head, "latency_p50_ms", "latency_p99_ms")
	head = append(head, s.columns...)
	if err := cw.Write(head); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for i := range s.secs {
		x := &s.secs[i]
		ratio := ""
		if n := x.arrEnded.Load(); n > 0 {
			ratio = f(math.Round(float64(x.arrOK.Load())/float64(n)*1e4) / 1e4)
		}
		row := []string{strconv.Itoa(i), s.phases[i], itoa(x.offered.Load()), itoa(x.first.Load()), itoa(x.retries.Load()),
			itoa(x.goodput.Load()), itoa(x.failed.Load()), ratio, itoa(x.wrong.Load()), itoa(x.dropped.Load())}
		for c := range x.codes {
			row = append(row, itoa(x.codes[c].Load()))
		}
		ms := func(d time.Duration) string { return f(math.Round(float64(d)/float64(time.Millisecond)*10) / 10) }
		row = append(row, ms(s.latencyQuantile(i, i+1, 0.5)), ms(s.latencyQuantile(i, i+1, 0.99)))
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

// otherCPU is, per second, the cores the machine was busy beyond the lab and
// the fleet's members (host_cpu − lab_cpu − every member's _cpu): another
// workload competing with the experiment. NaN where host_cpu is unknown; a
// member not scraped (a paused one) counts as idle.
func (s *Series) otherCPU() []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]float64, len(s.scraped))
	for i, m := range s.scraped {
		host, ok := m[colHostCPU]
		if !ok {
			out[i] = math.NaN()
			continue
		}
		used := 0.0
		for k, v := range m {
			if strings.HasSuffix(k, "_cpu") && k != colHostCPU && !math.IsNaN(v) {
				used += v
			}
		}
		out[i] = host - used
	}
	return out
}
