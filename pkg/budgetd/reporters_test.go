package budgetd

import (
	"fmt"
	"testing"
	"time"
)

// An identity is credited at most rate × (T + horizon) over any interval T,
// however many client ids it reports under; another identity's bucket is
// its own; and a bucket drained by claims refills while the identity is
// silent, so a client that once claimed too much is credited in full again.
func TestReportersBoundAnIdentityOverTime(t *testing.T) {
	const rate, horizon = 100.0, 10 * time.Second
	r := newReporters(rate, horizon, 8)
	now := time.Unix(1000, 0)
	credited := 0.0
	for i := range 60 { // a minute of absurd claims, 4 a second, from 4 ids
		now = now.Add(250 * time.Millisecond)
		id := fmt.Sprintf("gw:%d", i%4)
		if !r.admit(id, now) {
			t.Fatalf("%s refused: 4 ids is under the cap of 8", id)
		}
		credited += 1e9 * r.credit(id, 1e9, now)
	}
	if bound := rate * (15*time.Second + horizon).Seconds(); credited > bound+1e-6 {
		t.Errorf("credited %.0f over 15 s, more than rate × (T + horizon) = %.0f", credited, bound)
	}
	if credited < rate*horizon.Seconds() {
		t.Errorf("credited %.0f, less than the saved %v's worth: the bucket did not start full", credited, horizon)
	}
	// Another identity has its own bucket.
	r.admit("other:1", now)
	if f := r.credit("other:1", 500, now); f != 1 {
		t.Errorf("another identity credited %.2f of a modest report, want all of it", f)
	}
	// Silent for the horizon, the drained identity is whole again.
	now = now.Add(horizon)
	r.admit("gw:0", now)
	if f := r.credit("gw:0", rate*horizon.Seconds(), now); f != 1 {
		t.Errorf("after %v of silence credited %.2f of a report the refilled bucket holds, want 1", horizon, f)
	}
}

// An identity reports under at most maxClients ids at once; an id is
// forgotten after idle, which makes room for a new one, and an identity
// with no ids left is dropped once its bucket has refilled.
func TestReportersCapClientIDsPerIdentity(t *testing.T) {
	r := newReporters(10, time.Second, 2)
	now := time.Unix(1000, 0)
	for _, id := range []string{"app:a", "app:b", "app:a"} {
		if !r.admit(id, now) {
			t.Fatalf("%s refused within the cap", id)
		}
	}
	if r.admit("app:c", now) {
		t.Errorf("a third id admitted under a cap of 2")
	}
	if !r.admit("other:c", now) {
		t.Errorf("another identity's id refused: the cap is per identity")
	}
	r.credit("app:a", 10, now) // drains app's bucket
	r.forget(now.Add(2*time.Second), time.Second)
	if !r.admit("app:c", now.Add(2*time.Second)) {
		t.Errorf("a new id refused after the others were forgotten")
	}
	r.forget(now.Add(10*time.Second), time.Second)
	if len(r.byIdentity) != 0 {
		t.Errorf("%d identities kept after every id went silent and the buckets refilled", len(r.byIdentity))
	}
	// Without TLS an id is its own identity.
	if got := identityOf("plain-id"); got != "plain-id" {
		t.Errorf("identityOf(plain-id) = %q", got)
	}
	if got := identityOf("gateway:host/1:x"); got != "gateway" {
		t.Errorf("identityOf(gateway:host/1:x) = %q, want gateway", got)
	}
}
