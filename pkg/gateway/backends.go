package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/backoff"
	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/callmeta"
)

// backend is one verifier as the gateway sees it: a connection of its own,
// the calls outstanding on it, its circuit breaker, and whether its health
// stream says it serves. Request-path fields are atomics.
type backend struct {
	addr    string
	cc      *grpc.ClientConn
	client  verifyv1.VerifyServiceClient
	brk     atomic.Pointer[breaker.Breaker]
	pending atomic.Int64 // calls holding a slot on it: forwarded or about to be
	workers atomic.Int64 // its workers, from its last answer (0: not known, or forgotten)
	workAt  atomic.Int64 // unix nanos of the last answer that said how many
	queue   atomic.Int64 // calls it may hold beyond its workers (see Gateway.fitQueues)
	// maxWait is the longest queue wait it admits an arrival to, in
	// nanoseconds, from its last answer (0: not reported, or forgotten with
	// the worker count).
	maxWait atomic.Int64
	// queueSizes and burstSizes hold the standing and burst queue sizes its
	// service times asked for over the last seconds (see fitQueue).
	queueSizes, burstSizes maxWindow
	// standingQueue is the standing size fitQueue last set; standing says
	// its queue stood above that for a whole second and has not drained
	// since; lowPending is the fewest calls held at it in the current
	// second, plus one: the count carried into the second, or less after a
	// release; released says a slot was released in the current second.
	// See judgeStanding.
	standingQueue atomic.Int64
	standing      atomic.Bool
	lowPending    atomic.Int64
	released      atomic.Bool
	serving       atomic.Bool  // last word of its health stream
	service       serviceTimes // its recent service times, for the capacity estimate and its queue
	answers       answerCounts // its recent answers, good and bad, for outlier ejection
	eject         ejection     // whether, and until when, it is ejected as an outlier
	retired       atomic.Bool  // left the membership; never picked again

	stop context.CancelFunc
	done chan struct{} // closed when its goroutine (health, then close) ends
}

// fitQueue sizes b's queue in time (see Gateway.fitQueues): the standing
// size, what its workers finish in delay at its median service time
// (queueFor), and the burst size, what they finish in the burst bound its
// own queue bound allows (burstDelay); the burst size unless its queue
// stands. Each is held at the largest asked for over the last seconds
// (queueSizes and burstSizes, rolled once a second by the gateway's
// housekeeping, and emptied when the worker count changes: sizes held for
// other workers would over-credit it). A burst of slow hashes — the host
// busy for a moment — then takes no slots away from the next Poisson burst
// (the verifier's own admission still bounds the wait, by its projections);
// a slowdown that lasts shrinks the queue once the held sizes have rolled
// out. It reports whether the size changed.
func (b *backend) fitQueue(delay time.Duration) bool {
	service := b.service.median()
	workers := max(b.workers.Load(), 1)
	standing := queueFor(workers, service, delay)
	b.queueSizes.add(standing)
	standing = max(standing, b.queueSizes.peek())
	burst := queueFor(workers, service, burstDelay(delay, time.Duration(b.maxWait.Load()), service))
	b.burstSizes.add(burst)
	burst = max(burst, b.burstSizes.peek(), standing)
	b.standingQueue.Store(standing)
	q := burst
	if b.standing.Load() {
		q = standing
	}
	return b.queue.Swap(q) != q
}

// judgeStanding is CoDel's standing-queue test on the calls the gateway
// holds at b, once a second (the gateway's housekeeping, before fitQueues).
// The fewest it held in the second just ended — the count carried into the
// second, or less right after a release — tells whether the queue stood:
// when even that was more than its workers plus its standing queue, it
// stood there the whole second, which no burst of a healthy load does, and
// b gets the standing size until its queue drains: a second in which, at
// some moment, a worker had no call (fewer held than workers, right after a
// release, before the slot was taken again; a queue held full at the
// standing size never shows that, whatever its size). A second in which no
// slot was released is no evidence either way (a stalled verifier is
// neither judged standing nor drained), unless fewer calls than workers are
// held: idle is drained. The way back does not need the traffic the smaller
// size refuses: the calls it still admits come back and drain it, and with
// no traffic at all it is idle.
func (b *backend) judgeStanding() {
	workers := max(b.workers.Load(), 1)
	pending := b.pending.Load()
	released := b.released.Swap(false)
	low := b.lowPending.Swap(pending+1) - 1
	if !released {
		if pending < workers {
			b.standing.Store(false)
		}
		return
	}
	switch {
	case low > workers+b.standingQueue.Load():
		b.standing.Store(true)
	case low < workers:
		b.standing.Store(false)
	}
}

