package client_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/testlock"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/client"
	"github.com/leveehq/levee/pkg/deadline"
)

func TestMain(m *testing.M) {
	// These tests measure time: not beside the lab's (see testlock).
	testlock.Shared()
	goleak.VerifyTestMain(m)
}

// attempt is what the test server saw of one attempt on arrival.
type attempt struct {
	Method      string
	Facts       callmeta.Facts
	HasDeadline bool
	Remaining   time.Duration // the server's view of the caller's deadline
	Arrived     time.Time
}

// answer is the test server's reply to one attempt: a code (OK for success)
// and the pushback trailer values to send with it (none when nil).
type answer struct {
	code     codes.Code
	pushback []string
}

// verifier is a VerifyService whose every answer the test scripts.
type verifier struct {
	verifyv1.UnimplementedVerifyServiceServer

	// script answers the n-th attempt (from 1, across calls); nil: success.
	script func(n int, a attempt) answer

	mu       sync.Mutex
	attempts []attempt
}

func (v *verifier) handle(ctx context.Context, method string) error {
	a := attempt{Method: method, Facts: callmeta.FromContext(ctx), Arrived: time.Now()}
	if d, ok := ctx.Deadline(); ok {
		a.HasDeadline, a.Remaining = true, time.Until(d)
	}
	v.mu.Lock()
	v.attempts = append(v.attempts, a)
	n := len(v.attempts)
	v.mu.Unlock()
	if v.script == nil {
		return nil
	}
	ans := v.script(n, a)
	if len(ans.pushback) > 0 {
		md := metadata.MD{}
		md.Append(callmeta.PushbackKey, ans.pushback...)
		_ = grpc.SetTrailer(ctx, md)
	}
	if ans.code == codes.OK {
		return nil
	}
	return status.Error(ans.code, "scripted failure")
}

func (v *verifier) Verify(ctx context.Context, _ *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	if err := v.handle(ctx, "verify"); err != nil {
		return nil, err
	}
	return &verifyv1.VerifyResponse{Match: true, NeedsRehash: true}, nil
}

func (v *verifier) Hash(ctx context.Context, _ *verifyv1.HashRequest) (*verifyv1.HashResponse, error) {
	if err := v.handle(ctx, "hash"); err != nil {
		return nil, err
	}
	return &verifyv1.HashResponse{EncodedHash: "$argon2id$v=19$m=64,t=1,p=1$c2FsdA$dGFn"}, nil
}

func (v *verifier) seen() []attempt {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.attempts)
}

// always answers every attempt the same way.
func always(code codes.Code, pushback ...string) func(int, attempt) answer {
	return func(int, attempt) answer { return answer{code: code, pushback: pushback} }
}

// failFirst fails the first n attempts with code and pushback, then succeeds.
func failFirst(n int, code codes.Code, pushback ...string) func(int, attempt) answer {
	return func(i int, _ attempt) answer {
		if i <= n {
			return answer{code: code, pushback: pushback}
		}
		return answer{}
	}
}

// serve starts v on 127.0.0.1:0 behind the callmeta interceptor and returns
// a connection to it (gRPC's own retries off: only the client retries).
func serve(t *testing.T, v *verifier) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(callmeta.UnaryServerInterceptor()))
	verifyv1.RegisterVerifyServiceServer(srv, v)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	cc, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Close()
		srv.Stop()
		<-done
	})
	return cc
}

// countingBudget is a budget with a fixed number of tokens that counts
// what the client recorded.
type countingBudget struct {
	tokens  atomic.Int64
	firsts  atomic.Int64
	retries atomic.Int64
	asked   atomic.Int64
}

func newBudget(tokens int64) *countingBudget {
	b := &countingBudget{}
	b.tokens.Store(tokens)
	return b
}

func (b *countingBudget) RecordFirstAttempt() { b.firsts.Add(1) }
func (b *countingBudget) RecordRetry()        { b.retries.Add(1) }
func (b *countingBudget) Allow() bool {
	b.asked.Add(1)
	return b.tokens.Add(-1) >= 0
}

