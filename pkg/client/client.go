// Package client is the SDK internal callers import to call Levee's
// VerifyService: Verify a password against a stored hash, Hash a new one.
//
// What a Client promises on every call:
//
//   - It carries a deadline: the caller's, or Config.Deadline.Default when
//     the caller's context has none (clamped to Deadline.Max), sent as
//     gRPC's remaining duration less the per-hop margin (package deadline).
//   - It carries the attempt number (1, 2, ...), a priority and a tenant as
//     request metadata (package callmeta): the per-call option, else the
//     Client's default.
//   - It retries only what can succeed elsewhere or later: UNAVAILABLE, and
//     RESOURCE_EXHAUSTED only when the server's grpc-retry-pushback-ms
//     trailer says to retry (a non-negative value). A negative or malformed
//     pushback, DEADLINE_EXCEEDED, INVALID_ARGUMENT, CANCELED and every
//     other code end the call with the server's status.
//   - A retry is sent only with a token from the retry budget (Allow), only
//     before Config.MaxAttempts, and only if, after its backoff, the
//     remaining deadline still leaves Config.MinAttemptTime for it: no
//     attempt is ever started that cannot finish, and none after the
//     caller's deadline.
//   - Backoff is full jitter, rand[0, min(cap, base × 2^(n-1))), added to the
//     server's pushback when there is one: the pushback is a floor, and the
//     jitter keeps callers pushed back together from returning together.
//   - First attempts and retries are recorded in the budget as they are
//     sent, so that budgetd's ratio is computed from what was really sent.
//
// A call that ends without the retry it could have had returns the last
// attempt's status error wrapped with the reason (ErrBudgetExhausted,
// ErrNoTimeToRetry, ErrMaxAttempts): status.Code still reports the server's
// code, and errors.Is tells why there was no further attempt.
//
// The ClientConn passed to New should not have gRPC's own retries enabled
// (grpc.WithDisableRetry): only one layer retries.
package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/backoff"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/deadline"
)

// Why a retryable failure was not retried, wrapped into the returned error.
var (
	// ErrBudgetExhausted: the retry budget had no token (or there is none).
	ErrBudgetExhausted = errors.New("client: retry budget exhausted")
	// ErrNoTimeToRetry: the remaining deadline could not cover the backoff
	// plus MinAttemptTime.
	ErrNoTimeToRetry = errors.New("client: no time left to retry")
	// ErrMaxAttempts: the call made Config.MaxAttempts attempts.
	ErrMaxAttempts = errors.New("client: attempts exhausted")
)

// errNoTime is the status of a call whose deadline leaves no time for even
// a first attempt: it is refused without a network round trip.
var errNoTime = status.Error(codes.DeadlineExceeded, "client: deadline leaves no time for an attempt")

// Verdict is Verify's answer.
type Verdict struct {
	// Match is true when the password matches the stored hash.
	Match bool
	// NeedsRehash is true when the stored hash is below the server's
	// policy: store a fresh one from Hash.
	NeedsRehash bool
}

// Client calls VerifyService with deadlines, request metadata and budgeted
// retries. It is safe for concurrent use and holds no goroutines.
type Client struct {
	cfg     Config
	rpc     verifyv1.VerifyServiceClient
	budget  Budget
	sleep   func(context.Context, time.Duration) error
	verify  *methodMetrics
	hash    *methodMetrics
	minTime time.Duration // MinAttemptTime + Deadline.Margin
}

// New returns a Client calling VerifyService over cc.
func New(cc grpc.ClientConnInterface, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:     cfg,
		rpc:     verifyv1.NewVerifyServiceClient(cc),
		budget:  cfg.Budget,
		sleep:   cfg.Sleep,
		verify:  m.method("verify"),
		hash:    m.method("hash"),
		minTime: cfg.MinAttemptTime + cfg.Deadline.Margin,
	}
	if c.budget == nil {
		c.budget = noBudget{}
	}
	if c.sleep == nil {
		c.sleep = sleep
	}
	return c, nil
}

// CallOption overrides a Client default for one call.
type CallOption func(*callmeta.Facts)

// WithPriority sends the call with priority p.
func WithPriority(p callmeta.Priority) CallOption {
	return func(f *callmeta.Facts) { f.Priority = p }
}

// WithTenant sends the call on behalf of tenant (1..64 bytes of
// [A-Za-z0-9._-]; "" for none).
func WithTenant(tenant string) CallOption {
	return func(f *callmeta.Facts) { f.Tenant = tenant }
}

// Verify checks password against encodedHash (a PHC or bcrypt string).
// The error is a gRPC status error (possibly wrapped, see the package doc):
// INVALID_ARGUMENT for a malformed hash, RESOURCE_EXHAUSTED when the fleet
// is overloaded, DEADLINE_EXCEEDED when time ran out.
func (c *Client) Verify(ctx context.Context, encodedHash string, password []byte, opts ...CallOption) (Verdict, error) {
	req := &verifyv1.VerifyRequest{EncodedHash: encodedHash, Password: password}
	var resp *verifyv1.VerifyResponse
	err := c.call(ctx, c.verify, opts, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.rpc.Verify(ctx, req, o...)
		return err
	})
	if err != nil {
		return Verdict{}, err
	}
	return Verdict{Match: resp.GetMatch(), NeedsRehash: resp.GetNeedsRehash()}, nil
}

