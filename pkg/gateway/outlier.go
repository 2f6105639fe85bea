package gateway

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Outlier ejection: a verifier whose answers are mostly refusals or errors
// while its peers' are not is taken out of rotation for a while, as Envoy
// ejects hosts for local-origin errors. Without it, balancing on outstanding
// calls is a black hole: a node that refuses at once always looks idle, so
// it is sent more than its share (51–64 % of calls failed with one poisoned
// verifier of two).
//
// Judged relative to the peers, so that a fleet-wide condition (every
// verifier refusing under overload, callers with deadlines too short for
// any hash) ejects nobody: a verifier is an outlier when, over the last
// outlierWindow, at least outlierMinAnswers of its answers came back and a
// fraction of them at least outlierBadFraction was bad, and that fraction
// exceeds the peers' median by outlierMargin. Bad means anything but OK,
// INVALID_ARGUMENT (the caller's input) and CANCELED (the caller left).
//
// An ejection lasts outlierBase × 2^k (k: ejections in a row, reset by a
// window without one), at most outlierMax; it ends by time alone, so a node
// that recovered gets traffic back whether or not anything could tell. At
// most half of the serving verifiers are ejected at once.
const (
	outlierWindow      = 10 * time.Second
	outlierMinAnswers  = 20
	outlierBadFraction = 0.5
	outlierMargin      = 0.3
	outlierBase        = 2 * time.Second
	outlierMax         = 30 * time.Second
)

// answerCounts counts a verifier's answers, good and bad, in one-second
// buckets over outlierWindow.
type answerCounts struct {
	mu     sync.Mutex
	second int64 // unix second of buckets[head]
	head   int
	good   [outlierBuckets]int64
	bad    [outlierBuckets]int64
}

const outlierBuckets = int(outlierWindow / time.Second)

// advanceLocked moves the ring to the second now, clearing what it skips.
func (c *answerCounts) advanceLocked(now int64) {
	if c.second == 0 {
		c.second = now
	}
	for c.second < now {
		c.second++
		c.head = (c.head + 1) % outlierBuckets
		c.good[c.head], c.bad[c.head] = 0, 0
		if now-c.second > int64(outlierBuckets) {
			// Idle for longer than the window: start afresh.
			c.clearLocked()
			c.second = now
		}
	}
}

func (c *answerCounts) add(now time.Time, good bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(now.Unix())
	if good {
		c.good[c.head]++
	} else {
		c.bad[c.head]++
	}
}

// totals returns the answers and the bad ones over the window ending now.
func (c *answerCounts) totals(now time.Time) (answers, bad int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceLocked(now.Unix())
	for i := range outlierBuckets {
		answers += c.good[i] + c.bad[i]
		bad += c.bad[i]
	}
	return answers, bad
}

// ejection is one verifier's outlier state.
type ejection struct {
	until  atomic.Int64 // unix nanos; ejected while now is before it
	streak int          // ejections in a row; only ejectOutliers touches it
	count  atomic.Uint64
}

func (e *ejection) ejected(now time.Time) bool { return now.UnixNano() < e.until.Load() }

// ejectedNow is ejected at the current time, reading the clock only when
// the verifier was ever ejected: the pick path of a healthy fleet pays one
// atomic load.
func (e *ejection) ejectedNow() bool {
	u := e.until.Load()
	return u != 0 && time.Now().UnixNano() < u
}

// judgeSoon runs ejectOutliers after a bad answer, at most once per
// outlierJudgeEvery: a node whose ejection just ended is judged again on
// its first answers, not a second later (a node that refuses at once
// answers hundreds of calls a second).
func (g *Gateway) judgeSoon(now time.Time) {
	last := g.outlierJudged.Load()
	if now.UnixNano()-last < int64(outlierJudgeEvery) || !g.outlierJudged.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	g.ejectOutliers(now)
	g.auto.ejectRefusing(now)
}

const outlierJudgeEvery = 100 * time.Millisecond