// eligible reports whether b may be picked at all (its breaker aside).
func (b *backend) eligible() bool { return b.serving.Load() && !b.retired.Load() }

// saw records what an answer says of the verifier itself, its worker count
// and its queue bound, and reports whether either changed. An account that
// says how many workers but names no bound (an unguarded node, or one from
// before the bound was reported) clears the bound; a changed bound forgets
// the burst sizes held for the old one.
func (b *backend) saw(s callmeta.Served) bool {
	if s.Workers <= 0 {
		return false
	}
	changed := b.sawWorkers(int64(s.Workers))
	bound := int64(max(s.MaxQueueWait, 0))
	if b.maxWait.Swap(bound) != bound {
		b.burstSizes.reset()
		changed = true
	}
	return changed
}

// sawWorkers records an answer's worker count and reports whether it changed.
// Sizes held for another worker count are forgotten.
func (b *backend) sawWorkers(w int64) bool {
	b.workAt.Store(time.Now().UnixNano())
	if b.workers.Swap(w) == w {
		return false
	}
	b.queueSizes.reset()
	b.burstSizes.reset()
	return true
}

// expireWorkers forgets a worker count that no answer confirmed for
// workersTTL, the queue sizes held for it, and the queue bound: a verifier
// that only refuses is credited with neither.
func (b *backend) expireWorkers(now time.Time) {
	if at := b.workAt.Load(); at != 0 && now.UnixNano()-at > int64(workersTTL) && b.workers.Swap(0) != 0 {
		b.queueSizes.reset()
		b.burstSizes.reset()
		b.maxWait.Store(0)
	}
}

// workersTTL is how long a verifier's reported worker count is believed
// without an answer repeating it.
const workersTTL = 10 * time.Second

// slots is how many calls b may hold at once: its workers (one until its
// first answer says how many it runs), plus the calls it may queue, plus
// extra (the critical slot).
func (b *backend) slots(extra int64) int64 {
	return max(b.workers.Load(), 1) + b.queue.Load() + extra
}

// totalSlots is what every eligible verifier can hold at once, critical
// slots aside.
func (bs *backends) totalSlots() int64 {
	var n int64
	for _, b := range bs.list() {
		if b.eligible() {
			n += b.slots(0)
		}
	}
	return n
}

// reserve takes one of b's slots; false if they are all held.
func (b *backend) reserve(extra int64) bool {
	limit := b.slots(extra)
	for {
		n := b.pending.Load()
		if n >= limit {
			return false
		}
		if b.pending.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives back a slot taken by reserve, once the call was sent.
func (b *backend) release() {
	n := b.pending.Add(-1) + 1 // stored plus one, as lowPending
	if !b.released.Load() {
		b.released.Store(true)
	}
	for {
		low := b.lowPending.Load()
		if n >= low || b.lowPending.CompareAndSwap(low, n) {
			return
		}
	}
}

// unsent gives back a slot and the breaker's admission of a call that pick
// chose b for and that was refused before it was sent: a half-open
// breaker's probe is due again (breaker.Breaker.Cancel), since this one
// never reached the node.
func (b *backend) unsent() {
	b.brk.Load().Cancel()
	b.release()
}

// backends is the set of verifiers: the static ones plus those registered in
// etcd. Picking reads an immutable snapshot without locks.
type backends struct {
	log       *slog.Logger
	newBrk    func() *breaker.Breaker
	retireFor time.Duration // how long a retired backend's calls may finish
	dialOpts  []grpc.DialOption
	onChange  func(added, removed []string)

	mu      sync.Mutex
	static  map[string]bool
	dynamic map[string]string // etcd key → addr
	byAddr  map[string]*backend
	closed  bool
	wg      sync.WaitGroup // one per backend goroutine

	snap atomic.Pointer[[]*backend]
	rr   atomic.Uint64 // round-robin position of next
}

func newBackends(log *slog.Logger, static []string, newBrk func() *breaker.Breaker, retireFor, probe time.Duration,
	transport grpc.DialOption, onChange func(added, removed []string)) *backends {
	bs := &backends{
		log:       log,
		newBrk:    newBrk,
		retireFor: retireFor,
		dialOpts: []grpc.DialOption{
			transport,
			// One layer retries, and it is the gateway's own, budgeted.
			grpc.WithDisableRetry(),
		},
		onChange: onChange,
		static:   map[string]bool{},
		dynamic:  map[string]string{},
		byAddr:   map[string]*backend{},
	}
	if probe > 0 {
		bs.dialOpts = append(bs.dialOpts,
			// A hung verifier (stopped, paused, its host wedged) keeps its
			// TCP connection, and its health stream says nothing: an
			// HTTP/2 ping unanswered for probe closes the connection,
			// which ends the health stream and takes it out of rotation.
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: probe, Timeout: probe, PermitWithoutStream: true}),
			// And when it answers again, it is back within a couple of
			// seconds, not grpc's default backoff of up to two minutes.
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
				MinConnectTimeout: 2 * time.Second,
			}))
	}
	empty := []*backend{}
	bs.snap.Store(&empty)
	bs.mu.Lock()
	for _, a := range static {
		bs.static[a] = true
	}
	bs.reconcileLocked()
	bs.mu.Unlock()
	return bs
}

