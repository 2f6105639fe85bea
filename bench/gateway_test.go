package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/budget"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/client"
	"github.com/leveehq/levee/pkg/fleet"
	"github.com/leveehq/levee/pkg/gateway"
	"github.com/leveehq/levee/pkg/gateway/settings"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/verify"
)

// BenchmarkGatewayRefusal measures what a call the gateway sheds costs, in
// CPU time per op (client and gateway together, both in this process):
//
//   - op=acquire: admission.Limiter.Acquire refusing, the decision alone.
//   - op=handler: gateway.Gateway.Verify called directly, refused.
//   - op=verify: a Verify over gRPC on 127.0.0.1, refused at the edge
//     (RESOURCE_EXHAUSTED with a jittered pushback trailer).
//   - op=health: a health Check on the same gateway and connection, the
//     transport baseline op=verify pays too.
//
// The gateway is clamped to a limit of 1 and the calls are batch priority,
// whose share of that limit is zero: every one is refused, none forwarded.
func BenchmarkGatewayRefusal(b *testing.B) {
	b.Run("op=acquire/clients=1", func(b *testing.B) {
		l, err := admission.New(admission.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		l.SetClamp(1)
		c := admission.Class{Priority: callmeta.Batch}
		benchSequential(b, func() error {
			if l.Acquire(c) == admission.ReasonAdmitted {
				return fmt.Errorf("admitted")
			}
			return nil
		})
	})
	b.Run("op=handler/clients=1", func(b *testing.B) {
		g, _ := refusingGateway(b)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		ctx = callmeta.NewContext(grpc.NewContextWithServerTransportStream(ctx, nopStream{}), callmeta.Facts{Priority: callmeta.Batch, Attempt: 1})
		req := gatewayRequest(b)
		benchSequential(b, func() error {
			_, err := g.Verify(ctx, req)
			return wantCode(err, codes.ResourceExhausted)
		})
	})
	for _, clients := range []int{1, 16} {
		b.Run(fmt.Sprintf("op=verify/clients=%d", clients), func(b *testing.B) {
			_, cc := refusingGateway(b)
			c := verifyv1.NewVerifyServiceClient(cc)
			req := gatewayRequest(b)
			benchCalls(b, clients, func(ctx context.Context) error {
				ctx = callmeta.AppendOutgoing(ctx, callmeta.Facts{Priority: callmeta.Batch, Attempt: 1})
				_, err := c.Verify(ctx, req)
				return wantCode(err, codes.ResourceExhausted)
			})
		})
		b.Run(fmt.Sprintf("op=health/clients=%d", clients), func(b *testing.B) {
			_, cc := refusingGateway(b)
			c := healthpb.NewHealthClient(cc)
			req := &healthpb.HealthCheckRequest{}
			benchCalls(b, clients, func(ctx context.Context) error {
				_, err := c.Check(ctx, req)
				return wantCode(err, codes.OK)
			})
		})
	}
}

func gatewayRequest(b *testing.B) *verifyv1.VerifyRequest {
	return &verifyv1.VerifyRequest{EncodedHash: storedHash(b, verify.DefaultPolicy().Params, benchPassword), Password: benchPassword}
}

// refusingGateway starts a gateway clamped to 1 over a verifier address
// nobody listens on (a refusal never needs one), and a connection to it.
func refusingGateway(b *testing.B) (*gateway.Gateway, *grpc.ClientConn) {
	b.Helper()
	cfg := gateway.DefaultConfig()
	cfg.Verifiers = []string{"127.0.0.1:1"}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Registry = prometheus.NewRegistry()
	cfg.Autopilot.Enabled = false
	g, err := gateway.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := g.ApplySettings(settings.Settings{Clamp: ptr(1)}); err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, lis, nil) }()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cc.Close()
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	return g, cc
}

func ptr[T any](v T) *T { return &v }

// BenchmarkGoodput runs a local fleet (embedded etcd, budgetd, 2 verifiers
// of one worker each at the default Argon2 policy, a gateway) and offers it
// 1×, 3× and 10× its capacity from a population of pkg/client callers that
// retry with the fleet-wide budget (at most 3 attempts, 2 s deadline,
// interactive priority). It reports, per load:
//
//   - goodput/capacity: calls answered within their deadline per second,
//     over the capacity measured before (a closed loop at the limit);
//   - p99 of the answered calls (a caller's view: retries and backoff
//     included), admitted-p99: the p99 of the attempts the gateway admitted
//     and answered, and the p99 of an unloaded fleet (one caller at a time)
//     for comparison;
//   - shed: the fraction of calls that ended refused.
//
// One iteration takes about a minute; run with -benchtime 1x.
func BenchmarkGoodput(b *testing.B) {
	// stored=p4: the default policy's hashes (4 lanes each: two hashes at
	// once share the 2 cores, so service time doubles under load here);
	// stored=p1: one lane, so that each worker has a core of its own and
	// service time does not depend on load. tls=mutual: every hop, the
	// callers' included, runs TLS with client certificates, as a fleet
	// does by default; the others run plaintext.
	p1 := verify.Params{Memory: 64 << 10, Iterations: 3, Parallelism: 1}
	for _, tc := range []struct {
		name   string
		params verify.Params
		tune   func(*gateway.Config)
		tls    bool
	}{
		{"stored=p4/gateway=default", verify.DefaultPolicy().Params, nil, false},
		{"stored=p1/gateway=default", p1, nil, false},
		{"stored=p1/gateway=default/tls=mutual", p1, nil, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				benchGoodput(b, tc.params, tc.tune, tc.tls)
			}
		})
	}
}