// sleeper records the backoffs a client asks for and returns at once.
type sleeper struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (s *sleeper) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.delays = append(s.delays, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeper) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.delays)
}

// testConfig: plenty of tokens, an instant sleeper, a private registry.
func testConfig(b client.Budget, s *sleeper, reg *prometheus.Registry) client.Config {
	cfg := client.DefaultConfig()
	cfg.Budget = b
	cfg.Sleep = s.sleep
	if reg != nil { // a nil *Registry in the interface would not be nil
		cfg.Registry = reg
	}
	return cfg
}

func newClient(t *testing.T, cc grpc.ClientConnInterface, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cc, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// TestStampsEveryAttempt: deadline, attempt number, priority and tenant on
// every attempt, the defaults and the per-call options.
func TestStampsEveryAttempt(t *testing.T) {
	v := &verifier{script: failFirst(2, codes.Unavailable)}
	cc := serve(t, v)
	cfg := testConfig(newBudget(10), &sleeper{}, prometheus.NewRegistry())
	cfg.Tenant = "tenant-a"
	c := newClient(t, cc, cfg)

	got, err := c.Verify(context.Background(), "$argon2id$...", []byte("pw"))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if got != (client.Verdict{Match: true, NeedsRehash: true}) {
		t.Errorf("Verify = %+v, want match and needs rehash", got)
	}
	seen := v.seen()
	var facts []callmeta.Facts
	for _, a := range seen {
		facts = append(facts, a.Facts)
		// No deadline in the caller's context: the default (2 s) less the
		// margin was sent.
		if !a.HasDeadline || a.Remaining <= 0 || a.Remaining > 2*time.Second {
			t.Errorf("attempt %d arrived with deadline %v (set %v), want (0, 2s]", a.Facts.Attempt, a.Remaining, a.HasDeadline)
		}
	}
	want := []callmeta.Facts{
		{Attempt: 1, Priority: callmeta.Interactive, Tenant: "tenant-a"},
		{Attempt: 2, Priority: callmeta.Interactive, Tenant: "tenant-a"},
		{Attempt: 3, Priority: callmeta.Interactive, Tenant: "tenant-a"},
	}
	if diff := cmp.Diff(want, facts); diff != "" {
		t.Errorf("facts per attempt (-want +got):\n%s", diff)
	}

	if _, err := c.Hash(context.Background(), []byte("pw"), client.WithPriority(callmeta.Batch), client.WithTenant("")); err != nil {
		t.Fatalf("Hash: %v", err)
	}
	last := v.seen()[len(seen)]
	if want := (callmeta.Facts{Attempt: 1, Priority: callmeta.Batch}); last.Facts != want || last.Method != "hash" {
		t.Errorf("Hash with options: %s %+v, want hash %+v", last.Method, last.Facts, want)
	}

	// A caller's long deadline is clamped to Deadline.Max.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if _, err := c.Hash(ctx, []byte("pw")); err != nil {
		t.Fatal(err)
	}
	if a := v.seen()[len(seen)+1]; a.Remaining > cfg.Deadline.Max {
		t.Errorf("a 1 h deadline arrived as %v, want at most Max %v", a.Remaining, cfg.Deadline.Max)
	}

	if _, err := c.Verify(context.Background(), "h", nil, client.WithTenant("no spaces")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("invalid tenant option: %v, want INVALID_ARGUMENT without a call", err)
	}
	if n := len(v.seen()); n != len(seen)+2 {
		t.Errorf("server saw %d attempts, want %d", n, len(seen)+2)
	}
}

