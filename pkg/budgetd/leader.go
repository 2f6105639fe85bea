package budgetd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leveehq/levee/internal/backoff"
	"github.com/leveehq/levee/pkg/ledger"
)

// Errors that end a term; runElection campaigns again after them.
var (
	errSessionLost = errors.New("etcd session lost")
	errKeyLost     = errors.New("election key gone when the campaign ended")
)

// electionPrefix is where the replicas campaign: concurrency.Election keys
// live under it, each holding its replica's advertised address.
func (s *Server) electionPrefix() string { return s.cfg.Prefix + "election" }

// fenceMargin is how long before its session could expire in etcd a leader
// stops granting: it covers the round trip of a renewal and the gap between
// clocks' rates, so that the old leader has stopped before etcd lets a new
// one win. It stays below the renewal period (TTL/3), so one missed renewal
// does not pause grants.
func fenceMargin(ttl time.Duration) time.Duration {
	return max(ttl/5, 250*time.Millisecond)
}

// runElection campaigns for leadership, term after term, until ctx ends.
func (s *Server) runElection(ctx context.Context, cli *clientv3.Client) {
	b := backoff.New(100*time.Millisecond, s.cfg.ElectionTTL)
	var stale clientv3.LeaseID // the lease of a session lost, to revoke when etcd is back
	failing := false           // log an outage once, not every retry
	for {
		sessions := s.sessions.Load()
		err := s.term(ctx, cli, &stale)
		if ctx.Err() != nil {
			return
		}
		if s.sessions.Load() != sessions { // the term had a session: a new failure
			b.Reset()
			failing = false
		}
		switch {
		case failing, errors.Is(err, errSessionLost): // already logged
			s.log.Debug("budgetd campaigning again", "err", err)
		default:
			s.log.Warn("budgetd campaigning again", "err", err)
		}
		failing = true
		if !b.Wait(ctx) {
			return
		}
	}
}

// term is one etcd session: campaign, lead until the session ends or ctx
// does, then resign. It returns nil only when ctx ended. If the session is
// lost, its lease is left in *stale.
//
// Calls that must outlive ctx (resigning, revoking) run on the client's own
// context with a timeout: Serve abandons the client when etcd does not
// answer during a shutdown, which ends them.
func (s *Server) term(ctx context.Context, cli *clientv3.Client, stale *clientv3.LeaseID) error {
	sent := time.Now()
	gctx, cancel := context.WithTimeout(ctx, s.cfg.ElectionTTL)
	lease, err := cli.Grant(gctx, s.cfg.electionTTLSeconds())
	cancel()
	if err != nil {
		return fmt.Errorf("grant session lease: %w", err)
	}
	granted := time.Duration(lease.TTL) * time.Second
	hold := granted - fenceMargin(granted)
	if *stale != clientv3.NoLease {
		// A session lost while etcd was unreachable still holds its
		// election key until its TTL runs out after etcd's restart; deleting
		// it lets the election proceed at once.
		s.revokeLease(cli, *stale)
		*stale = clientv3.NoLease
	}

	// The session outlives ctx (the replica resigns before ending it), not
	// the client.
	sctx, endSession := context.WithCancel(cli.Ctx())
	acks, err := cli.KeepAlive(sctx, lease.ID)
	if err != nil {
		endSession()
		s.revokeLease(cli, lease.ID)
		return fmt.Errorf("keep session alive: %w", err)
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID),
		concurrency.WithTTL(int(lease.TTL)), concurrency.WithContext(sctx))
	if err != nil {
		endSession()
		for range acks { // closes once the lease client sees sctx end
		}
		s.revokeLease(cli, lease.ID)
		return fmt.Errorf("session: %w", err)
	}
	s.sessions.Add(1)
	s.mu.Lock()
	s.sessionUp = true
	s.grantUntil = sent.Add(hold)
	s.updateHealthLocked()
	s.mu.Unlock()

	var wg sync.WaitGroup
	// Every renewal etcd acknowledges extends the time this replica may
	// grant; without renewals grants stop before etcd could expire the
	// session and elect another leader.
	wg.Go(func() {
		for range acks {
			until := time.Now().Add(hold)
			s.mu.Lock()
			s.grantUntil = until
			s.mu.Unlock()
		}
	})
	// The session ending by itself (etcd unreachable for a TTL, or the
	// lease expired) is a loss: it is noted at once, and ends a campaign.
	cctx, stopCampaign := context.WithCancel(ctx)
	ended := make(chan struct{}) // closed when this function ends the session
	var lost atomic.Bool
	var lostOnce sync.Once
	markLost := func() {
		lostOnce.Do(func() {
			lost.Store(true)
			s.sessionLost()
		})
	}
	wg.Go(func() {
		select {
		case <-sess.Done():
			if !isDone(ended) && ctx.Err() == nil {
				markLost()
			}
		case <-ended:
		}
		stopCampaign()
	})
	// checkLost, before end: a session that ended by itself while ctx
	// lives is lost, whichever goroutine noticed first.
	checkLost := func() {
		if isDone(sess.Done()) && ctx.Err() == nil {
			markLost()
		}
	}
	end := func() error {
		close(ended)
		stopCampaign()
		endSession()
		wg.Wait()
		s.mu.Lock()
		s.sessionUp = false
		s.updateHealthLocked()
		s.mu.Unlock()
		if lost.Load() {
			*stale = lease.ID
			return errSessionLost
		}
		s.revokeLease(cli, lease.ID)
		return nil
	}

	el := concurrency.NewElection(sess, s.electionPrefix())
	s.mu.Lock()
	self := s.self
	s.mu.Unlock()
	if err := el.Campaign(cctx, self); err != nil {
		checkLost()
		if lerr := end(); lerr != nil || ctx.Err() != nil {
			return lerr
		}
		return fmt.Errorf("campaign: %w", err)
	}
	// Campaign returns once every earlier candidate is gone, even if this
	// replica's own key went with an expired session meanwhile.
	if resp, err := cli.Get(cctx, el.Key()); err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].Lease != int64(lease.ID) {
		checkLost()
		if lerr := end(); lerr != nil || ctx.Err() != nil {
			return lerr
		}
		if err != nil {
			return fmt.Errorf("check election key: %w", err)
		}
		return errKeyLost
	}

	s.becomeLeader()
	select {
	case <-ctx.Done():
	case <-sess.Done():
	}
	s.stepDown()
	checkLost()
	if ctx.Err() != nil && !isDone(sess.Done()) {
		// Resign first: the successor's campaign ends on the deletion.
		rctx, cancel := context.WithTimeout(cli.Ctx(), shutdownGrace)
		if err := el.Resign(rctx); err != nil {
			s.log.Warn("resigning failed; the successor waits for the session to expire", "err", err)
		}
		cancel()
	}
	return end()
}

