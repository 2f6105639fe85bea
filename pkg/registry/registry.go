// Package registry announces a server in etcd, under a lease, in the format
// of etcd's gRPC naming (go.etcd.io/etcd/client/v3/naming/endpoints), so
// that a client dialing "etcd:///" + target through the naming resolver
// (go.etcd.io/etcd/client/v3/naming/resolver) follows the fleet as nodes come
// and go. Verifiers register under DefaultTarget.
//
// A Registration promises:
//
//   - Once Register returns, the key <Target>/<Addr> holds Addr, attached
//     to a lease of TTL that a goroutine of the Registration keeps alive.
//   - A node that dies without Close disappears within TTL, when its lease
//     expires; so does one cut off from etcd for longer than TTL.
//   - A lost lease (expired while etcd was unreachable, or revoked) is
//     re-granted and the key added again, retrying with jittered backoff
//     until Close: one WARN log per loss, one INFO when registered again.
//   - Close removes the key at once (gateways stop routing to the node
//     without waiting for TTL), revokes the lease, and returns only after
//     the goroutine has ended.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"

	"github.com/leveehq/levee/internal/backoff"
)

// retryMin is the first ceiling of the wait before registering again (full
// jitter below it, internal/backoff); ceilings double up to the TTL, so a
// node is back within about a TTL of etcd's return.
const retryMin = 250 * time.Millisecond

// errClosed is the cause the loop's context ends with when Close stops it,
// to tell Close from the client being closed under the registration.
var errClosed = errors.New("registry: closed")

// errClientClosed explains a registration that ended because its client
// was closed.
var errClientClosed = errors.New("etcd client closed")

// Registration is one endpoint kept registered in etcd. Create it with
// Register; end it with Close.
type Registration struct {
	cli *clientv3.Client
	em  endpoints.Manager
	key string
	ep  endpoints.Endpoint
	ttl time.Duration
	log *slog.Logger

	stop context.CancelCauseFunc // ends the keep-alive loop
	done chan struct{}           // closed when the loop has returned

	registered atomic.Bool

	mu    sync.Mutex
	lease clientv3.LeaseID // the lease last granted, which the key is (to be) under

	closeOnce sync.Once
	closeErr  error
}

// Register adds cfg.Addr under cfg.Target with a lease of cfg.TTL and
// keeps the lease alive in a goroutine until Close.
//
// A first attempt that fails (etcd unreachable) is logged once at WARN and
// retried with jittered backoff until it succeeds or ctx ends: ctx bounds
// only the first registration, not the Registration's life; a caller that
// would rather give up passes a ctx with a deadline. When Register returns
// an error nothing is left running, and whatever a failed attempt wrote
// expires with its lease within TTL.
func Register(ctx context.Context, cfg Config) (*Registration, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	em, err := endpoints.NewManager(cfg.Client, cfg.Target)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	key := cfg.Target + "/" + cfg.Addr
	r := &Registration{
		cli:  cfg.Client,
		em:   em,
		key:  key,
		ep:   endpoints.Endpoint{Addr: cfg.Addr},
		ttl:  cfg.TTL,
		log:  cfg.Logger.With("key", key),
		done: make(chan struct{}),
	}
	// The loop lives until Close or until the client is closed: then nothing
	// can reach etcd any more, and the key expires with its lease.
	loopCtx, stop := context.WithCancelCause(cfg.Client.Ctx())
	r.stop = stop

	// The first registration ends with ctx or with the client.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(loopCtx, cancel)()

	var ka <-chan *clientv3.LeaseKeepAliveResponse
	for attempt := 0; ; attempt++ {
		if ka, err = r.register(rctx, loopCtx); err == nil {
			break
		}
		if attempt == 0 {
			r.log.Warn("etcd registration failed; retrying", "err", err)
		} else {
			r.log.Debug("etcd registration failed; retrying", "err", err, "attempt", attempt+1)
		}
		if !backoff.Sleep(rctx, backoff.Full(attempt+1, retryMin, r.ttl)) {
			stop(errClosed)
			why := ctx.Err()
			if why == nil {
				why = errClientClosed
			}
			return nil, fmt.Errorf("registry: register %s: %w; last attempt: %w", key, why, err)
		}
	}
	r.registered.Store(true)
	r.log.Info("registered in etcd", "lease", leaseHex(r.currentLease()), "ttl", r.ttl)
	go r.run(loopCtx, ka)
	return r, nil
}

// Key is the etcd key the endpoint is registered under: Target/Addr.
func (r *Registration) Key() string { return r.key }

// Registered says whether the endpoint is in etcd, to the best of the
// Registration's knowledge: true from Register until a lease loss is noticed
// (its keep-alive fails, within TTL of etcd becoming unreachable) and again
// once registered anew; false after Close. A key deleted by hand while its
// lease lives goes unnoticed.
func (r *Registration) Registered() bool { return r.registered.Load() }

