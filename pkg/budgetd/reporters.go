package budgetd

import (
	"strings"
	"time"
)

// reporters bounds what each identity may report to the leader, over time
// and over the client ids it reports under. An identity is the certificate
// name a lease is bound to (the part of its client id before the first
// colon), or, without TLS, the client id itself.
//
//   - Volume: an identity's first attempts and retries are credited from a
//     bucket that refills at rate a second up to rate × horizon. What a
//     report claims beyond the bucket is not credited (counted, never
//     earned): the report still succeeds, so a client that counted more
//     than its bound is not pushed into fallback and does not carry the
//     excess into its next report. Over any interval T an identity is
//     credited at most rate × (T + horizon), however many reports, client
//     ids or replicas it spreads its claims over.
//   - Breadth: an identity reports under at most maxClients client ids at
//     once; a new one beyond that is refused until one is forgotten.
//
// A new leader starts every identity with a full bucket. Not safe for
// concurrent use; the Server holds its mutex.
type reporters struct {
	rate, burst float64
	maxClients  int
	byIdentity  map[string]*reporter
}

type reporter struct {
	tokens  float64
	at      time.Time
	clients map[string]time.Time // client id → its last report
}

func newReporters(rate float64, horizon time.Duration, maxClients int) *reporters {
	return &reporters{rate: rate, burst: rate * horizon.Seconds(), maxClients: maxClients,
		byIdentity: map[string]*reporter{}}
}

// identityOf is the identity a bound client id belongs to.
func identityOf(clientID string) string {
	if i := strings.IndexByte(clientID, ':'); i >= 0 {
		return clientID[:i]
	}
	return clientID
}

// admit records a report from clientID at now. It is false, and records
// nothing, when the client id is new and its identity already reports
// under maxClients others.
func (r *reporters) admit(clientID string, now time.Time) bool {
	id := identityOf(clientID)
	rep := r.byIdentity[id]
	if rep == nil {
		rep = &reporter{tokens: r.burst, at: now, clients: map[string]time.Time{}}
		r.byIdentity[id] = rep
	}
	if _, known := rep.clients[clientID]; !known && len(rep.clients) >= r.maxClients {
		return false
	}
	rep.clients[clientID] = now
	return true
}

// credit takes n from clientID's identity's bucket and returns the fraction
// of n credited: 1 when the bucket holds n, less when it holds less. The
// client id must have been admitted.
func (r *reporters) credit(clientID string, n float64, now time.Time) float64 {
	rep := r.byIdentity[identityOf(clientID)]
	if rep == nil || n <= 0 {
		return 1
	}
	if dt := now.Sub(rep.at); dt > 0 {
		rep.tokens = min(rep.tokens+r.rate*dt.Seconds(), r.burst)
		rep.at = now
	}
	if n <= rep.tokens {
		rep.tokens -= n
		return 1
	}
	f := max(rep.tokens, 0) / n
	rep.tokens = 0
	return f
}

// forget drops client ids that have not reported for idle, and identities
// left with none whose bucket has refilled (forgetting one sooner would
// hand it a full bucket early).
func (r *reporters) forget(now time.Time, idle time.Duration) {
	for id, rep := range r.byIdentity {
		for c, last := range rep.clients {
			if now.Sub(last) > idle {
				delete(rep.clients, c)
			}
		}
		refilled := rep.tokens+r.rate*now.Sub(rep.at).Seconds() >= r.burst
		if len(rep.clients) == 0 && refilled {
			delete(r.byIdentity, id)
		}
	}
}