// TestRetryOnlyRetryable: which failures are retried, and for how long the
// client waits before the retry.
func TestRetryOnlyRetryable(t *testing.T) {
	const base = 50 * time.Millisecond
	for _, tc := range []struct {
		name      string
		code      codes.Code
		pushback  []string
		attempts  int           // attempts the server sees
		minDelay  time.Duration // the one backoff is in [minDelay, minDelay+base)
		honoured  float64       // pushback_honoured_total
		denied    string        // retries_denied_total reason, if one
		finalCode codes.Code
	}{
		{name: "unavailable", code: codes.Unavailable, attempts: 2, finalCode: codes.OK},
		{name: "unavailable, pushback 250 ms", code: codes.Unavailable, pushback: []string{"250"}, attempts: 2, minDelay: 250 * time.Millisecond, honoured: 1, finalCode: codes.OK},
		{name: "unavailable, pushback -1", code: codes.Unavailable, pushback: []string{"-1"}, attempts: 1, denied: "pushback", finalCode: codes.Unavailable},
		{name: "overloaded, pushback -1", code: codes.ResourceExhausted, pushback: []string{"-1"}, attempts: 1, denied: "pushback", finalCode: codes.ResourceExhausted},
		{name: "overloaded, no pushback", code: codes.ResourceExhausted, attempts: 1, finalCode: codes.ResourceExhausted},
		{name: "overloaded, pushback 0", code: codes.ResourceExhausted, pushback: []string{"0"}, attempts: 2, honoured: 1, finalCode: codes.OK},
		{name: "overloaded, pushback 300 ms", code: codes.ResourceExhausted, pushback: []string{"300"}, attempts: 2, minDelay: 300 * time.Millisecond, honoured: 1, finalCode: codes.OK},
		{name: "overloaded, malformed pushback", code: codes.ResourceExhausted, pushback: []string{"soon"}, attempts: 1, denied: "pushback", finalCode: codes.ResourceExhausted},
		{name: "overloaded, two pushbacks", code: codes.ResourceExhausted, pushback: []string{"10", "20"}, attempts: 1, denied: "pushback", finalCode: codes.ResourceExhausted},
		{name: "deadline exceeded", code: codes.DeadlineExceeded, attempts: 1, finalCode: codes.DeadlineExceeded},
		{name: "deadline exceeded, pushback 0", code: codes.DeadlineExceeded, pushback: []string{"0"}, attempts: 1, finalCode: codes.DeadlineExceeded},
		{name: "invalid argument", code: codes.InvalidArgument, attempts: 1, finalCode: codes.InvalidArgument},
		{name: "internal", code: codes.Internal, attempts: 1, finalCode: codes.Internal},
		{name: "unknown", code: codes.Unknown, attempts: 1, finalCode: codes.Unknown},
		{name: "cancelled", code: codes.Canceled, attempts: 1, finalCode: codes.Canceled},
		{name: "permission denied", code: codes.PermissionDenied, attempts: 1, finalCode: codes.PermissionDenied},
		{name: "failed precondition", code: codes.FailedPrecondition, attempts: 1, finalCode: codes.FailedPrecondition},
		{name: "aborted", code: codes.Aborted, attempts: 1, finalCode: codes.Aborted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &verifier{script: failFirst(1, tc.code, tc.pushback...)}
			cc := serve(t, v)
			s := &sleeper{}
			reg := prometheus.NewRegistry()
			b := newBudget(10)
			c := newClient(t, cc, testConfig(b, s, reg))
			_, err := c.Verify(context.Background(), "h", []byte("pw"))
			if status.Code(err) != tc.finalCode {
				t.Fatalf("Verify = %v, want code %v", err, tc.finalCode)
			}
			if got := len(v.seen()); got != tc.attempts {
				t.Errorf("server saw %d attempts, want %d", got, tc.attempts)
			}
			delays := s.got()
			if len(delays) != tc.attempts-1 {
				t.Fatalf("client slept %v, want %d sleeps", delays, tc.attempts-1)
			}
			for _, d := range delays {
				if d < tc.minDelay || d >= tc.minDelay+base {
					t.Errorf("slept %v before the retry, want in [%v, %v)", d, tc.minDelay, tc.minDelay+base)
				}
			}
			if got := b.retries.Load(); got != int64(tc.attempts-1) {
				t.Errorf("budget recorded %d retries, want %d", got, tc.attempts-1)
			}
			if got := counter(t, reg, "levee_client_pushback_honoured_total", "method", "verify"); got != tc.honoured {
				t.Errorf("pushback_honoured_total = %v, want %v", got, tc.honoured)
			}
			if tc.denied != "" {
				if got := counter(t, reg, "levee_client_retries_denied_total", "reason", tc.denied); got != 1 {
					t.Errorf("retries_denied_total{reason=%q} = %v, want 1", tc.denied, got)
				}
			}
		})
	}
}

