// Package tenantlabel bounds a metric label drawn from tenant names: the
// busiest tenants get their own value, the rest share "other", and who
// counts as busiest is chosen again every Period, so that the first tenants
// seen, or names made up to fill the labels, cannot hold them for good.
//
// A Labels promises:
//
//   - At most Max tenants hold a label of their own at once, besides
//     "other" and "none" (no tenant).
//   - Every Period the labels go to the Max tenants with the most calls,
//     counted with exponential decay (each period's count weighs half the
//     one before), among the tenants counted in the last periods. A tenant
//     that loses its label has its series removed (Config.Dropped), so the
//     series stay bounded too.
//   - Until the first choice, labels go to the first tenants seen.
//   - Memory is bounded: at most 4 × Max tenants are counted at once; a new
//     one takes the place of the least counted (as the space-saving
//     algorithm does), inheriting its count, so a busy newcomer is not
//     starved of a count by a table full of quiet names.
package tenantlabel

import (
	"errors"
	"sort"
	"sync"
	"time"
)

// Label values that are not tenants.
const (
	Other = "other" // a tenant without a label of its own
	None  = "none"  // a call that named no tenant
)

// Config configures Labels.
type Config struct {
	// Max is how many tenants hold a label of their own at once.
	Max int
	// Period is how often the labels are chosen again.
	Period time.Duration
	// Dropped, if set, is called (without Labels' lock held) with each
	// tenant that loses its label, to delete its series.
	Dropped func(tenant string)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Labels is safe for concurrent use.
type Labels struct {
	cfg Config
	now func() time.Time

	mu     sync.Mutex
	counts map[string]float64 // decayed calls per counted tenant
	held   map[string]bool
	gone   []string // lost their label at the last choice
	chosen bool     // a choice has been made
	next   time.Time
}

// New returns Labels for cfg.
func New(cfg Config) (*Labels, error) {
	if cfg.Max < 1 || cfg.Period <= 0 {
		return nil, errors.New("tenantlabel: Max must be at least 1 and Period positive")
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Labels{cfg: cfg, now: now, counts: map[string]float64{}, held: map[string]bool{}, next: now().Add(cfg.Period)}, nil
}

// Label counts one call of tenant and returns its label value.
func (l *Labels) Label(tenant string) string {
	if tenant == "" {
		return None
	}
	var dropped []string
	l.mu.Lock()
	if now := l.now(); !now.Before(l.next) {
		dropped = l.chooseLocked()
		l.next = now.Add(l.cfg.Period)
	}
	l.countLocked(tenant)
	label := Other
	switch {
	case l.held[tenant]:
		label = tenant
	case !l.chosen && len(l.held) < l.cfg.Max:
		l.held[tenant] = true
		label = tenant
	}
	l.mu.Unlock()
	if l.cfg.Dropped != nil {
		for _, t := range dropped {
			l.cfg.Dropped(t)
		}
	}
	return label
}

// countLocked counts one call of tenant, making room for it if the table is
// full.
func (l *Labels) countLocked(tenant string) {
	if _, ok := l.counts[tenant]; !ok && len(l.counts) >= 4*l.cfg.Max {
		least, min := "", 0.0
		for t, c := range l.counts {
			if least == "" || c < min {
				least, min = t, c
			}
		}
		delete(l.counts, least)
		l.counts[tenant] = min
	}
	l.counts[tenant]++
}

// chooseLocked gives the labels to the Max most counted tenants, halves
// every count, forgets the tenants whose count fell below one call, and
// returns the tenants whose series are to go: those that lost their label
// now, and again those that lost it at the last choice.
func (l *Labels) chooseLocked() []string {
	ranked := make([]string, 0, len(l.counts))
	for t := range l.counts {
		ranked = append(ranked, t)
	}
	sort.Slice(ranked, func(i, j int) bool {
		if l.counts[ranked[i]] != l.counts[ranked[j]] {
			return l.counts[ranked[i]] > l.counts[ranked[j]]
		}
		return ranked[i] < ranked[j]
	})
	held := map[string]bool{}
	for _, t := range ranked[:min(len(ranked), l.cfg.Max)] {
		held[t] = true
	}
	// A call labelled just before its tenant lost the label can bring one
	// of its series back: the tenants that lost theirs at the last choice
	// are dropped once more.
	var dropped, gone []string
	for _, t := range l.gone {
		if !held[t] {
			dropped = append(dropped, t)
		}
	}
	for t := range l.held {
		if !held[t] {
			dropped = append(dropped, t)
			gone = append(gone, t)
		}
	}
	l.held, l.gone, l.chosen = held, gone, true
	for t, c := range l.counts {
		if c /= 2; c < 0.5 {
			delete(l.counts, t)
		} else {
			l.counts[t] = c
		}
	}
	return dropped
}

// Held returns the tenants that hold a label now.
func (l *Labels) Held() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.held))
	for t := range l.held {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}
