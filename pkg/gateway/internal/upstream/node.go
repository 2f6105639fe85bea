package upstream

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/window"
	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/callmeta"
)

// Node is one verifier as the gateway sees it. Request-path fields are
// atomics; what rolls over time is under mu.
type Node struct {
	set    *Set
	addr   string
	cc     *grpc.ClientConn
	client verifyv1.VerifyServiceClient
	stop   context.CancelFunc

	brk     atomic.Pointer[breaker.Breaker]
	serving atomic.Bool // last word of its health stream
	retired atomic.Bool // left the membership; never picked again

	// Slots (queue.go).
	pending atomic.Int64 // calls holding a slot on it: forwarded or about to be
	workers atomic.Int64 // its workers, from its last answer (0: not known, or forgotten)
	workAt  atomic.Int64 // unix nanos of the last answer that said how many
	// maxWait is the longest queue wait it admits an arrival to, in
	// nanoseconds, from its last answer (0: not reported, or forgotten with
	// the worker count).
	maxWait atomic.Int64
	queue   atomic.Int64 // calls it may hold beyond its workers
	// standingQueue is the standing size fitQueue last set; standing says
	// its queue stood above that for a whole second and has not drained
	// since; lowPending is the fewest calls held at it in the current
	// second, plus one; released says a slot was released in the current
	// second. See judgeStanding.
	standingQueue atomic.Int64
	standing      atomic.Bool
	lowPending    atomic.Int64
	released      atomic.Bool

	service serviceTimes // its recent service times (service.go)
	eject   ejection     // whether, and until when, it is ejected (outlier.go)

	mu sync.Mutex
	// standingSizes and burstSizes hold, per second, the largest standing
	// and burst queue sizes its service times asked for (see fitQueue).
	standingSizes, burstSizes *window.Window
	// answers counts its answers, good and bad, per second over
	// outlierWindow (see EjectOutliers).
	answers *window.Window
}

const (
	answerGood = iota
	answerBad
)

// heldFor is how long a queue size asked for is held: the current second
// and the ten before it.
const heldFor = 11

func newNode(s *Set, addr string) *Node {
	v := &Node{
		set:           s,
		addr:          addr,
		standingSizes: window.New(heldFor, time.Second, 1),
		burstSizes:    window.New(heldFor, time.Second, 1),
		answers:       window.New(outlierBuckets, time.Second, 2),
		service:       newServiceTimes(),
	}
	if s.cfg.NewBreaker != nil {
		v.brk.Store(s.cfg.NewBreaker())
	}
	return v
}

// Addr is the verifier's address.
func (v *Node) Addr() string { return v.addr }

// Client is the verifier's VerifyService over the node's connection.
func (v *Node) Client() verifyv1.VerifyServiceClient { return v.client }

// Eligible reports whether v may be picked at all (its breaker and
// ejection aside): its health says SERVING and it has not left.
func (v *Node) Eligible() bool { return v.serving.Load() && !v.retired.Load() }

// Breaker is v's circuit breaker under the current settings.
func (v *Node) Breaker() *breaker.Breaker { return v.brk.Load() }

// Pending is how many calls hold a slot on v.
func (v *Node) Pending() int64 { return v.pending.Load() }

// Workers is v's worker count from its last answer, 0 before one (or once
// forgotten).
func (v *Node) Workers() int64 { return v.workers.Load() }

// ServiceTime is the median of v's service times of the last
// serviceWindow, weighted by the cost v expected of each call; 0 with none.
func (v *Node) ServiceTime() time.Duration { return v.service.median() }

// QueueBound is the longest queue wait v said it admits an arrival to, 0
// when it named none (or it was forgotten).
func (v *Node) QueueBound() time.Duration { return time.Duration(v.maxWait.Load()) }

// Queue is how many calls v may hold beyond its workers now, and whether
// that is the standing size (its queue stood above it) or the burst size,
// and the standing size itself.
func (v *Node) Queue() (queue int64, standing bool, standingSize int64) {
	return v.queue.Load(), v.standing.Load(), v.standingQueue.Load()
}

// retire takes v out of rotation at once; its connection closes when its
// outstanding calls are answered, or after the Set's RetireFor.
func (v *Node) retire() {
	v.retired.Store(true)
	v.serving.Store(false)
	if v.stop != nil {
		v.stop()
	}
}

// Answer is what one call to a verifier came back with.
type Answer struct {
	// Err is the call's error; nil when it was answered.
	Err error
	// Trailer is the verifier's trailer (its account of the work, its
	// pushback).
	Trailer metadata.MD
	// Cut is true when the gateway cancelled the call itself because its
	// caller had given up (the autopilot): the answer says nothing of the
	// verifier.
	Cut bool
}