// sessionLost notes that the etcd session ended by itself.
func (s *Server) sessionLost() {
	s.metrics.sessionLosses.Inc()
	s.mu.Lock()
	s.sessionUp = false
	s.updateHealthLocked()
	s.mu.Unlock()
	s.log.Warn("budgetd lost its etcd session; not leading until etcd answers and it is elected again")
}

// revokeLease ends a session lease (and deletes its election key) without
// waiting past shutdownGrace: if etcd does not answer, the lease expires by
// itself.
func (s *Server) revokeLease(cli *clientv3.Client, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(cli.Ctx(), shutdownGrace)
	defer cancel()
	if _, err := cli.Revoke(rctx, id); err != nil {
		s.log.Debug("revoking a session lease failed; it expires by itself", "lease", int64(id), "err", err)
	}
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// becomeLeader starts a term with empty ledgers: nothing saved, so a new
// leader grants only what the fleet earns from now on (no fresh burst for
// everyone), and learns the fleet's rates from the reports that follow.
func (s *Server) becomeLeader() {
	s.mu.Lock()
	s.leading = true
	s.ledgers = map[string]*ledger.Ledger{}
	s.reporters = newReporters(s.cfg.MaxClientRate, s.cfg.ForgetAfter, s.cfg.MaxClientsPerIdentity)
	s.updateHealthLocked()
	s.mu.Unlock()
	s.metrics.isLeader.Set(1)
	s.metrics.acquired.Inc()
	s.metrics.keys.Set(0)
	s.metrics.clients.Set(0)
	s.log.Info("budgetd leading", "advertise", s.Addr())
}

func (s *Server) stepDown() {
	s.mu.Lock()
	s.leading = false
	s.ledgers = nil
	s.reporters = nil
	s.updateHealthLocked()
	s.mu.Unlock()
	s.metrics.isLeader.Set(0)
	s.metrics.keys.Set(0)
	s.metrics.clients.Set(0)
	s.log.Info("budgetd stepped down")
}

// observeLeader keeps leaderAddr up to date: the value of the oldest key
// under the election prefix is the leader's address.
func (s *Server) observeLeader(ctx context.Context, cli *clientv3.Client) {
	pfx := s.electionPrefix() + "/"
	b := backoff.New(50*time.Millisecond, s.cfg.RefreshInterval)
	for {
		resp, err := cli.Get(ctx, pfx, clientv3.WithFirstCreate()...)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Debug("reading the leader failed", "err", err)
			if !b.Wait(ctx) {
				return
			}
			continue
		}
		leader := ""
		if len(resp.Kvs) > 0 {
			leader = string(resp.Kvs[0].Value)
		}
		s.setLeaderAddr(leader)

		// Any change under the prefix may change the oldest key: read again.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := cli.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		changed := false
		for wr := range wch {
			if wr.Err() != nil {
				s.log.Debug("watching the leader failed", "err", wr.Err())
				break
			}
			if len(wr.Events) > 0 {
				changed = true
				break
			}
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if changed {
			b.Reset()
		} else if !b.Wait(ctx) {
			return
		}
	}
}

func (s *Server) setLeaderAddr(addr string) {
	s.mu.Lock()
	old := s.leaderAddr
	s.leaderAddr = addr
	s.updateHealthLocked()
	s.mu.Unlock()
	if old != addr {
		s.log.Info("budgetd leader observed", "leader", addr)
	}
}
