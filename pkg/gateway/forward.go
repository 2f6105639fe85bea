package gateway

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/pkg/admission"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/deadline"
	"github.com/leveehq/levee/pkg/gateway/internal/upstream"
)

var errNoUserWithHash = errors.New("no_user verification takes no encoded_hash")

// Refusals are built once: the shed path formats nothing.
var (
	errOverLimit = status.Error(codes.ResourceExhausted,
		"gateway overloaded: concurrency limit reached; retry after the pushback")
	errOverShare = status.Error(codes.ResourceExhausted,
		"gateway overloaded: shedding this priority and attempt class; retry after the pushback")
	errOverTenantShare = status.Error(codes.ResourceExhausted,
		"gateway overloaded: this tenant is over its share while others wait; retry after the pushback")
	errBusy = status.Error(codes.ResourceExhausted,
		"gateway overloaded: every verifier's workers are busy; retry after the pushback")
	errNoVerifier = status.Error(codes.Unavailable,
		"no verifier available: none serving, or every circuit breaker open; retry after the pushback")
	errVerifierUnavailable = status.Error(codes.Unavailable,
		"verifier unavailable (connection lost or refused, or node draining); retry after the pushback")
	errVerifierFailed = status.Error(codes.Internal, "verifier failed")
	errAbandoned      = status.Error(codes.DeadlineExceeded,
		"dropped by the recovery autopilot: older than the typical client timeout")
	errCannotVerify = status.Error(codes.FailedPrecondition,
		"this stored hash cannot be verified by this fleet: its pepper key or its cost is beyond what the fleet is configured for")
	errTooLittleTime = status.Error(codes.DeadlineExceeded,
		"the deadline leaves too little time to verify; send a longer one")
)

// forCaller is err as the caller is told it. A verifier's answers about its
// own configuration and state (the pepper key ids it holds, its memory
// budget, its cost estimate and queue) are the operator's: the caller gets
// a generic message with the same code, the log the details at debug
// level, and levee_gateway_details_withheld_total a count. The gateway's
// own refusals, and INVALID_ARGUMENT (about the caller's own input), pass
// as they are.
func (g *Gateway) forCaller(err error) error {
	var generic error
	switch st := status.Convert(err); {
	case err == errAbandoned || err == errVerifierUnavailable || err == errVerifierFailed:
		return err
	case st.Code() == codes.FailedPrecondition:
		generic = errCannotVerify
	case st.Code() == codes.DeadlineExceeded:
		generic = errTooLittleTime
	case st.Code() == codes.Internal || st.Code() == codes.Unknown:
		generic = errVerifierFailed
	default:
		return err
	}
	code := status.Code(generic)
	g.metrics.withheld.WithLabelValues(code.String()).Inc()
	g.log.Debug("verifier answer withheld from the caller", "code", code.String(), "detail", status.Convert(err).Message())
	return generic
}

// pushback sets a jittered retry-after trailer.
func (g *Gateway) pushback(ctx context.Context) {
	_ = grpc.SetTrailer(ctx, g.pushbacks[rand.IntN(len(g.pushbacks))])
}

// admit runs the edge limiter: on success the caller owes a limiter
// Release. Its refusal comes before the request is even parsed.
func (g *Gateway) admit(ctx context.Context, c *call) error {
	g.clientRatio.add(!c.retry)
	g.maxAttempt.add(int64(c.facts.Attempt))
	// The tenants share what interactive first attempts may fill: the
	// limit less the critical reserve.
	fair := g.fair.Load()
	shared := int64(g.limiter.Threshold(admission.Class{Priority: callmeta.Interactive}))
	switch g.limiter.Acquire(c.class) {
	case admission.ReasonAdmitted:
	case admission.ReasonPriority:
		if fair {
			g.shares.Note(c.facts.Tenant, shared) // it asked: its share is held for it
		}
		c.metrics.refused[reasonIndexPriority].Inc()
		g.pushback(ctx)
		return errOverShare
	default:
		if fair {
			g.shares.Note(c.facts.Tenant, shared)
		}
		c.metrics.refused[reasonIndexLimit].Inc()
		g.pushback(ctx)
		return errOverLimit
	}
	if fair {
		limit := shared
		label := g.metrics.tenantLabels.Label(c.facts.Tenant)
		if c.critical {
			c.share = g.shares.AcquireAnyway(c.facts.Tenant, limit)
		} else if tk, ok := g.shares.Acquire(c.facts.Tenant, limit); ok {
			c.share = tk
		} else {
			g.limiter.Release(admission.Sample{Outcome: admission.OutcomeIgnore})
			c.metrics.refused[reasonIndexTenant].Inc()
			g.metrics.tenantCalls.WithLabelValues(label, "refused").Inc()
			g.pushback(ctx)
			return errOverTenantShare
		}
		g.metrics.tenantCalls.WithLabelValues(label, "admitted").Inc()
		// The verifiers share their queues by the same weights; weight 1
		// is what they assume when none is sent.
		if w := c.share.Weight(); w != 1 {
			c.facts.Weight = w
		}
	}
	g.auto.sawInflight(g.limiter.InFlight())
	return nil
}

