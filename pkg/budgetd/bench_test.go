package budgetd_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
)

// The benchmarks run the measured budgetd replica in a process of its own
// (this test binary again, running TestBenchReplicaProcess), so that its
// CPU time — getrusage(RUSAGE_SELF) in that process — counts budgetd alone:
// not the clients that load it, and not etcd, which stays in the benchmark's
// process as it would be on other machines in production. The replica runs
// with the production timings (1 s refresh, 3 s leases, 10 s forget, 5 s
// election TTL).
//
//	go test -run '^$' -bench '^BenchmarkLease$' -count 6 ./pkg/budgetd/
//	go test -run '^$' -bench '^BenchmarkRefreshFleet$' -benchtime 10x -count 5 ./pkg/budgetd/
//
// BenchmarkLease reports budgetd-cpu-us/op, the replica's CPU per Lease
// RPC, and clients/core, how many clients refreshing once a second one core
// would serve at that cost. BenchmarkRefreshFleet runs N clients refreshing
// every refresh_after (~1 s) for benchtime seconds and reports the share of
// a core the replica used (budgetd-cores) and the etcd writes per second
// (revisions, which budgetd's accounting never makes). Both run the replica
// on one core (GOMAXPROCS=1) and on two.
const benchReplicaEnv = "LEVEE_BENCH_BUDGETD_ETCD"

// TestBenchReplicaProcess is not a test: it is the budgetd replica of the
// benchmarks, started by them in a child process with the etcd endpoints in
// $LEVEE_BENCH_BUDGETD_ETCD. It prints "ADDR <host:port>" once leading,
// answers each "cpu" line on stdin with "CPU <microseconds>" (user + system
// time of the whole process), and stops when stdin closes.
func TestBenchReplicaProcess(t *testing.T) {
	endpoints := os.Getenv(benchReplicaEnv)
	if endpoints == "" {
		t.Skip("the benchmarks' budgetd replica; runs only in their child process")
	}
	r := budgetdtest.StartReplica(t, strings.Split(endpoints, ","), func(c *budgetd.Config) {
		prod := budgetd.DefaultConfig()
		c.RefreshInterval, c.LeaseValidity, c.ForgetAfter = prod.RefreshInterval, prod.LeaseValidity, prod.ForgetAfter
		c.ElectionTTL = prod.ElectionTTL
		c.MetricsAddr = ""
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	budgetdtest.WaitLeader(t, 30*time.Second, r)
	fmt.Printf("ADDR %s\n", r.Addr())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() == "cpu" {
			var ru syscall.Rusage
			if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
				t.Fatalf("getrusage: %v", err)
			}
			fmt.Printf("CPU %d\n", ru.Utime.Nano()/1e3+ru.Stime.Nano()/1e3)
		}
	}
}

// replicaProcess is a budgetd replica running in a child process.
type replicaProcess struct {
	addr  string
	stdin io.WriteCloser
	out   *bufio.Scanner
}

// startReplicaProcess runs a replica against endpoints in a child process
// limited to procs cores (GOMAXPROCS), stopped in b.Cleanup.
func startReplicaProcess(b *testing.B, endpoints []string, procs int) *replicaProcess {
	b.Helper()
	args := []string{"-test.run=^TestBenchReplicaProcess$", "-test.count=1", "-test.timeout=0"}
	// e.g. LEVEE_BENCH_BUDGETD_FLAGS=-test.cpuprofile=/tmp/budgetd.prof to
	// profile the replica.
	args = append(args, strings.Fields(os.Getenv("LEVEE_BENCH_BUDGETD_FLAGS"))...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), benchReplicaEnv+"="+strings.Join(endpoints, ","), "GOMAXPROCS="+strconv.Itoa(procs))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatalf("start the replica process: %v", err)
	}
	p := &replicaProcess{stdin: stdin, out: bufio.NewScanner(stdout)}
	b.Cleanup(func() {
		stdin.Close() // the replica stops
		for p.out.Scan() {
		}
		if err := cmd.Wait(); err != nil {
			b.Errorf("replica process: %v", err)
		}
	})
	addr, ok := p.line("ADDR ")
	if !ok {
		b.Fatal("the replica process did not start")
	}
	p.addr = addr
	return p
}