// list returns the current snapshot; callers must not modify it.
func (bs *backends) list() []*backend { return *bs.snap.Load() }

// pick chooses a verifier by the power of two choices on outstanding calls
// among those eligible, not excluded and with a free slot (workers + queue +
// extra, see backend.slots), reserves the slot and then asks the chosen one's
// breaker (a half-open breaker admits only its ramp's fraction): the caller
// must release the slot, with release once the call was sent, with unsent
// if it is refused before. It returns nil when no verifier will take the call now, and
// then says whether any verifier was serving at all (busy, not down).
func (bs *backends) pick(exclude *backend, extra int64) (chosen *backend, serving bool) {
	list := bs.list()
	n := len(list)
	if n == 0 {
		return nil, false
	}
	try := func(c *backend) bool {
		if c == exclude || !c.eligible() {
			return false
		}
		serving = true
		if c.eject.ejectedNow() {
			return false
		}
		// The slot first, the breaker last: a half-open breaker's probe
		// must not be spent on a verifier with no free slot.
		if !c.reserve(extra) {
			return false
		}
		if !c.brk.Load().Allow() {
			c.release()
			return false
		}
		return true
	}
	// Two distinct random candidates, the less loaded first.
	i := rand.IntN(n)
	j := i
	if n > 1 {
		j = (i + 1 + rand.IntN(n-1)) % n
	}
	a, b := list[i], list[j]
	if b.pending.Load() < a.pending.Load() {
		a, b = b, a
	}
	if try(a) {
		return a, true
	}
	if b != a && try(b) {
		return b, true
	}
	// Both full or refused: walk the rest from a random start (O(n), fair).
	start := rand.IntN(n)
	for k := range n {
		c := list[(start+k)%n]
		if c != a && c != b && try(c) {
			return c, true
		}
	}
	return nil, serving
}

// next returns the next eligible verifier in round-robin order, slots and
// breakers aside (the unguarded gateway's balancing), or nil when none is.
func (bs *backends) next() *backend {
	list := bs.list()
	start := bs.rr.Add(1)
	for k := range uint64(len(list)) {
		if b := list[(start+k)%uint64(len(list))]; b.eligible() {
			return b
		}
	}
	return nil
}

// Snapshot implements etcdwatch.Handler for the registration prefix.
func (bs *backends) Snapshot(kvs []*mvccpb.KeyValue) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	bs.dynamic = map[string]string{}
	for _, kv := range kvs {
		if addr, ok := bs.decode(kv); ok {
			bs.dynamic[string(kv.Key)] = addr
		}
	}
	bs.reconcileLocked()
}

// Events implements etcdwatch.Handler.
func (bs *backends) Events(evs []*clientv3.Event) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, ev := range evs {
		switch ev.Type {
		case mvccpb.PUT:
			if addr, ok := bs.decode(ev.Kv); ok {
				bs.dynamic[string(ev.Kv.Key)] = addr
			}
		case mvccpb.DELETE:
			delete(bs.dynamic, string(ev.Kv.Key))
		}
	}
	bs.reconcileLocked()
}

// decode reads a registration written by endpoints.Manager.AddEndpoint.
func (bs *backends) decode(kv *mvccpb.KeyValue) (string, bool) {
	var ep endpoints.Endpoint
	if err := json.Unmarshal(kv.Value, &ep); err != nil || ep.Addr == "" || len(ep.Addr) > 256 {
		bs.log.Warn("ignoring a malformed verifier registration", "key", truncate(string(kv.Key), 80))
		return "", false
	}
	return ep.Addr, true
}