// pickFor reserves a slot on a verifier for c, or refuses: the pick is the
// last check before the hop, because it asks the chosen verifier's breaker,
// and a half-open breaker's probe spent on a call refused afterwards would
// test nothing (see breaker.Breaker.Cancel). The caller owes the slot: the
// hop hands it back with the answer (Node.Observe), or Node.Unsent before.
func (g *Gateway) pickFor(ctx context.Context, c *call) (*upstream.Node, error) {
	v, serving := g.verifiers.Pick(nil, c.slotQueue())
	if v != nil {
		return v, nil
	}
	g.pushback(ctx)
	if !serving {
		c.metrics.refused[reasonIndexNoVerifier].Inc()
		return nil, errNoVerifier
	}
	c.metrics.refused[reasonIndexBusy].Inc()
	return nil, errBusy
}

// hopFunc makes one call to a verifier.
type hopFunc func(ctx context.Context, c verifyv1.VerifyServiceClient, opts ...grpc.CallOption) error

// Verify implements VerifyService.Verify.
func (g *Gateway) Verify(ctx context.Context, req *verifyv1.VerifyRequest) (*verifyv1.VerifyResponse, error) {
	c := g.newCall(ctx)
	if g.cfg.Unguarded {
		var resp *verifyv1.VerifyResponse
		return resp, g.forwardUnguarded(ctx, &c, func(ctx context.Context, vc verifyv1.VerifyServiceClient, opts ...grpc.CallOption) (err error) {
			resp, err = vc.Verify(ctx, req, opts...)
			return err
		})
	}
	if err := g.admit(ctx, &c); err != nil {
		return nil, err
	}
	if err := g.parser.CheckPassword(req.GetPassword()); err != nil {
		return nil, g.invalid(&c, err)
	}
	if req.GetNoUser() {
		if req.GetEncodedHash() != "" {
			return nil, g.invalid(&c, errNoUserWithHash)
		}
	} else if _, err := g.parser.Parse(req.GetEncodedHash()); err != nil {
		return nil, g.invalid(&c, err)
	}
	var resp *verifyv1.VerifyResponse
	err := g.serve(ctx, &c, func(ctx context.Context, vc verifyv1.VerifyServiceClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = vc.Verify(ctx, req, opts...)
		return err
	})
	return resp, err
}

// Hash implements VerifyService.Hash.
func (g *Gateway) Hash(ctx context.Context, req *verifyv1.HashRequest) (*verifyv1.HashResponse, error) {
	c := g.newCall(ctx)
	if g.cfg.Unguarded {
		var resp *verifyv1.HashResponse
		return resp, g.forwardUnguarded(ctx, &c, func(ctx context.Context, vc verifyv1.VerifyServiceClient, opts ...grpc.CallOption) (err error) {
			resp, err = vc.Hash(ctx, req, opts...)
			return err
		})
	}
	if err := g.admit(ctx, &c); err != nil {
		return nil, err
	}
	if err := g.parser.CheckPassword(req.GetPassword()); err != nil {
		return nil, g.invalid(&c, err)
	}
	var resp *verifyv1.HashResponse
	err := g.serve(ctx, &c, func(ctx context.Context, vc verifyv1.VerifyServiceClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = vc.Hash(ctx, req, opts...)
		return err
	})
	return resp, err
}