// line returns the rest of the next stdout line starting with prefix.
func (p *replicaProcess) line(prefix string) (string, bool) {
	for p.out.Scan() {
		if rest, ok := strings.CutPrefix(p.out.Text(), prefix); ok {
			return rest, true
		}
	}
	return "", false
}

// cpu returns the CPU time the replica's process has used so far.
func (p *replicaProcess) cpu(b *testing.B) time.Duration {
	b.Helper()
	if _, err := io.WriteString(p.stdin, "cpu\n"); err != nil {
		b.Fatalf("ask the replica for its CPU time: %v", err)
	}
	v, ok := p.line("CPU ")
	if !ok {
		b.Fatal("the replica process ended")
	}
	us, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(us) * time.Microsecond
}

// busy is CPU time spent so far: by the whole machine (every CPU neither
// idle nor waiting for I/O, from /proc/stat; 0 where unavailable), by this
// process, and by the replica's.
type busy struct{ machine, self, replica time.Duration }

func measure(b *testing.B, p *replicaProcess) busy {
	b.Helper()
	var m busy
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		if f := strings.Fields(line); len(f) >= 9 && f[0] == "cpu" {
			var ticks int64
			for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
				n, _ := strconv.ParseInt(f[i], 10, 64)
				ticks += n
			}
			m.machine = time.Duration(ticks) * 10 * time.Millisecond // USER_HZ = 100
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		m.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	m.replica = p.cpu(b)
	return m
}

// reportOthers reports, as other-procs-cores, the CPU that processes other
// than this one and the replica used between from and to, per second of
// wall time: above ~0.05 the figures are not those of a quiet machine.
func reportOthers(b *testing.B, from, to busy, wall time.Duration) {
	if from.machine == 0 {
		return
	}
	others := (to.machine - from.machine) - (to.self - from.self) - (to.replica - from.replica)
	b.ReportMetric(max(others.Seconds(), 0)/wall.Seconds(), "other-procs-cores")
}

func benchConns(b *testing.B, addr string, n int) []*grpc.ClientConn {
	b.Helper()
	conns := make([]*grpc.ClientConn, n)
	for i := range conns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		cc.Connect()
		conns[i] = cc
	}
	b.Cleanup(func() {
		for _, cc := range conns {
			cc.Close()
		}
	})
	return conns
}

// etcdRevision is etcd's current revision: it grows by one with every
// write (put, delete, transaction with writes), and not with reads, watches
// or lease renewals.
func etcdRevision(b *testing.B, endpoints []string) int64 {
	b.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "/levee/budget/bench-probe")
	if err != nil {
		b.Fatalf("etcd: %v", err)
	}
	return resp.Header.Revision
}

// leaseRequest is what one client sends per refresh: one key, a second's
// traffic of a busy gateway (200 first attempts, 20 retries) and the tokens
// it would like.
func leaseRequest(id string) *budgetv1.LeaseRequest {
	return &budgetv1.LeaseRequest{ClientId: id, Reports: []*budgetv1.KeyReport{
		{Key: "verify", FirstAttempts: 200, Retries: 20, TokensWanted: 62},
	}}
}

func clientIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("gateway-%05d/%d", i, 4000+i)
	}
	return ids
}

// BenchmarkLease: budgetd's CPU per Lease RPC, over real gRPC, from 64
// concurrent callers (one connection each, one call in flight each, as
// separate processes would) speaking for 1,000 or 10,000 distinct clients
// of one key, with the replica on one core (GOMAXPROCS=1) or two. The
// callers keep it saturated: clients/core, 1e6 / budgetd-cpu-us/op, is how
// many clients refreshing once a second one core serves at that cost.
func BenchmarkLease(b *testing.B) {
	for _, procs := range []int{1, 2} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			etcd := etcdtest.StartEtcd(b)
			p := startReplicaProcess(b, etcd, procs)
			const callers = 64
			conns := benchConns(b, p.addr, callers)
			for _, n := range []int{1_000, 10_000} {
				ids := clientIDs(n)
				warmed := false
				b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
					ctx := context.Background()
					if !warmed { // every client known to the ledger before measuring
						run(b, callers, n, func(g, i int) error {
							_, err := budgetv1.NewBudgetServiceClient(conns[g]).Lease(ctx, leaseRequest(ids[i]))
							return err
						})
						warmed = true
					}
					rev := etcdRevision(b, etcd)
					from := measure(b, p)
					start := time.Now()
					b.ResetTimer()
					run(b, callers, b.N, func(g, i int) error {
						_, err := budgetv1.NewBudgetServiceClient(conns[g]).Lease(ctx, leaseRequest(ids[i%n]))
						return err
					})
					b.StopTimer()
					to := measure(b, p)
					reportOthers(b, from, to, time.Since(start))
					used := to.replica - from.replica
					us := float64(used.Nanoseconds()) / 1e3 / float64(b.N)
					b.ReportMetric(us, "budgetd-cpu-us/op")
					b.ReportMetric(1e6/us, "clients/core")
					b.ReportMetric(float64(etcdRevision(b, etcd)-rev), "etcd-writes")
				})
			}
		})
	}
}