func TestMaxAttempts(t *testing.T) {
	v := &verifier{script: always(codes.Unavailable)}
	cc := serve(t, v)
	b, s, reg := newBudget(100), &sleeper{}, prometheus.NewRegistry()
	c := newClient(t, cc, testConfig(b, s, reg))
	_, err := c.Verify(context.Background(), "h", []byte("pw"))
	if status.Code(err) != codes.Unavailable || !errors.Is(err, client.ErrMaxAttempts) {
		t.Fatalf("Verify = %v, want UNAVAILABLE wrapping ErrMaxAttempts", err)
	}
	if got := len(v.seen()); got != 3 {
		t.Errorf("server saw %d attempts, want MaxAttempts = 3", got)
	}
	if f, r := b.firsts.Load(), b.retries.Load(); f != 1 || r != 2 {
		t.Errorf("budget recorded %d first attempts and %d retries, want 1 and 2", f, r)
	}
	// Full jitter: retry n waits in [0, min(cap, base × 2^(n-1))).
	for i, d := range s.got() {
		if hi := 50 * time.Millisecond << i; d < 0 || d >= hi {
			t.Errorf("backoff %d = %v, want in [0, %v)", i+1, d, hi)
		}
	}
	for _, tc := range []struct {
		class string
		want  float64
	}{{"first", 1}, {"retry", 2}} {
		if got := counter(t, reg, "levee_client_attempts_total", "attempt", tc.class); got != tc.want {
			t.Errorf("attempts_total{attempt=%q} = %v, want %v", tc.class, got, tc.want)
		}
	}
	if got := counter(t, reg, "levee_client_calls_total", "code", "Unavailable"); got != 1 {
		t.Errorf("calls_total{code=Unavailable} = %v, want 1", got)
	}
}