// ejectOutliers judges every serving verifier once and ejects the outliers.
// housekeep calls it each second, judgeSoon after bad answers; one call
// runs at a time, and a call that finds another running returns.
func (g *Gateway) ejectOutliers(now time.Time) {
	if !g.outlierMu.TryLock() {
		return
	}
	defer g.outlierMu.Unlock()
	type stat struct {
		b        *backend
		fraction float64
		enough   bool
	}
	var stats []stat
	ejected := 0
	for _, b := range g.backends.list() {
		if !b.eligible() {
			continue
		}
		answers, bad := b.answers.totals(now)
		s := stat{b: b, enough: answers >= outlierMinAnswers}
		if answers > 0 {
			s.fraction = float64(bad) / float64(answers)
		}
		stats = append(stats, s)
		if b.eject.ejected(now) {
			ejected++
		}
	}
	if len(stats) < 2 {
		return // no peers to compare with: one verifier is never an outlier
	}
	fractions := make([]float64, 0, len(stats))
	for _, s := range stats {
		fractions = append(fractions, s.fraction)
	}
	slices.Sort(fractions)
	median := fractions[len(fractions)/2]
	if len(fractions)%2 == 0 {
		median = (fractions[len(fractions)/2-1] + fractions[len(fractions)/2]) / 2
	}
	maxEjected := len(stats) / 2
	for _, s := range stats {
		e := &s.b.eject
		if e.ejected(now) {
			continue
		}
		outlier := s.enough && s.fraction >= outlierBadFraction && s.fraction > median+outlierMargin
		if !outlier {
			if now.UnixNano() > e.until.Load()+int64(outlierWindow) {
				e.streak = 0 // a clean window since the last ejection ended
			}
			continue
		}
		if ejected >= maxEjected {
			continue
		}
		d := ejectLocked(s.b, now)
		ejected++
		g.log.Warn("verifier ejected as an outlier", "verifier", s.b.addr, "bad_fraction", s.fraction,
			"peers_median", median, "for", d)
	}
}

// ejectLocked ejects b from now for outlierBase × 2^streak, at most
// outlierMax, and returns for how long; outlierMu must be held.
func ejectLocked(b *backend, now time.Time) time.Duration {
	e := &b.eject
	d := min(outlierBase<<min(e.streak, 8), outlierMax)
	e.until.Store(now.Add(d).UnixNano())
	e.streak++
	e.count.Add(1)
	// The answers that judged it are spent: after the ejection it is judged
	// on what it answers then.
	b.answers.reset()
	return d
}

// refuseAllFraction is the share of bad answers at which a verifier refuses
// everything: not all of them, so that one still letting a small share
// through (a poisoned estimate admitting probes) counts.
const refuseAllFraction = 0.95

// ejectRefusing ejects, as ejectOutliers would but whatever the peers'
// median and the cap on ejections, every verifier in rotation that refuses
// everything while another serves, and returns their addresses. Refuses
// everything: at least outlierMinAnswers answers over the outlier window, at
// least refuseAllFraction of them bad. Serves: as many answers, fewer than
// outlierBadFraction of them bad. The autopilot calls it each tick. Judged
// against the peers, a verifier cannot be an outlier where half the fleet or
// more refuses (the median is theirs), yet the verifier that serves shows
// it is not the fleet's condition (overload, callers' deadlines too short
// for any hash): the same callers get answers there. A fleet with no
// verifier that serves ejects nobody, so this never empties the rotation.
// What brings an ejected verifier back is time alone: the ejection ends
// after its backoff, and it is judged again on its first answers. Like
// ejectOutliers, a call that finds another judging returns.
func (g *Gateway) ejectRefusing(now time.Time) []string {
	if !g.outlierMu.TryLock() {
		return nil
	}
	defer g.outlierMu.Unlock()
	var refusing []*backend
	serves := false
	for _, b := range g.backends.list() {
		if !b.eligible() || b.eject.ejected(now) {
			continue
		}
		answers, bad := b.answers.totals(now)
		if answers < outlierMinAnswers {
			continue
		}
		switch f := float64(bad) / float64(answers); {
		case f >= refuseAllFraction:
			refusing = append(refusing, b)
		case f < outlierBadFraction:
			serves = true
		}
	}
	if !serves {
		return nil
	}
	addrs := make([]string, 0, len(refusing))
	for _, b := range refusing {
		d := ejectLocked(b, now)
		addrs = append(addrs, b.addr)
		g.log.Debug("verifier ejected: refusing everything while others serve", "verifier", b.addr, "for", d)
	}
	return addrs
}

func (c *answerCounts) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
}

func (c *answerCounts) clearLocked() {
	c.good, c.bad = [outlierBuckets]int64{}, [outlierBuckets]int64{}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