// forwardUnguarded makes the one hop of an unguarded gateway (Config.Unguarded):
// to the next serving verifier, under the caller's own context, the answer
// passed back as it came.
func (g *Gateway) forwardUnguarded(ctx context.Context, c *call, hop hopFunc) error {
	g.clientRatio.add(!c.retry)
	v := g.verifiers.Next()
	if v == nil {
		return errNoVerifier
	}
	c.metrics.admitted.Inc()
	v.Hold()
	var trailer metadata.MD
	err := hop(callmeta.AppendOutgoing(ctx, c.facts), v.Client(), grpc.Trailer(&trailer))
	v.ObserveUnguarded(trailer)
	switch {
	case err != nil:
		c.metrics.failed.Inc()
	case ctx.Err() != nil:
		c.metrics.late.Inc()
	default:
		c.metrics.goodput.Inc()
	}
	return err
}

// releaseAdmission ends an admitted call's hold on the limiter.
func (g *Gateway) releaseAdmission(c *call, s admission.Sample) {
	s.Critical = c.critical
	g.limiter.Release(s)
	g.shares.Release(c.share)
}

func (g *Gateway) invalid(c *call, err error) error {
	g.releaseAdmission(c, admission.Sample{Outcome: admission.OutcomeIgnore})
	g.metrics.invalid.Inc()
	return status.Error(codes.InvalidArgument, err.Error())
}

// serve forwards an admitted call: deadline check, pick, hop, at most one
// budgeted retry on another verifier, accounting.
//
// The gateway refuses before a hop only a call that cannot even be
// forwarded (less than the deadline margin left): whether the rest leaves
// time for a hash is each verifier's to say, from its own calibrated cost,
// and its refusal is as cheap as the gateway's. A gateway-wide estimate
// learnt from the verifiers' answers is what once let one stalled verifier
// make the gateway refuse every short deadline while a healthy one idled.
func (g *Gateway) serve(ctx context.Context, c *call, hop hopFunc) error {
	outcome := admission.Sample{Outcome: admission.OutcomeIgnore}
	defer func() { g.releaseAdmission(c, outcome) }()

	if !deadline.CanFinish(ctx, g.cfg.Deadline.Margin) {
		c.metrics.refused[reasonIndexDeadline].Inc()
		return errTooLittleTime
	}
	v, err := g.pickFor(ctx, c)
	if err != nil {
		return err
	}
	c.metrics.admitted.Inc()

	// The clock is read once the call is admitted and has a verifier: a
	// refusal never pays for it. Real time: the autopilot derives context
	// deadlines from it.
	start := time.Now()
	inflight := g.calls.add(start)
	defer g.calls.remove(inflight)

	// First attempts are counted once, where they start: a caller's retry
	// (attempt 2 and on) is the caller's budget's business, and counting it
	// here too would let retries earn retries.
	g.fleetRatio.add(true)
	if g.retry != nil && !c.retry {
		g.retry.RecordFirstAttempt()
	}
	res := g.hop(ctx, inflight, v, c.facts, hop)
	// One layer retries a given failure: the gateway retries a caller's
	// first attempt only, and once it has, tells the caller not to retry
	// that failure again (pushback -1). Both layers retrying would make the
	// fleet's bound (1 + r)² × first attempts instead of (1 + r).
	if res.retryable && !c.retry {
		if v2 := g.retryTarget(ctx, c, v); v2 != nil {
			g.metrics.fleetRetries.Inc()
			g.fleetRatio.add(false)
			g.retry.RecordRetry()
			res = g.hop(ctx, inflight, v2, c.retryFacts(), hop)
			if res.err != nil && res.pushback == nil {
				res.pushback = callmeta.DoNotRetry // the fleet already retried
			}
		} else {
			g.metrics.fleetNoBudget.Inc()
		}
	}
	outcome = res.sample

	took := time.Since(start)
	g.metrics.forwardLatency.Observe(took.Seconds())
	// The autopilot's evidence is work the fleet did, or held queued, for
	// nobody: a call whose deadline passed while it was out. A caller that
	// cancels its own call chose to leave; counting that as the fleet's
	// waste would let any caller engage the autopilot.
	passed := deadline.Passed(ctx, g.cfg.Deadline.Margin)
	switch {
	case res.answered:
		g.auto.sawWork(took, !passed)
	case res.expired || passed:
		g.auto.sawWork(took, false)
	}
	switch {
	case res.err != nil:
		c.metrics.failed.Inc()
		switch {
		case res.pushback != nil:
			_ = grpc.SetTrailer(ctx, res.pushback)
		case res.err == errVerifierUnavailable:
			g.pushback(ctx)
		}
		return g.forCaller(res.err)
	case ctx.Err() != nil:
		c.metrics.late.Inc()
		return status.FromContextError(ctx.Err()).Err()
	}
	c.metrics.goodput.Inc()
	return nil
}