// TestRetriesStopWhenBudgetEmpty: with 20 tokens, 100 failing calls make
// exactly 20 retries, sequentially and concurrently.
func TestRetriesStopWhenBudgetEmpty(t *testing.T) {
	for _, workers := range []int{1, 20} {
		t.Run(map[int]string{1: "sequential", 20: "concurrent"}[workers], func(t *testing.T) {
			v := &verifier{script: always(codes.Unavailable)}
			cc := serve(t, v)
			b, reg := newBudget(20), prometheus.NewRegistry()
			c := newClient(t, cc, testConfig(b, &sleeper{}, reg))
			var exhausted atomic.Int64
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for range 100 / workers {
						_, err := c.Verify(context.Background(), "h", []byte("pw"))
						if status.Code(err) != codes.Unavailable {
							t.Errorf("Verify = %v, want UNAVAILABLE", err)
						}
						if errors.Is(err, client.ErrBudgetExhausted) {
							exhausted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := len(v.seen()); got != 100+20 {
				t.Errorf("server saw %d attempts, want 100 first + 20 retries", got)
			}
			if got := b.retries.Load(); got != 20 {
				t.Errorf("budget recorded %d retries, want 20", got)
			}
			denied := counter(t, reg, "levee_client_retries_denied_total", "reason", "budget")
			if denied != float64(exhausted.Load()) || denied < 80 {
				t.Errorf("denied by budget: metric %v, errors %d; want equal and at least 80", denied, exhausted.Load())
			}
		})
	}
}

func TestNoBudgetNoRetries(t *testing.T) {
	v := &verifier{script: always(codes.Unavailable)}
	cc := serve(t, v)
	cfg := testConfig(nil, &sleeper{}, nil)
	cfg.Budget = nil
	c := newClient(t, cc, cfg)
	_, err := c.Verify(context.Background(), "h", []byte("pw"))
	if !errors.Is(err, client.ErrBudgetExhausted) || len(v.seen()) != 1 {
		t.Errorf("without a budget: %v after %d attempts, want ErrBudgetExhausted after 1", err, len(v.seen()))
	}
}

// TestNeverOutlivesDeadline uses real time: a server that is always
// UNAVAILABLE and a caller with 300 ms. Counted, not timed: every attempt
// the server saw arrived before the caller's deadline with time left on it,
// and attempts are numbered without gaps.
func TestNeverOutlivesDeadline(t *testing.T) {
	v := &verifier{script: always(codes.Unavailable)}
	cc := serve(t, v)
	cfg := client.DefaultConfig()
	cfg.Budget = newBudget(1000)
	cfg.MaxAttempts = 100
	cfg.BackoffBase, cfg.BackoffCap = 20*time.Millisecond, 60*time.Millisecond
	cfg.MinAttemptTime = 20 * time.Millisecond
	c := newClient(t, cc, cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	end, _ := ctx.Deadline()
	_, err := c.Verify(ctx, "h", []byte("pw"))
	switch {
	case status.Code(err) == codes.Unavailable && errors.Is(err, client.ErrNoTimeToRetry):
		// The client stopped on its own: the next backoff would not fit.
	case status.Code(err) == codes.DeadlineExceeded:
		// A machine slow enough that the last attempt itself ran out.
		t.Logf("the last attempt ran out of time: %v", err)
	default:
		t.Errorf("Verify = %v, want UNAVAILABLE wrapping ErrNoTimeToRetry", err)
	}
	seen := v.seen()
	if len(seen) < 3 {
		t.Fatalf("only %d attempts in 300 ms", len(seen))
	}
	for i, a := range seen {
		if a.Facts.Attempt != i+1 {
			t.Errorf("attempt %d numbered %d", i+1, a.Facts.Attempt)
		}
		if !a.Arrived.Before(end) || a.Remaining <= 0 {
			t.Errorf("attempt %d arrived %v before the deadline with %v left; want before, with time left",
				i+1, end.Sub(a.Arrived), a.Remaining)
		}
	}
	t.Logf("%d attempts; the last arrived with %v left", len(seen), seen[len(seen)-1].Remaining.Round(time.Millisecond))
}

// TestNoAttemptWithoutTime: deterministic deadline refusals, no clock
// needed.
func TestNoAttemptWithoutTime(t *testing.T) {
	t.Run("too little time for a first attempt", func(t *testing.T) {
		v := &verifier{}
		cc := serve(t, v)
		c := newClient(t, cc, testConfig(newBudget(10), &sleeper{}, nil))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond) // < 10 ms + 5 ms margin
		defer cancel()
		if _, err := c.Verify(ctx, "h", nil); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("Verify = %v, want DEADLINE_EXCEEDED", err)
		}
		if n := len(v.seen()); n != 0 {
			t.Errorf("server saw %d attempts, want none", n)
		}
	})
	t.Run("pushback beyond the deadline", func(t *testing.T) {
		v := &verifier{script: always(codes.Unavailable, "5000")}
		cc := serve(t, v)
		s, b := &sleeper{}, newBudget(10)
		c := newClient(t, cc, testConfig(b, s, nil))
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := c.Verify(ctx, "h", nil)
		if !errors.Is(err, client.ErrNoTimeToRetry) || len(v.seen()) != 1 || len(s.got()) != 0 {
			t.Errorf("Verify = %v after %d attempts, %d sleeps; want ErrNoTimeToRetry after 1, no sleep", err, len(v.seen()), len(s.got()))
		}
		if b.asked.Load() != 0 {
			t.Error("a token was asked for a retry that could not happen")
		}
	})
	t.Run("caller leaves during the backoff", func(t *testing.T) {
		v := &verifier{script: always(codes.Unavailable, "10000")}
		cc := serve(t, v)
		cfg := testConfig(newBudget(10), &sleeper{}, nil)
		cfg.Sleep = nil // the real timer
		c := newClient(t, cc, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		go func() {
			for len(v.seen()) == 0 {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		if _, err := c.Verify(ctx, "h", nil); status.Code(err) != codes.Canceled {
			t.Errorf("Verify = %v, want CANCELED", err)
		}
		if n := len(v.seen()); n != 1 {
			t.Errorf("server saw %d attempts, want 1", n)
		}
	})
}

// TestJitter: 1,000 clients failing at the same instant choose 1,000
// distinct retry delays, spread over the whole backoff window.
func TestJitter(t *testing.T) {
	const clients = 1000
	const base = 5 * time.Second // a wide window: the sleeper does not wait
	arrived := make(chan struct{})
	var n atomic.Int64
	v := &verifier{script: func(i int, a attempt) answer {
		if a.Facts.Attempt > 1 {
			return answer{}
		}
		if n.Add(1) == clients {
			close(arrived)
		}
		<-arrived // every first attempt fails at the same instant
		return answer{code: codes.Unavailable}
	}}
	cc := serve(t, v)
	s := &sleeper{}
	var wg sync.WaitGroup
	for range clients {
		cfg := testConfig(newBudget(1), s, nil)
		cfg.BackoffBase, cfg.BackoffCap = base, base
		cfg.Deadline.Default = 30 * time.Second
		c := newClient(t, cc, cfg)
		wg.Go(func() {
			if _, err := c.Verify(context.Background(), "h", []byte("pw")); err != nil {
				t.Errorf("Verify: %v", err)
			}
		})
	}
	wg.Wait()
	delays := s.got()
	if len(delays) != clients {
		t.Fatalf("%d delays, want %d", len(delays), clients)
	}
	distinct := map[time.Duration]bool{}
	buckets := make([]int, 100) // 50 ms each
	for _, d := range delays {
		if d < 0 || d >= base {
			t.Errorf("delay %v outside [0, %v)", d, base)
			continue
		}
		distinct[d] = true
		buckets[d/(base/100)]++
	}
	if len(distinct) != clients {
		t.Errorf("%d clients chose only %d distinct delays", clients, len(distinct))
	}
	// Uniform: 10 per 50 ms bucket on average; 40 would be a herd.
	if m := slices.Max(buckets); m > 40 {
		t.Errorf("a 50 ms window holds %d of %d retries: not spread", m, clients)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := client.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	for _, tc := range []struct {
		name   string
		modify func(*client.Config)
		field  string
	}{
		{"no attempts", func(c *client.Config) { c.MaxAttempts = 0 }, "MaxAttempts"},
		{"too many attempts", func(c *client.Config) { c.MaxAttempts = callmeta.MaxAttempt + 1 }, "MaxAttempts"},
		{"bad deadline", func(c *client.Config) { c.Deadline = deadline.Config{} }, "Deadline"},
		{"negative min attempt time", func(c *client.Config) { c.MinAttemptTime = -1 }, "MinAttemptTime"},
		{"min attempt time eats default", func(c *client.Config) { c.MinAttemptTime = c.Deadline.Default }, "MinAttemptTime"},
		{"no backoff base", func(c *client.Config) { c.BackoffBase = 0 }, "BackoffBase"},
		{"cap below base", func(c *client.Config) { c.BackoffCap = c.BackoffBase - 1 }, "BackoffCap"},
		{"no priority", func(c *client.Config) { c.Priority = callmeta.PriorityUnspecified }, "Priority"},
		{"bad tenant", func(c *client.Config) { c.Tenant = "a/b" }, "Tenant"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := client.DefaultConfig()
			tc.modify(&c)
			err := c.Validate()
			if !errors.Is(err, client.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Validate = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}

// TestSharedRegistry: two Clients on one registry share its series.
func TestSharedRegistry(t *testing.T) {
	v := &verifier{}
	cc := serve(t, v)
	reg := prometheus.NewRegistry()
	for range 2 {
		c := newClient(t, cc, testConfig(newBudget(0), &sleeper{}, reg))
		if _, err := c.Verify(context.Background(), "h", nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter(t, reg, "levee_client_attempts_total", "attempt", "first"); got != 2 {
		t.Errorf("attempts_total{attempt=first} = %v, want 2", got)
	}
}

// counter sums the series of name whose label `label` is value.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