// Hash returns the encoded hash of password under the server's policy,
// with the same error contract as Verify.
func (c *Client) Hash(ctx context.Context, password []byte, opts ...CallOption) (string, error) {
	req := &verifyv1.HashRequest{Password: password}
	var resp *verifyv1.HashResponse
	err := c.call(ctx, c.hash, opts, func(ctx context.Context, o ...grpc.CallOption) (err error) {
		resp, err = c.rpc.Hash(ctx, req, o...)
		return err
	})
	if err != nil {
		return "", err
	}
	return resp.GetEncodedHash(), nil
}

// call runs the attempts of one call.
func (c *Client) call(ctx context.Context, m *methodMetrics, opts []CallOption,
	invoke func(context.Context, ...grpc.CallOption) error) error {
	facts := callmeta.Facts{Priority: c.cfg.Priority, Tenant: c.cfg.Tenant}
	for _, o := range opts {
		o(&facts)
	}
	facts.Attempt = 1
	if err := facts.Validate(); err != nil {
		return m.done(status.Error(codes.InvalidArgument, err.Error()))
	}
	ctx, cancel := c.cfg.Deadline.Ensure(ctx)
	defer cancel()

	var last error
	for attempt := 1; ; attempt++ {
		// Never start an attempt that cannot finish (this also covers time
		// spent in the backoff beyond what was planned).
		if !deadline.CanFinish(ctx, c.minTime) {
			switch {
			case ctx.Err() != nil: // the caller left, or its deadline passed
				return m.done(status.FromContextError(ctx.Err()).Err())
			case attempt == 1:
				return m.done(errNoTime)
			}
			return m.denied(reasonDeadline, last, ErrNoTimeToRetry)
		}
		actx, acancel, err := c.cfg.Deadline.Outgoing(ctx)
		if err != nil { // unreachable after CanFinish, but cheap to keep honest
			acancel()
			return m.done(status.Error(codes.DeadlineExceeded, err.Error()))
		}
		facts.Attempt = attempt
		actx = callmeta.AppendOutgoing(actx, facts)
		if attempt == 1 {
			c.budget.RecordFirstAttempt()
			m.first.Inc()
		} else {
			c.budget.RecordRetry()
			m.retry.Inc()
		}
		var trailer metadata.MD
		last = invoke(actx, grpc.Trailer(&trailer))
		acancel()
		if last == nil {
			return m.done(nil)
		}

		pushback, verdict := retryable(last, trailer)
		switch {
		case verdict == noRetry:
			return m.done(last)
		case verdict == pushedBack:
			return m.denied(reasonPushback, last, nil)
		case attempt >= c.cfg.MaxAttempts:
			return m.denied(reasonMaxAttempts, last, ErrMaxAttempts)
		}
		delay := pushback + c.backoff(attempt)
		if !deadline.CanFinish(ctx, delay+c.minTime) {
			if err := ctx.Err(); err != nil {
				return m.done(status.FromContextError(err).Err())
			}
			return m.denied(reasonDeadline, last, ErrNoTimeToRetry)
		}
		if !c.budget.Allow() {
			return m.denied(reasonBudget, last, ErrBudgetExhausted)
		}
		if verdict == retryAfterPushback {
			m.pushback.Inc()
		}
		m.delay.Observe(delay.Seconds())
		if err := c.sleep(ctx, delay); err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return m.done(status.FromContextError(cerr).Err())
			}
			return m.done(fmt.Errorf("client: backoff: %w (last attempt: %w)", err, last))
		}
	}
}

// backoff is the full-jitter wait before the retry that follows failed
// attempt n: uniform in [0, min(cap, base × 2^(n-1))).
func (c *Client) backoff(n int) time.Duration {
	return backoff.Full(n, c.cfg.BackoffBase, c.cfg.BackoffCap)
}

type verdict uint8

const (
	noRetry            verdict = iota // not retryable
	retry                             // retryable, no pushback
	retryAfterPushback                // retryable, wait at least the pushback
	pushedBack                        // retryable code, but the server said "do not retry"
)

// retryable classifies a failed attempt by its code and pushback trailer.
// A pushback present but malformed (not one integer) counts as "do not
// retry", as gRPC's retry design (A6) prescribes.
func retryable(err error, trailer metadata.MD) (time.Duration, verdict) {
	code := status.Code(err)
	if code != codes.Unavailable && code != codes.ResourceExhausted {
		return 0, noRetry
	}
	after, ok, present := callmeta.PushbackFrom(trailer)
	switch {
	case !present && code == codes.ResourceExhausted:
		return 0, noRetry // overloaded, and no word on retrying: do not pile on
	case !present:
		return 0, retry
	case !ok:
		return 0, pushedBack
	}
	return after, retryAfterPushback
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// noBudget is the budget of a Client configured without one: no retries.
type noBudget struct{}

func (noBudget) RecordFirstAttempt() {}
func (noBudget) Allow() bool         { return false }
func (noBudget) RecordRetry()        {}
