package ledger

import (
	"errors"
	"fmt"
	"math"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/internal/strictjson"
)

// Settings of one budget key: what budgetd's ledger enforces, what it sends
// with every lease (levee.budget.v1.Settings), and what a client shows of
// the key. They are stored in etcd as one JSON object, e.g.
//
//	{"ratio": 0.1, "burst": 100, "min_per_second": 1}
type Settings struct {
	// Ratio is the retries allowed per reported first attempt, fleet-wide.
	// A client whose key is in fallback earns Ratio tokens per first attempt
	// from its own local budget.
	Ratio float64 `json:"ratio"`
	// Burst is the most tokens the fleet's budget saves up while unused.
	Burst float64 `json:"burst"`
	// MinPerSecond adds tokens whatever the traffic, so that quiet services
	// can still retry (one allowance for the whole fleet, not per process).
	MinPerSecond float64 `json:"min_per_second"`
}

// DefaultSettings: 10% retries, a burst of 100, one retry a second minimum.
func DefaultSettings() Settings { return Settings{Ratio: 0.1, Burst: 100, MinPerSecond: 1} }

// Validate reports every field out of range.
func (s Settings) Validate() error {
	var errs []error
	check := func(name string, v, lo, hi float64) {
		if math.IsNaN(v) || v < lo || v > hi {
			errs = append(errs, fmt.Errorf("%s must be in [%g, %g], got %g", name, lo, hi, v))
		}
	}
	check("ratio", s.Ratio, 0, 10)
	check("burst", s.Burst, 0, 1e9)
	check("min_per_second", s.MinPerSecond, 0, 1e6)
	return errors.Join(errs...)
}

// MaxSettingsSize is the most bytes a stored settings value may hold.
const MaxSettingsSize = 4 << 10

// ParseSettings reads one key's settings as stored in etcd. Every field is
// required and no other is allowed (names are exact), so that a typo is an
// error rather than a zero; the result is validated.
func ParseSettings(data []byte) (Settings, error) {
	var s Settings
	if err := strictjson.Decode(data, &s, MaxSettingsSize, "ratio", "burst", "min_per_second"); err != nil {
		return Settings{}, err
	}
	if err := s.Validate(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

func (s Settings) String() string {
	return fmt.Sprintf("ratio %g, burst %g, min_per_second %g", s.Ratio, s.Burst, s.MinPerSecond)
}

// Proto is s on the wire.
func (s Settings) Proto() *budgetv1.Settings {
	return &budgetv1.Settings{Ratio: s.Ratio, Burst: s.Burst, MinPerSecond: s.MinPerSecond}
}

// SettingsOf is the settings a lease carried (zero when it carried none).
func SettingsOf(p *budgetv1.Settings) Settings {
	return Settings{Ratio: p.GetRatio(), Burst: p.GetBurst(), MinPerSecond: p.GetMinPerSecond()}
}

// CountsOf is a validated report's counts, for Ledger.Report.
func CountsOf(r *budgetv1.KeyReport) Counts {
	return Counts{
		First:    r.GetFirstAttempts(),
		Fallback: r.GetFallbackFirstAttempts(),
		Retries:  r.GetRetries(),
		Span:     r.GetSpan().AsDuration(),
	}
}
