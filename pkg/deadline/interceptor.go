package deadline

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The refusals are built once: refusing must stay cheap under overload, and
// status errors are immutable, so sharing them between calls is safe.
var (
	errArrivedExpired   = status.Error(codes.DeadlineExceeded, "deadline: call arrived with no time left")
	errArrivedCancelled = status.Error(codes.Canceled, "deadline: call was cancelled before it started")
	errNoTimeLeft       = status.Error(codes.DeadlineExceeded, ErrNoTimeLeft.Error())
)

// refuseIncoming returns the status to answer an incoming call with instead
// of running its handler, or nil when the call has time left.
func refuseIncoming(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		if errors.Is(err, context.Canceled) {
			return errArrivedCancelled
		}
		return errArrivedExpired
	}
	// The context's own timer may not have fired yet at the deadline.
	if d, ok := ctx.Deadline(); ok && !d.After(time.Now()) {
		return errArrivedExpired
	}
	return nil
}

// UnaryServerInterceptor returns an interceptor that refuses a call arriving
// with its deadline already passed (codes.DeadlineExceeded) or already
// cancelled (codes.Canceled) without calling the handler, and otherwise runs
// the handler under Ensure: with the Default deadline when the caller sent
// none and at most Max. It panics if c is invalid.
func (c Config) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	c.mustBeValid()
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := refuseIncoming(ctx); err != nil {
			return nil, err
		}
		ctx, cancel := c.Ensure(ctx)
		defer cancel()
		return handler(ctx, req)
	}
}

// StreamServerInterceptor refuses a streaming call that arrives with its
// deadline already passed (or cancelled), like UnaryServerInterceptor, but
// applies neither Default nor Max: a stream is long-lived by design (a health
// Watch, an ORCA load-report stream, reflection) and must not be cut every
// Default; a caller's own deadline still applies. It panics if c is invalid.
func (c Config) StreamServerInterceptor() grpc.StreamServerInterceptor {
	c.mustBeValid()
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := refuseIncoming(ss.Context()); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// serverStream replaces the context of a grpc.ServerStream.
type serverStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *serverStream) Context() context.Context { return s.ctx }

// UnaryClientInterceptor returns an interceptor that makes every call with
// the context from Outgoing, so the callee's grpc-timeout is the caller's
// remaining time minus Margin (or Default when the caller has no deadline).
// When nothing is left after the margin the call fails at once with
// codes.DeadlineExceeded, and with codes.Canceled when the context is already
// cancelled; neither reaches the network. It panics if c is invalid.
func (c Config) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	c.mustBeValid()
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		out, cancel, err := c.Outgoing(ctx)
		if err != nil {
			if errors.Is(err, ErrNoTimeLeft) {
				return errNoTimeLeft
			}
			return status.FromContextError(err).Err()
		}
		defer cancel()
		return invoker(out, method, req, reply, cc, opts...)
	}
}