// reconcileLocked starts backends for new addresses, retires those gone, and
// publishes a new snapshot.
func (bs *backends) reconcileLocked() {
	if bs.closed {
		return
	}
	want := map[string]bool{}
	for a := range bs.static {
		want[a] = true
	}
	for _, a := range bs.dynamic {
		want[a] = true
	}
	var added, removed []string
	for a := range want {
		if _, ok := bs.byAddr[a]; ok {
			continue
		}
		b, err := bs.start(a)
		if err != nil {
			bs.log.Warn("cannot reach verifier", "addr", a, "err", err)
			continue
		}
		bs.byAddr[a] = b
		added = append(added, a)
	}
	for a, b := range bs.byAddr {
		if !want[a] {
			delete(bs.byAddr, a)
			bs.retire(b)
			removed = append(removed, a)
		}
	}
	list := make([]*backend, 0, len(bs.byAddr))
	for _, b := range bs.byAddr {
		list = append(list, b)
	}
	slices.SortFunc(list, func(x, y *backend) int { return strings.Compare(x.addr, y.addr) })
	bs.snap.Store(&list)
	if len(added)+len(removed) > 0 {
		slices.Sort(added)
		slices.Sort(removed)
		if len(added) > 0 {
			bs.log.Info("verifiers joined", "addrs", added, "count", len(list))
		}
		if len(removed) > 0 {
			bs.log.Info("verifiers left", "addrs", removed, "count", len(list))
		}
		if bs.onChange != nil {
			bs.onChange(added, removed)
		}
	}
}

// start dials addr and follows its health stream in a goroutine of its own.
func (bs *backends) start(addr string) (*backend, error) {
	cc, err := grpc.NewClient("passthrough:///"+addr, bs.dialOpts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &backend{
		addr:   addr,
		cc:     cc,
		client: verifyv1.NewVerifyServiceClient(cc),
		stop:   cancel,
		done:   make(chan struct{}),
	}
	b.brk.Store(bs.newBrk())
	bs.wg.Add(1)
	go func() {
		defer bs.wg.Done()
		defer close(b.done)
		bs.watchHealth(ctx, b)
		bs.closeWhenIdle(b)
	}()
	return b, nil
}

// watchHealth keeps b.serving equal to what the verifier's health service
// says about VerifyService: SERVING while it serves, false the moment it
// drains or its connection breaks (the stream fails with the connection).
func (bs *backends) watchHealth(ctx context.Context, b *backend) {
	hc := healthpb.NewHealthClient(b.cc)
	back := backoff.New(20*time.Millisecond, time.Second)
	service := verifyv1.VerifyService_ServiceDesc.ServiceName
	for ctx.Err() == nil {
		stream, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(true))
		if err == nil {
			for {
				resp, rerr := stream.Recv()
				if rerr != nil {
					err = rerr
					break
				}
				b.serving.Store(resp.GetStatus() == healthpb.HealthCheckResponse_SERVING)
				back.Reset()
			}
		}
		if ctx.Err() != nil {
			return
		}
		// The node is out until a new stream says SERVING: a health stream
		// ends when the connection does (the node died or restarts) or the
		// node stops serving it; it is never cut by a deadline
		// (pkg/deadline leaves streams alone).
		b.serving.Store(false)
		bs.log.Warn("health stream to verifier ended; out of rotation until it says SERVING again",
			"addr", b.addr, "err", err, "connection", b.cc.GetState().String())
		if !back.Wait(ctx) {
			return
		}
	}
}

// retire takes b out of rotation at once; its connection closes when its
// outstanding calls are answered (a draining verifier finishes its queue) or
// after retireFor.
func (bs *backends) retire(b *backend) {
	b.retired.Store(true)
	b.serving.Store(false)
	b.stop()
}

func (bs *backends) closeWhenIdle(b *backend) {
	deadline := time.Now().Add(bs.retireFor)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for b.pending.Load() > 0 && time.Now().Before(deadline) {
		<-t.C
	}
	_ = b.cc.Close()
}

// resetBreakers gives every backend a breaker under new settings. A
// breaker that was not closed hands over open (a fresh open time under the
// new settings): a settings change is not evidence that a failing verifier
// recovered, and must not put it back in full rotation.
func (bs *backends) resetBreakers() {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for _, b := range bs.byAddr {
		nb := bs.newBrk()
		if b.brk.Load().State() != breaker.Closed {
			nb.Trip()
		}
		b.brk.Store(nb)
	}
}

// close retires every backend and waits for their connections to close.
func (bs *backends) close() {
	bs.mu.Lock()
	bs.closed = true
	for a, b := range bs.byAddr {
		delete(bs.byAddr, a)
		bs.retire(b)
	}
	empty := []*backend{}
	bs.snap.Store(&empty)
	bs.mu.Unlock()
	bs.wg.Wait()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
