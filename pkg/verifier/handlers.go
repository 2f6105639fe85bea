package verifier

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/bytesize"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/deadline"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/workpool"
)

// Verify implements VerifyService.Verify.
func (s *Server) Verify(ctx context.Context, req *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	if s.admin.injectFault() {
		return nil, errInjected
	}
	if err := s.v.CheckPassword(req.GetPassword()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	h := s.dummy
	if req.GetNoUser() {
		if req.GetEncodedHash() != "" {
			return nil, status.Error(codes.InvalidArgument, "no_user verification takes no encoded_hash")
		}
	} else {
		var err error
		if h, err = s.v.Parse(req.GetEncodedHash()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		// A pepper key this node does not hold: refused before it takes a
		// queue slot or memory.
		if err := s.v.CheckPepper(h); err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
	}

	tenant := callmeta.FromContext(ctx).Tenant
	s.metrics.attempt(h, tenant)

	// A rehash in the same answer is deferrable: it is planned only when
	// nothing waits for a worker and the deadline has room for both hashes;
	// the job then reserves the cost and memory of both.
	resp := &verifyv1.VerifyResponse{}
	wantRehash := req.GetRehash() && !req.GetNoUser() && s.v.NeedsRehash(h)
	cost, mem := s.model.Estimate(h), h.MemoryBytes()
	if wantRehash {
		both := cost + s.model.Estimate(s.policy)
		if s.pool.Stats().Queued > 0 || !deadline.CanFinish(ctx, both+s.cfg.Deadline.Margin) {
			wantRehash = false
			resp.RehashStatus = verifyv1.RehashStatus_REHASH_STATUS_SKIPPED
		} else {
			cost, mem = both, max(mem, s.policy.MemoryBytes())
		}
	}

	var match, rehash bool
	var verr, herr error
	var fresh *verify.Hash
	if err := s.runCost(ctx, "verify", h, cost, mem, func() bool { return fresh == nil }, func() {
		match, rehash, verr = s.v.Verify(h, req.GetPassword())
		if wantRehash && verr == nil && match && rehash {
			fresh, herr = s.v.HashPassword(req.GetPassword(), rand.Reader)
		}
	}); err != nil {
		return nil, err
	}
	if verr != nil {
		if errors.Is(verr, verify.ErrUnknownPepper) {
			return nil, status.Error(codes.FailedPrecondition, verr.Error())
		}
		return nil, status.Error(codes.InvalidArgument, verr.Error())
	}
	if req.GetNoUser() {
		match, rehash = false, false
	}
	s.metrics.verdict(h, tenant, req.GetNoUser(), match)
	resp.Match, resp.NeedsRehash = match, rehash
	switch {
	case !req.GetRehash() || resp.RehashStatus != verifyv1.RehashStatus_REHASH_STATUS_UNSPECIFIED:
	case fresh != nil:
		resp.NewHash, resp.RehashStatus = fresh.String(), verifyv1.RehashStatus_REHASH_STATUS_DONE
	case herr != nil:
		s.log.Error("rehash failed", "err", herr)
		resp.RehashStatus = verifyv1.RehashStatus_REHASH_STATUS_SKIPPED
	default:
		resp.RehashStatus = verifyv1.RehashStatus_REHASH_STATUS_NOT_NEEDED
	}
	return resp, nil
}

// Hash implements VerifyService.Hash.
func (s *Server) Hash(ctx context.Context, req *verifyv1.HashRequest) (*verifyv1.HashResponse, error) {
	if s.admin.injectFault() {
		return nil, errInjected
	}
	if err := s.v.CheckPassword(req.GetPassword()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	var h *verify.Hash
	var herr error
	if err := s.run(ctx, "hash", s.policy, func() {
		h, herr = s.v.HashPassword(req.GetPassword(), rand.Reader)
	}); err != nil {
		return nil, err
	}
	if herr != nil {
		s.log.Error("hash failed", "err", herr)
		return nil, status.Error(codes.Internal, "hashing failed")
	}
	return &verifyv1.HashResponse{EncodedHash: h.String()}, nil
}

// run queues fn (one hash with the cost of h) and accounts for its fate.
func (s *Server) run(ctx context.Context, rpc string, h *verify.Hash, fn func()) error {
	return s.runCost(ctx, rpc, h, s.model.Estimate(h), h.MemoryBytes(), nil, fn)
}

// runCost is run with the expected cost and memory given: those of h, or
// more when fn does more than h's hash. The cost model learns from the run
// unless single (when not nil) says afterwards that fn did more.
func (s *Server) runCost(ctx context.Context, rpc string, h *verify.Hash, cost time.Duration, mem int64,
	single func() bool, fn func()) error {
	alg := h.Algorithm.String()
	// Each tenant is a flow of the pool: the workers are shared among the
	// tenants with work queued, by expected cost in proportion to the
	// weight the gateway sent (package workpool).
	facts := callmeta.FromContext(ctx)
	tenant := facts.Tenant
	res, err := s.pool.SubmitFlow(ctx, workpool.Flow{Key: tenant, Weight: facts.Weight}, cost, mem, func() {
		s.metrics.hashes.WithLabelValues(alg).Inc()
		if s.beforeHash != nil {
			s.beforeHash(ctx, rpc)
		}
		fn()
	})
	if err != nil {
		return s.notRun(ctx, rpc, h, res, err)
	}
	// The ORCA interceptor sends a per-call load report only for a call whose
	// handler asked for its recorder: admitted calls only, so that the shed
	// path builds no report (out-of-band reports still carry the load).
	orca.CallMetricsRecorderFromContext(ctx)
	_ = grpc.SetTrailer(ctx, callmeta.Served{QueueWait: res.Wait, Service: res.Service, Expected: cost,
		Workers: s.slots(), MaxQueueWait: s.queueBound()}.Trailer())
	s.metrics.queueWait.WithLabelValues(rpc).Observe(res.Wait.Seconds())
	s.metrics.service.WithLabelValues(alg).Observe(res.Service.Seconds())
	s.metrics.work(tenant, res.Service)
	// Learn only from what measured the node's speed for a caller who
	// waited: not a run whose caller left, nor one that spanned a stall.
	if now := time.Now(); (single == nil || single()) && ctx.Err() == nil &&
		!s.stall.spanned(now.Add(-res.Service), now) {
		s.model.Observe(h, res.Ran)
	}
	if err := ctx.Err(); err != nil {
		s.metrics.late.WithLabelValues(rpc).Inc()
		return status.FromContextError(err).Err()
	}
	s.metrics.goodput.WithLabelValues(rpc).Inc()
	return nil
}

// slots is how many policy hashes may run at once now: the active workers,
// or as many as the memory budget holds when that is fewer.
func (s *Server) slots() int {
	st := s.pool.Stats()
	if m := s.policy.MemoryBytes(); st.MemoryBudget > 0 && m > 0 {
		return int(min(int64(st.Active), max(st.MemoryBudget/m, 1)))
	}
	return st.Active
}

// queueBound is the longest projected queue wait the node admits an arrival
// to, as its answers report it (callmeta.Served.MaxQueueWait): a gateway
// lets a burst queue up to two thirds of it. Zero for an unguarded node,
// which bounds nothing.
func (s *Server) queueBound() time.Duration {
	if s.cfg.Unguarded {
		return 0
	}
	return s.cfg.MaxQueueWait
}

// Refusals are built once: the shed path formats nothing.
var (
	errQueueFull      = status.Error(codes.ResourceExhausted, "verifier overloaded: queue full; do not retry")
	errPushedOut      = status.Error(codes.ResourceExhausted, "verifier overloaded: queue full, and this tenant had the most calls queued; do not retry")
	errWaitTooLong    = status.Error(codes.ResourceExhausted, "verifier overloaded: projected queue wait exceeds the maximum; do not retry")
	errWouldMiss      = status.Error(codes.DeadlineExceeded, "projected queue wait plus the expected hash time would overrun this call's deadline; not queued")
	errDraining       = status.Error(codes.Unavailable, "verifier draining: send to another node")
	errExpired        = status.Error(codes.DeadlineExceeded, "deadline too close to finish verification; dropped before hashing")
	errCancelledQueue = status.Error(codes.Canceled, "caller cancelled while queued; not hashed")
)

// notRun maps a pool error to the caller's status and counts the drop.
func (s *Server) notRun(ctx context.Context, rpc string, h *verify.Hash, res workpool.Result, err error) error {
	priority := callmeta.FromContext(ctx).Priority.String()
	var st error
	reason := reasonArrival
	switch {
	case errors.Is(err, workpool.ErrQueueFull):
		st = errQueueFull
	case errors.Is(err, workpool.ErrPushedOut):
		// Queued, then its place went to a tenant with fewer calls queued:
		// overload, as a full queue at arrival is.
		s.metrics.queueWait.WithLabelValues(rpc).Observe(res.Wait.Seconds())
		reason, st = reasonPushedOut, errPushedOut
	case errors.Is(err, workpool.ErrWaitTooLong):
		st = errWaitTooLong
	case errors.Is(err, workpool.ErrWouldMissDeadline):
		// The caller's own deadline, not this node's bound: no pushback,
		// and not overload (docs/verifier.md, "What an answer says").
		return s.count(reasonDeadline, priority, errWouldMiss)
	case errors.Is(err, workpool.ErrDeadlineTooShort):
		remaining, _ := deadline.Remaining(ctx)
		return s.count(reasonDeadline, priority, status.Errorf(codes.DeadlineExceeded,
			"remaining deadline %v is shorter than the expected %s time %v", remaining.Round(time.Millisecond),
			h.Algorithm, time.Duration(float64(s.model.Estimate(h))*s.pool.Stats().Slowdown).Round(time.Millisecond)))
	case errors.Is(err, workpool.ErrTooBig):
		// Configuration, not load: no pushback trailer, nothing to retry.
		return s.count(reasonTooBig, priority, status.Errorf(codes.FailedPrecondition,
			"the stored %s hash needs %s of memory, more than this verifier's whole memory budget of %s: "+
				"it can never be verified here (raise -memory-budget, or rehash it with a smaller m)",
			h.Algorithm, bytesize.Size(h.MemoryBytes()).Approx(), bytesize.Size(s.pool.Stats().MemoryBudget).Approx()))
	case errors.Is(err, workpool.ErrDraining), errors.Is(err, workpool.ErrClosed):
		return s.count(reasonDraining, priority, errDraining)
	case errors.Is(err, workpool.ErrExpired):
		s.metrics.queueWait.WithLabelValues(rpc).Observe(res.Wait.Seconds())
		return s.count(reasonExpired, priority, errExpired)
	case errors.Is(err, workpool.ErrCancelled):
		s.metrics.queueWait.WithLabelValues(rpc).Observe(res.Wait.Seconds())
		// A cancel within one hop's margin of the deadline is that deadline
		// passing (deadline.Passed).
		if deadline.Passed(ctx, s.cfg.Deadline.Margin) {
			return s.count(reasonQueueExpired, priority, status.FromContextError(context.DeadlineExceeded).Err())
		}
		return s.count(reasonCancel, priority, errCancelledQueue)
	default:
		s.log.Error("unexpected pool error", "err", err)
		return status.Error(codes.Internal, "internal error")
	}
	_ = grpc.SetTrailer(ctx, callmeta.DoNotRetry)
	return s.count(reason, priority, st)
}

func (s *Server) count(reason, priority string, st error) error {
	s.metrics.dropped.WithLabelValues(reason, priority).Inc()
	return st
}