// retryTarget returns the verifier to retry on, holding a slot there, or nil
// when the retry is not allowed: no budget configured or no token, no time
// left to forward, or no other verifier with a free slot. A token is
// spent only when a target exists.
func (g *Gateway) retryTarget(ctx context.Context, c *call, failed *upstream.Node) *upstream.Node {
	if g.retry == nil || !deadline.CanFinish(ctx, g.cfg.Deadline.Margin) {
		return nil
	}
	v, _ := g.verifiers.Pick(failed, c.slotQueue())
	if v == nil {
		return nil
	}
	if !g.retry.Allow() {
		v.Unsent()
		return nil
	}
	return v
}

// hopResult is what one hop tells the caller and the limiter.
type hopResult struct {
	err       error
	answered  bool        // the verifier ran it and answered (OK, or the input was bad)
	expired   bool        // unanswered: the forwarded deadline passed, or the autopilot cut the call, while it was out
	retryable bool        // failure local to the node: another may answer
	pushback  metadata.MD // the verifier's pushback trailer, passed back
	sample    admission.Sample
}

// hop makes one call to v and hands the answer to v (Node.Observe), which
// accounts for it; what the answer means for the caller, the limiter and the
// autopilot is worked out here from the verdict.
func (g *Gateway) hop(ctx context.Context, inflight *inflightCall, v *upstream.Node, f callmeta.Facts, fn hopFunc) hopResult {
	octx, cancel, err := g.cfg.Deadline.Outgoing(ctx)
	if err != nil {
		v.Unsent()
		return hopResult{err: status.Error(codes.DeadlineExceeded, "no time left to forward the call"),
			sample: admission.Sample{Outcome: admission.OutcomeIgnore}}
	}
	defer cancel()
	octx = inflight.bind(octx, g.auto)
	octx = callmeta.AppendOutgoing(octx, f)

	var trailer metadata.MD
	err = fn(octx, v.Client(), grpc.Trailer(&trailer))
	expired := err != nil && deadline.Passed(octx, g.cfg.Deadline.Margin)
	verdict := v.Observe(upstream.Answer{Err: err, Trailer: trailer, Cut: inflight.abandoned()})
	if verdict.SlotsChanged {
		g.fitCeiling()
	}

	res := hopResult{err: err, sample: admission.Sample{Outcome: admission.OutcomeIgnore}, expired: expired}
	switch verdict.Outcome {
	case upstream.Cut:
		// The autopilot cut it: the caller had given up.
		return hopResult{err: errAbandoned, expired: true, sample: admission.Sample{Outcome: admission.OutcomeIgnore}}
	case upstream.Answered:
		res.answered = true
		if wait := verdict.Served.QueueWait; wait >= 0 {
			res.sample = admission.Sample{QueueWait: wait, Outcome: admission.OutcomeOK}
			g.metrics.verifierWait.Observe(wait.Seconds())
			g.auto.sawQueue(wait, verdict.Served.Service)
		}
	case upstream.Overloaded:
		// A load signal for the limiter, not a node fault; the caller is
		// told not to retry.
		res.sample = admission.Sample{Outcome: admission.OutcomeOverloaded}
		res.pushback = callmeta.DoNotRetry
	case upstream.Failed:
		// The transport's message names internal addresses; the caller
		// gets a status that names the problem instead.
		res.err = errVerifierFailed
		if verdict.Code == codes.Unavailable {
			// Connection refused or lost, or the node draining: another
			// node may answer. Its health stream takes it out of rotation;
			// one failed call does not.
			res.err = errVerifierUnavailable
			res.retryable = ctx.Err() == nil && !verdict.PushedBack
		}
	}
	return res
}
