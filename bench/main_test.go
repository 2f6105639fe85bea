package bench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/leveehq/levee/pkg/residentheap"
	"github.com/leveehq/levee/pkg/verifier"
	"github.com/leveehq/levee/pkg/verify"
)

// heapEnv selects the runtime's memory settings for one invocation; see the
// package doc.
const heapEnv = "LEVEE_BENCH_HEAP"

func TestMain(m *testing.M) {
	flag.Parse()
	// Configuration lines ("key: value") label the results for benchstat;
	// they are printed only when benchmarks run.
	benchmarking := flag.Lookup("test.bench").Value.String() != ""
	switch mode := os.Getenv(heapEnv); mode {
	case "", "default":
		if benchmarking {
			fmt.Println("heap: default")
		}
	case "resident":
		residentheap.Keep(runtime.GOMAXPROCS(0), int64(verify.DefaultPolicy().Params.Memory)<<10, 0)
		if benchmarking {
			fmt.Println("heap: resident")
		}
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want resident or default\n", heapEnv, mode)
		os.Exit(2)
	}
	code := m.Run()
	// Every server, client and filler call a benchmark starts must be gone.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// usage is a snapshot of the process's resource usage, and of the CPU time
// the whole machine spent busy (to notice other processes competing).
type usage struct {
	user, sys time.Duration
	minflt    int64 // minor page faults
	csw       int64 // context switches, voluntary and not
	host      time.Duration
}

func rusage() usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return usage{
		user:   time.Duration(ru.Utime.Nano()),
		sys:    time.Duration(ru.Stime.Nano()),
		minflt: ru.Minflt,
		csw:    ru.Nvcsw + ru.Nivcsw,
		host:   hostBusy(),
	}
}

func (u usage) sub(v usage) usage {
	return usage{
		user:   u.user - v.user,
		sys:    u.sys - v.sys,
		minflt: u.minflt - v.minflt,
		csw:    u.csw - v.csw,
		host:   u.host - v.host,
	}
}

func (u usage) cpu() time.Duration { return u.user + u.sys }

// hostBusy is the CPU time every CPU of the machine spent neither idle nor
// waiting for I/O (steal included), from /proc/stat; 0 where unavailable.
func hostBusy() time.Duration {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	const userHZ = 100 // USER_HZ, the unit of /proc/stat on Linux
	return time.Duration(ticks) * time.Second / userHZ
}

// warnForeignCPU logs when other processes used more than 5% of one core
// while b ran: its figures are then not those of a quiet machine. Runs
// shorter than half a second (the ramp-up runs before the reported one) are
// not judged: /proc/stat counts in 10 ms ticks.
func warnForeignCPU(b *testing.B, u usage) {
	if u.host == 0 || b.Elapsed() < 500*time.Millisecond {
		return
	}
	foreign := u.host - u.cpu()
	if cores := foreign.Seconds() / b.Elapsed().Seconds(); cores > 0.05 {
		b.Logf("WARNING: other processes used %.2f cores during this run; the machine was not quiet", cores)
	}
}

// server is a verifier serving on 127.0.0.1:0 and a client connection to it.
type server struct {
	*verifier.Server
	conn *grpc.ClientConn
}

// startServer serves cfg on a loopback port, waits until health reports
// SERVING (the workers are warm), and stops everything when b ends.
func startServer(b *testing.B, cfg verifier.Config) *server {
	b.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := verifier.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, lis, nil) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		<-served
		b.Fatal(err)
	}
	b.Cleanup(func() {
		// Close first: a graceful drain would wait out any queued or held work.
		s.Close()
		cancel()
		if err := <-served; err != nil {
			b.Errorf("Serve: %v", err)
		}
		conn.Close()
	})
	health := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("verifier not SERVING after a minute: %v, %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &server{Server: s, conn: conn}
}

// storedHash returns a stored hash of password under params.
func storedHash(b *testing.B, params verify.Params, password []byte) string {
	b.Helper()
	key := fmt.Sprintf("%+v/%x", params, password)
	if h, ok := storedHashes.Load(key); ok {
		return h.(string)
	}
	policy := verify.DefaultPolicy()
	policy.Params = params
	v, err := verify.New(policy, verify.DefaultLimits())
	if err != nil {
		b.Fatal(err)
	}
	h, err := v.HashPassword(password, nil)
	if err != nil {
		b.Fatal(err)
	}
	storedHashes.Store(key, h.String())
	return h.String()
}

// storedHashes keeps the hashes storedHash made, by parameters and
// password: the testing package runs each benchmark function more than once
// (b.N = 1 first), and one hash at the policy's memory costs as much as
// thousands of the calls measured.
var storedHashes sync.Map

// settle finishes the garbage collection and returns freed memory to the
// operating system before a measurement starts. CPU, page faults and
// context switches are read for the whole process (getrusage), so the
// collection and scavenging of what setup left behind (one stored hash
// frees 64 MiB of Argon2 blocks) would otherwise be charged to the calls
// measured: about 16,000 page faults, 29 µs a call over 20,000 calls.
func settle() {
	runtime.GC()
	debug.FreeOSMemory()
}