// Close stops the keep-alive goroutine and waits for it, then deletes the
// key (unless another lease has taken it over) and revokes the lease, so
// the endpoint vanishes at once rather than after TTL. ctx bounds the calls
// to etcd; if they fail, the key still expires with the lease within TTL,
// and the error says so. Close is idempotent: later calls return the first
// call's result.
func (r *Registration) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.stop(errClosed)
		<-r.done
		r.registered.Store(false)
		r.closeErr = r.deregister(ctx)
	})
	return r.closeErr
}

func (r *Registration) deregister(ctx context.Context) error {
	lease := r.currentLease()
	if r.cli.Ctx().Err() != nil {
		// A closed client's calls fail only after its retry backoff.
		return fmt.Errorf("registry: deregister %s (it expires within %v): %w", r.key, r.ttl, errClientClosed)
	}
	// A conditional delete: were the key re-added under another lease (the
	// same address registered by a newer process), it is not ours to delete.
	_, derr := r.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(r.key), "=", lease)).
		Then(clientv3.OpDelete(r.key)).
		Commit()
	_, rerr := r.cli.Revoke(ctx, lease)
	if errors.Is(rerr, rpctypes.ErrLeaseNotFound) {
		rerr = nil // expired already, and the key with it
	}
	if err := errors.Join(derr, rerr); err != nil {
		return fmt.Errorf("registry: deregister %s (it expires within %v): %w", r.key, r.ttl, err)
	}
	r.log.Info("deregistered from etcd", "lease", leaseHex(lease))
	return nil
}

// register makes one attempt, bounded by ctx and by the TTL (an etcd that
// cannot answer within the TTL could not keep the lease alive either):
// grant a lease, add the endpoint with it, and start keeping it alive for
// as long as loopCtx lasts.
func (r *Registration) register(ctx, loopCtx context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	actx, cancel := context.WithTimeout(ctx, r.ttl)
	defer cancel()
	grant, err := r.cli.Grant(actx, int64(r.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	// From here on Close revokes the new lease: an add that fails on our
	// side may still have been applied by etcd. (The lease before it was
	// lost: expired or revoked, as far as etcd answered.)
	r.mu.Lock()
	r.lease = grant.ID
	r.mu.Unlock()
	if err := r.em.AddEndpoint(actx, r.key, r.ep, clientv3.WithLease(grant.ID)); err != nil {
		return nil, fmt.Errorf("add endpoint: %w", err)
	}
	ka, err := r.cli.KeepAlive(loopCtx, grant.ID)
	if err != nil {
		return nil, fmt.Errorf("keep lease alive: %w", err)
	}
	return ka, nil
}

// run keeps the lease alive by consuming its keep-alive responses; when the
// channel closes while ctx lives, the lease is lost (expired, revoked, or
// etcd silent for a TTL), and run registers again until it succeeds or ctx
// ends.
func (r *Registration) run(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.done)
	defer r.registered.Store(false)
	for {
		if !awaitLoss(ctx, ka) {
			break
		}
		r.registered.Store(false)
		lost := time.Now()
		r.log.Warn("etcd registration lost; registering again", "lease", leaseHex(r.currentLease()), "ttl", r.ttl)
		var err error
		for attempt := 0; ; attempt++ {
			if ka, err = r.register(ctx, ctx); err == nil {
				r.registered.Store(true)
				r.log.Info("registered in etcd again", "lease", leaseHex(r.currentLease()),
					"after", time.Since(lost).Round(time.Millisecond), "attempts", attempt+1)
				break
			}
			r.log.Debug("etcd registration failed; retrying", "err", err, "attempt", attempt+1)
			if !backoff.Sleep(ctx, backoff.Full(attempt+1, retryMin, r.ttl)) {
				break
			}
		}
		if err != nil {
			break
		}
	}
	if cause := context.Cause(ctx); !errors.Is(cause, errClosed) {
		r.log.Warn("etcd client closed under the registration; the key expires with its lease",
			"lease", leaseHex(r.currentLease()), "ttl", r.ttl, "err", cause)
	}
}

// awaitLoss consumes keep-alive responses until the channel closes (true:
// the lease is lost) or ctx ends (false).
func awaitLoss(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case _, ok := <-ka:
			if !ok {
				// Cancelling ctx closes the channel too: not a loss.
				return ctx.Err() == nil
			}
		}
	}
}

func (r *Registration) currentLease() clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lease
}

// leaseHex formats a lease ID as etcdctl shows it.
func leaseHex(id clientv3.LeaseID) string { return strconv.FormatInt(int64(id), 16) }