// run calls fn for i in [0, n) from callers goroutines (g is the caller).
func run(b *testing.B, callers, n int, fn func(g, i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(g, i); err != nil {
					b.Errorf("Lease: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkRefreshFleet: N clients each refreshing its lease when budgetd
// says (refresh_after: 1 s ± 15 %), as pkg/budget does, starting spread
// over the first second. After that second, when every client is in its
// rhythm, it measures for b.N seconds (run it with -benchtime 10x) the
// share of one core the replica used (budgetd-cores), its CPU per lease
// (and 1e6 / that: the clients one core would serve at this rate,
// clients/core), the leases per second it served, and etcd's writes per
// second; with the replica on one core (GOMAXPROCS=1) or two. Clients share
// connections ten to one (1,000 connections for 10,000 clients: file
// descriptors), so each connection carries ~10 calls a second.
func BenchmarkRefreshFleet(b *testing.B) {
	for _, procs := range []int{1, 2} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			etcd := etcdtest.StartEtcd(b)
			p := startReplicaProcess(b, etcd, procs)
			for _, n := range []int{1_000, 10_000} {
				refreshFleet(b, etcd, p, n)
			}
		})
	}
}

// refreshFleet runs the sub-benchmark of n clients.
func refreshFleet(b *testing.B, etcd []string, p *replicaProcess, n int) {
	ids := clientIDs(n)
	conns := benchConns(b, p.addr, n/10)
	b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
		stop := make(chan struct{})
		var leases, failed atomic.Int64
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() {
				c := budgetv1.NewBudgetServiceClient(conns[i%len(conns)])
				wait := time.Duration(rand.Int64N(int64(time.Second)))
				for {
					t := time.NewTimer(wait)
					select {
					case <-stop:
						t.Stop()
						return
					case <-t.C:
					}
					// As pkg/budget: a call gets 1 s, and a failure
					// (counted) is retried after a refresh interval.
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					resp, err := c.Lease(ctx, leaseRequest(id))
					cancel()
					if err != nil {
						failed.Add(1)
						wait = time.Second
						continue
					}
					leases.Add(1)
					wait = resp.GetRefreshAfter().AsDuration()
				}
			})
		}
		time.Sleep(time.Second) // every client has made its first call
		b.ResetTimer()
		rev, from, n0, f0, start := etcdRevision(b, etcd), measure(b, p), leases.Load(), failed.Load(), time.Now()
		time.Sleep(time.Duration(b.N) * time.Second)
		to, served, fails, wall := measure(b, p), leases.Load()-n0, failed.Load()-f0, time.Since(start)
		reportOthers(b, from, to, wall)
		used := to.replica - from.replica
		writes := etcdRevision(b, etcd) - rev
		b.StopTimer()
		close(stop)
		wg.Wait()
		b.ReportMetric(used.Seconds()/wall.Seconds(), "budgetd-cores")
		us := float64(used.Nanoseconds()) / 1e3 / float64(served)
		b.ReportMetric(us, "budgetd-cpu-us/lease")
		b.ReportMetric(1e6/us, "clients/core")
		b.ReportMetric(float64(served)/wall.Seconds(), "leases/s")
		b.ReportMetric(float64(writes)/wall.Seconds(), "etcd-writes/s")
		b.ReportMetric(float64(fails)/float64(served+fails), "failed-frac")
		if fails*100 > served {
			b.Errorf("%d of %d leases failed (deadline 1 s): the replica did not keep up", fails, served+fails)
		}
	})
}
