package upstream

import (
	"slices"
	"sync/atomic"
	"time"
)

// Outlier ejection: a verifier whose answers are mostly refusals or errors
// while its peers' are not is taken out of rotation for a while, as Envoy
// ejects hosts for local-origin errors. Balancing on outstanding calls
// alone is a black hole: a node that refuses at once always looks idle.
//
// Judged against the peers, so that a fleet-wide condition (every verifier
// refusing under overload, callers whose deadlines no hash fits) ejects
// nobody: a verifier is an outlier when, over the last outlierWindow, at
// least outlierMinAnswers of its answers came back, at least
// outlierBadFraction of them bad, and that fraction is above the peers'
// median by outlierMargin. Bad is anything but OK, INVALID_ARGUMENT (the
// caller's input) and CANCELED (the caller left).
//
// An ejection lasts outlierBase × 2^k (k: ejections in a row, reset by a
// clean window), at most outlierMax; it ends by time alone, so a node that
// recovered gets traffic back whether or not anything could tell. At most
// half of the serving verifiers are ejected at once.
const (
	outlierWindow      = 10 * time.Second
	outlierMinAnswers  = 20
	outlierBadFraction = 0.5
	outlierMargin      = 0.3
	outlierBase        = 2 * time.Second
	outlierMax         = 30 * time.Second
	outlierBuckets     = int(outlierWindow / time.Second)
	// outlierJudgeEvery bounds how often a bad answer triggers a judgement.
	outlierJudgeEvery = 100 * time.Millisecond
	// refuseAllFraction is the share of bad answers at which a verifier
	// refuses everything: not all, so that one still letting a small share
	// through counts (see EjectRefusing).
	refuseAllFraction = 0.95
)

// ejection is one verifier's outlier state.
type ejection struct {
	until  atomic.Int64 // unix nanos; ejected while now is before it
	streak int          // ejections in a row; only under the Set's outlierMu
	count  atomic.Uint64
}

func (e *ejection) ejected(now time.Time) bool { return now.UnixNano() < e.until.Load() }

// ejectedNow is ejected at the current time, reading the clock only when
// the node was ever ejected: the pick path of a healthy fleet pays one
// atomic load.
func (v *Node) ejectedNow() bool {
	u := v.eject.until.Load()
	return u != 0 && v.set.clock.Now().UnixNano() < u
}

// Ejected reports whether v is out of rotation as an outlier now, and how
// many times it was ejected so far.
func (v *Node) Ejected() (now bool, times uint64) { return v.ejectedNow(), v.eject.count.Load() }

func (v *Node) addAnswer(now time.Time, good bool) {
	i := answerGood
	if !good {
		i = answerBad
	}
	v.mu.Lock()
	v.answers.Add(now, i, 1)
	v.mu.Unlock()
}

// answerTotals returns v's answers and the bad ones over the outlier
// window ending now.
func (v *Node) answerTotals(now time.Time) (answers, bad int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	good, b := int64(v.answers.Sum(now, answerGood)), int64(v.answers.Sum(now, answerBad))
	return good + b, b
}

// judgeSoon judges the outliers after a bad answer, at most once per
// outlierJudgeEvery: a node whose ejection just ended is judged again on
// its first answers, not a second later (a node that refuses at once
// answers hundreds of calls a second).
func (s *Set) judgeSoon(now time.Time) {
	last := s.outlierJudged.Load()
	if now.UnixNano()-last < int64(outlierJudgeEvery) || !s.outlierJudged.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	s.EjectOutliers(now)
	if s.cfg.AfterJudging != nil {
		s.cfg.AfterJudging(now)
	}
}

