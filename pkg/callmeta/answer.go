package callmeta

import (
	"math"
	"strconv"
	"time"

	"google.golang.org/grpc/metadata"
)

// The answer's trailers. PushbackKey is gRPC's own (its retry design, A6):
// "retry after N ms", and a negative or malformed value means "do not
// retry". The others are a verifier's account of a call it ran: how long the
// call waited for a worker and how long its hash took, in whole
// microseconds, the time the node expected the call to take when it
// admitted it (the weight of its service time: a cheap hash says little of
// the node's speed), how many policy hashes the node can start at once now
// (its active workers, or fewer when its memory budget holds fewer), and the
// longest queue wait it admits an arrival to (its -max-queue-wait; absent
// from a node that bounds no queue). docs/verifier.md ("What an answer
// says") is the contract: which status and trailers a verifier answers
// with, and what each means.
const (
	PushbackKey     = "grpc-retry-pushback-ms"
	QueueWaitKey    = "levee-queue-wait-us"
	ServiceTimeKey  = "levee-service-us"
	ExpectedKey     = "levee-expected-us"
	WorkersKey      = "levee-workers"
	MaxQueueWaitKey = "levee-max-queue-wait-us"
)

// maxPushback bounds a pushback read from the wire, so that converting it
// cannot overflow; a caller's deadline refuses anything near it anyway.
const maxPushback = time.Hour

// Served is what a verifier says in the trailer of every call it ran. A
// field read from a trailer that lacks it, or holds anything but one
// non-negative integer, is -1.
type Served struct {
	QueueWait time.Duration
	Service   time.Duration
	// Expected is what the node expected the call to take when it admitted
	// it (its cost model's estimate); the trailer omits it when ≤ 0.
	Expected time.Duration
	Workers  int
	// MaxQueueWait is the node's bound on an arrival's projected queue
	// wait; a node that sets none sends a MaxQueueWait ≤ 0, which the
	// trailer omits.
	MaxQueueWait time.Duration
}

// Trailer is s as the verifier sends it.
func (s Served) Trailer() metadata.MD {
	md := metadata.Pairs(
		QueueWaitKey, strconv.FormatInt(s.QueueWait.Microseconds(), 10),
		ServiceTimeKey, strconv.FormatInt(s.Service.Microseconds(), 10),
		WorkersKey, strconv.Itoa(s.Workers))
	if s.MaxQueueWait > 0 {
		md.Set(MaxQueueWaitKey, strconv.FormatInt(s.MaxQueueWait.Microseconds(), 10))
	}
	if s.Expected > 0 {
		md.Set(ExpectedKey, strconv.FormatInt(s.Expected.Microseconds(), 10))
	}
	return md
}

// ServedFrom reads a verifier's account from a call's trailer.
func ServedFrom(md metadata.MD) Served {
	w := nonNegative(md, WorkersKey)
	if w > math.MaxInt32 {
		w = -1
	}
	return Served{QueueWait: micros(md, QueueWaitKey), Service: micros(md, ServiceTimeKey),
		Expected: micros(md, ExpectedKey), Workers: int(w), MaxQueueWait: micros(md, MaxQueueWaitKey)}
}

// DoNotRetry is the pushback trailer that tells a caller not to retry: the
// fleet is overloaded, or already retried for it. It is built once; callers
// must not modify it.
var DoNotRetry = metadata.Pairs(PushbackKey, "-1")

// PushbackTrailer is the trailer that tells a caller to retry after d, in
// whole milliseconds; d < 0 is DoNotRetry.
func PushbackTrailer(d time.Duration) metadata.MD {
	if d < 0 {
		return DoNotRetry
	}
	return metadata.Pairs(PushbackKey, strconv.FormatInt(d.Milliseconds(), 10))
}

// PushbackFrom reads gRPC's pushback trailer. present is false when md has
// none. A present value that is not exactly one non-negative integer says
// "do not retry" (retry false); otherwise after is the wait it asks for,
// at most an hour.
func PushbackFrom(md metadata.MD) (after time.Duration, retry, present bool) {
	vs := md.Get(PushbackKey)
	if len(vs) == 0 {
		return 0, false, false
	}
	ms := nonNegative(md, PushbackKey)
	if ms < 0 {
		return 0, false, true
	}
	return time.Duration(min(ms, maxPushback.Milliseconds())) * time.Millisecond, true, true
}

// nonNegative reads a trailer holding one non-negative decimal integer; -1
// when it is absent, repeated or anything else.
func nonNegative(md metadata.MD, key string) int64 {
	v := md.Get(key)
	if len(v) != 1 {
		return -1
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// micros reads a whole-microseconds trailer; -1 when absent or malformed.
func micros(md metadata.MD, key string) time.Duration {
	us := nonNegative(md, key)
	if us < 0 || us > math.MaxInt64/int64(time.Microsecond) {
		return -1
	}
	return time.Duration(us) * time.Microsecond
}