// Outcome is what an answer says of the verifier.
type Outcome int

const (
	// Answered: it ran the call, or refused the caller's input (OK,
	// INVALID_ARGUMENT).
	Answered Outcome = iota
	// Overloaded: its own overload refusal, RESOURCE_EXHAUSTED with a
	// do-not-retry pushback. A load signal, not a fault.
	Overloaded
	// Failed: the node failed the call (UNAVAILABLE, INTERNAL, UNKNOWN,
	// DATA_LOSS, UNIMPLEMENTED); its breaker counts it.
	Failed
	// Other: nothing about the node (a deadline passing, a caller
	// cancelling, a transport limit).
	Other
	// Cut: the gateway cancelled the call (Answer.Cut).
	Cut
)

// Verdict is what Observe made of an answer.
type Verdict struct {
	Outcome Outcome
	// Code is the answer's status code.
	Code codes.Code
	// Served is the verifier's account of the work (fields -1 when absent).
	Served callmeta.Served
	// PushedBack is true when the answer carried a pushback trailer.
	PushedBack bool
	// SlotsChanged is true when what v may hold changed (its worker count,
	// its queue bound or its queue size): the gateway refits its ceiling.
	SlotsChanged bool
}

// Observe takes what one call sent to v came back with, once: it releases
// the call's slot and feeds every mechanism that watches v (worker count
// and queue bound, queue sizes, outlier counts, breaker, service time,
// metrics). An answer the gateway cut is not held against v.
func (v *Node) Observe(a Answer) Verdict {
	v.release()
	now := v.set.clock.Now()
	served := callmeta.ServedFrom(a.Trailer)
	verdict := Verdict{Served: served}
	if v.saw(served, now) {
		v.fitQueue(now)
		verdict.SlotsChanged = true
	}
	if a.Cut {
		verdict.Outcome = Cut
		return verdict
	}
	code := status.Code(a.Err)
	verdict.Code = code
	// The caller's input and the caller leaving say nothing of the node. A
	// deadline it refused counts as a bad answer: the outlier ejector
	// judges each node against its peers, and a caller's tight deadlines
	// reach every node alike, while a node slower than its peers (a CPU
	// cut) refuses deadlines they meet.
	good := code == codes.OK || code == codes.InvalidArgument || code == codes.Canceled
	v.addAnswer(now, good)
	if !good {
		v.set.judgeSoon(now)
	}
	switch code {
	case codes.OK, codes.InvalidArgument:
		verdict.Outcome = Answered
		v.brk.Load().Record(true)
		v.set.metrics.result(v, "ok")
		if served.Service > 0 {
			v.service.observe(served.Service, served.Expected, now)
			if v.fitQueue(now) {
				verdict.SlotsChanged = true
			}
		}
	case codes.ResourceExhausted:
		if _, retry, present := callmeta.PushbackFrom(a.Trailer); !present || retry {
			// Not the verifier's own overload refusal (which always says
			// "do not retry"): a transport limit, say. Counting it as
			// overload would let any caller who can provoke it hold the
			// limit at its floor.
			verdict.Outcome = Other
			v.set.metrics.result(v, "other")
			break
		}
		verdict.Outcome = Overloaded
		v.set.metrics.result(v, "overloaded")
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.DataLoss, codes.Unimplemented:
		verdict.Outcome = Failed
		v.brk.Load().Record(false)
		v.set.metrics.result(v, "failure")
		_, _, verdict.PushedBack = callmeta.PushbackFrom(a.Trailer)
	default:
		// DEADLINE_EXCEEDED (the verifier's refusal of this caller's
		// deadline, or the deadline passing while the call was out),
		// CANCELED and the rest say nothing about the node's health: a
		// deadline passing under load is the limiter's business, and
		// tripping breakers on overload would turn it into an outage.
		verdict.Outcome = Other
		v.set.metrics.result(v, "other")
	}
	return verdict
}

// Hold counts a call sent to v without a slot (the unguarded gateway's);
// ObserveUnguarded ends it.
func (v *Node) Hold() { v.pending.Add(1) }

// ObserveUnguarded ends a call Hold counted and keeps what the bistability
// margin needs of its trailer: the worker count and the service time.
func (v *Node) ObserveUnguarded(trailer metadata.MD) {
	v.pending.Add(-1)
	served := callmeta.ServedFrom(trailer)
	if served.Workers > 0 {
		v.workers.Store(int64(served.Workers))
	}
	if served.Service > 0 {
		v.service.observe(served.Service, served.Expected, v.set.clock.Now())
	}
}