func benchGoodput(b *testing.B, params verify.Params, tune func(*gateway.Config), mutual bool) {
	cfg := fleet.DefaultConfig()
	cfg.Etcd.DataDir = b.TempDir()
	scheme := "http://"
	var caller *mtls.Source // nil: plaintext
	if mutual {
		cfg.TLSDir, scheme = b.TempDir(), "https://"
		if err := mtls.WriteDevelopmentSet(mtls.DevelopmentSet{Dir: cfg.TLSDir, ValidFor: time.Hour}, time.Now()); err != nil {
			b.Fatal(err)
		}
		var err error
		if caller, err = (mtls.Settings{Dir: cfg.TLSDir}).Load(mtls.IdentityClient, mtls.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	cfg.Etcd.ClientURL = scheme + "127.0.0.1:" + strconv.Itoa(freePort(b))
	cfg.Etcd.PeerURL = scheme + "127.0.0.1:" + strconv.Itoa(freePort(b))
	cfg.GatewayPort, cfg.BudgetdPort, cfg.VerifierPort = 0, 0, 0
	cfg.Workers = 1
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.MutateGateway = tune
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan fleet.Addresses, 1)
	done := make(chan error, 1)
	go func() { done <- fleet.Run(ctx, cfg, func(a fleet.Addresses) { ready <- a }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	var addrs fleet.Addresses
	select {
	case addrs = <-ready:
	case err := <-done:
		b.Fatal(err)
	}
	// Every attempt the client makes passes this interceptor: the answered
	// ones are the calls the gateway admitted, timed without the client's
	// backoff between attempts.
	var attemptsMu sync.Mutex
	var attempts []time.Duration
	timeAttempts := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil {
			attemptsMu.Lock()
			attempts = append(attempts, time.Since(start))
			attemptsMu.Unlock()
		}
		return err
	}
	cc, err := grpc.NewClient(addrs.Gateway, caller.DialOption(""), grpc.WithUnaryInterceptor(timeAttempts))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()

	bc := budget.DefaultConfig()
	bc.Target = addrs.Budgetd
	bc.Keys = []string{"clients"}
	bc.Logger = cfg.Logger
	bc.DialOptions = []grpc.DialOption{caller.DialOption("")}
	budgets, err := budget.New(bc)
	if err != nil {
		b.Fatal(err)
	}
	defer budgets.Close()
	key, err := budgets.Key("clients")
	if err != nil {
		b.Fatal(err)
	}
	ccfg := client.DefaultConfig()
	ccfg.Budget = key
	ccfg.MaxAttempts = 3
	ccfg.Priority = callmeta.Interactive
	ccfg.Registry = prometheus.NewRegistry()
	cl, err := client.New(cc, ccfg)
	if err != nil {
		b.Fatal(err)
	}
	stored := storedHash(b, params, benchPassword)
	call := func() (time.Duration, error) {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err := cl.Verify(cctx, stored, benchPassword)
		return time.Since(start), err
	}

	// Unloaded: one caller at a time.
	var unloaded []time.Duration
	for range 30 {
		took, err := call()
		if err != nil {
			b.Fatalf("unloaded call: %v", err)
		}
		unloaded = append(unloaded, took)
	}
	// Capacity: a closed loop of 4 callers for 8 s.
	var mu sync.Mutex
	var answered int
	end := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(end) {
				if _, err := call(); err == nil {
					mu.Lock()
					answered++
					mu.Unlock()
				} else {
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	capacity := float64(answered) / 8
	b.ReportMetric(capacity, "capacity/s")
	b.ReportMetric(p99(unloaded).Seconds()*1e3, "unloaded-p99-ms")

	for _, mult := range []float64{1, 3, 10} {
		rate := mult * capacity
		const d = 15 * time.Second
		var lat []time.Duration
		attemptsMu.Lock()
		attempts = attempts[:0]
		attemptsMu.Unlock()
		var ok, shed, other int
		interval := time.Duration(float64(time.Second) / rate)
		start := time.Now()
		var cw sync.WaitGroup
		for n := 0; time.Since(start) < d; {
			due := int(time.Since(start) / interval)
			for ; n <= due; n++ {
				cw.Go(func() {
					took, err := call()
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						ok++
						lat = append(lat, took)
					case status.Code(err) == codes.ResourceExhausted:
						shed++
					default:
						other++
					}
				})
			}
			time.Sleep(interval / 2)
		}
		cw.Wait()
		total := float64(ok + shed + other)
		name := strconv.FormatFloat(mult, 'f', 0, 64) + "x"
		b.ReportMetric(float64(ok)/d.Seconds()/capacity, "goodput/capacity@"+name)
		b.ReportMetric(p99(lat).Seconds()*1e3, "p99-ms@"+name)
		attemptsMu.Lock()
		b.ReportMetric(p99(attempts).Seconds()*1e3, "admitted-p99-ms@"+name)
		attemptsMu.Unlock()
		b.ReportMetric(float64(shed)/total, "shed@"+name)
		b.ReportMetric(float64(other)/total, "failed@"+name)
	}
}

func p99(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)*99)/100]
}

func freePort(b *testing.B) int {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
