package budgetd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/pkg/mtls"
)

// forwardedHeader marks a call a follower forwarded, so that a replica that
// is not the leader either (a stale view) refuses it instead of forwarding
// it again.
const forwardedHeader = "levee-budgetd-forwarded"

// maxForwardConns bounds the cached connections: one per leader address
// seen, and the fleet has a handful of replicas.
const maxForwardConns = 4

func isForwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(forwardedHeader)) > 0
}

// forwarder holds one client connection per leader address.
type forwarder struct {
	timeout time.Duration
	tls     *mtls.Source // nil: plaintext

	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newForwarder(timeout time.Duration, tls *mtls.Source) *forwarder {
	return &forwarder{timeout: timeout, tls: tls, conns: map[string]*grpc.ClientConn{}}
}

var errForwarderClosed = errors.New("forwarder closed")

func (f *forwarder) client(addr string) (budgetv1.BudgetServiceClient, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errForwarderClosed
	}
	if cc := f.conns[addr]; cc != nil {
		return budgetv1.NewBudgetServiceClient(cc), nil
	}
	if len(f.conns) >= maxForwardConns {
		// Leaders seen before: a call racing with this may fail over to the
		// local fallback, as it would if that leader had just stopped.
		for a, cc := range f.conns {
			cc.Close()
			delete(f.conns, a)
		}
	}
	cc, err := grpc.NewClient(addr, f.tls.DialOption(""))
	if err != nil {
		return nil, err
	}
	f.conns[addr] = cc
	return budgetv1.NewBudgetServiceClient(cc), nil
}

// close closes every connection; later calls fail.
func (f *forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for a, cc := range f.conns {
		cc.Close()
		delete(f.conns, a)
	}
}

// call runs fn against the leader at addr with the caller's deadline (at
// most f.timeout: tokens arriving later would be worthless) and marks the
// call as forwarded.
func (f *forwarder) call(ctx context.Context, addr string, fn func(context.Context, budgetv1.BudgetServiceClient) error) error {
	c, err := f.client(addr)
	if err != nil {
		return status.Errorf(codes.Unavailable, "budgetd: forward to leader %s: %v", addr, err)
	}
	fctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	fctx = metadata.AppendToOutgoingContext(fctx, forwardedHeader, "1")
	if err := fn(fctx, c); err != nil {
		return forwardError(ctx, addr, err)
	}
	return nil
}

func (f *forwarder) lease(ctx context.Context, addr string, req *budgetv1.LeaseRequest) (*budgetv1.LeaseResponse, error) {
	var resp *budgetv1.LeaseResponse
	err := f.call(ctx, addr, func(ctx context.Context, c budgetv1.BudgetServiceClient) (err error) {
		resp, err = c.Lease(ctx, req)
		return err
	})
	return resp, err
}

func (f *forwarder) status(ctx context.Context, addr string, req *budgetv1.StatusRequest) (*budgetv1.StatusResponse, error) {
	var resp *budgetv1.StatusResponse
	err := f.call(ctx, addr, func(ctx context.Context, c budgetv1.BudgetServiceClient) (err error) {
		resp, err = c.Status(ctx, req)
		return err
	})
	return resp, err
}

// forwardError passes the leader's own answers through and turns failures
// to reach it into UNAVAILABLE, so that clients fall back locally.
func forwardError(ctx context.Context, addr string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.InvalidArgument, codes.ResourceExhausted, codes.Unavailable:
		if st.Code() == codes.Unavailable && !isBudgetdMessage(st.Message()) {
			break // a transport failure, not the leader's refusal
		}
		return err
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("budgetd: forward to leader %s: %s: %s", addr, st.Code(), st.Message()))
}

func isBudgetdMessage(msg string) bool { return strings.HasPrefix(msg, "budgetd:") }