// EjectOutliers judges every serving verifier once and ejects the
// outliers. Tick runs it each second, a bad answer soon after (judgeSoon);
// one judgement runs at a time, and a call that finds another running
// returns.
func (s *Set) EjectOutliers(now time.Time) {
	if !s.outlierMu.TryLock() {
		return
	}
	defer s.outlierMu.Unlock()
	type stat struct {
		v        *Node
		fraction float64
		enough   bool
	}
	var stats []stat
	ejected := 0
	for _, v := range s.List() {
		if !v.Eligible() {
			continue
		}
		answers, bad := v.answerTotals(now)
		st := stat{v: v, enough: answers >= outlierMinAnswers}
		if answers > 0 {
			st.fraction = float64(bad) / float64(answers)
		}
		stats = append(stats, st)
		if v.eject.ejected(now) {
			ejected++
		}
	}
	if len(stats) < 2 {
		return // no peers to compare with: one verifier is never an outlier
	}
	fractions := make([]float64, 0, len(stats))
	for _, st := range stats {
		fractions = append(fractions, st.fraction)
	}
	slices.Sort(fractions)
	median := fractions[len(fractions)/2]
	if len(fractions)%2 == 0 {
		median = (fractions[len(fractions)/2-1] + fractions[len(fractions)/2]) / 2
	}
	maxEjected := len(stats) / 2
	for _, st := range stats {
		e := &st.v.eject
		if e.ejected(now) {
			continue
		}
		outlier := st.enough && st.fraction >= outlierBadFraction && st.fraction > median+outlierMargin
		if !outlier {
			if now.UnixNano() > e.until.Load()+int64(outlierWindow) {
				e.streak = 0 // a clean window since the last ejection ended
			}
			continue
		}
		if ejected >= maxEjected {
			continue
		}
		d := st.v.ejectLocked(now)
		ejected++
		s.log.Warn("verifier ejected as an outlier", "verifier", st.v.addr, "bad_fraction", st.fraction,
			"peers_median", median, "for", d)
	}
}

// EjectRefusing ejects, as EjectOutliers would but whatever the peers'
// median and the cap on ejections, every verifier in rotation that refuses
// everything while another serves, and returns their addresses. Refuses
// everything: at least outlierMinAnswers answers over the outlier window,
// at least refuseAllFraction of them bad. Serves: as many answers, under
// outlierBadFraction of them bad. Against the peers' median a verifier
// cannot be an outlier where half the fleet or more refuses, yet one that
// serves shows it is not the fleet's condition: the same callers get
// answers there. A fleet in which none serves ejects nobody, so this never
// empties the rotation; an ejection ends by time alone.
func (s *Set) EjectRefusing(now time.Time) []string {
	if !s.outlierMu.TryLock() {
		return nil
	}
	defer s.outlierMu.Unlock()
	var refusing []*Node
	serves := false
	for _, v := range s.List() {
		if !v.Eligible() || v.eject.ejected(now) {
			continue
		}
		answers, bad := v.answerTotals(now)
		if answers < outlierMinAnswers {
			continue
		}
		switch f := float64(bad) / float64(answers); {
		case f >= refuseAllFraction:
			refusing = append(refusing, v)
		case f < outlierBadFraction:
			serves = true
		}
	}
	if !serves {
		return nil
	}
	addrs := make([]string, 0, len(refusing))
	for _, v := range refusing {
		d := v.ejectLocked(now)
		addrs = append(addrs, v.addr)
		s.log.Debug("verifier ejected: refusing everything while others serve", "verifier", v.addr, "for", d)
	}
	return addrs
}

// ejectLocked ejects v from now for outlierBase × 2^streak, at most
// outlierMax, and returns for how long; the Set's outlierMu must be held.
func (v *Node) ejectLocked(now time.Time) time.Duration {
	e := &v.eject
	d := min(outlierBase<<min(e.streak, 8), outlierMax)
	e.until.Store(now.Add(d).UnixNano())
	e.streak++
	e.count.Add(1)
	// The answers that judged it are spent: after the ejection it is judged
	// on what it answers then.
	v.mu.Lock()
	v.answers.Reset()
	v.mu.Unlock()
	return d
}
