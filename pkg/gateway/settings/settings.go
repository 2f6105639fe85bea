// Package settings is the gateways' runtime settings: the one JSON object
// operators write into etcd (`levee settings`) and every gateway reads and
// puts in force without a restart. It holds the schema and its rules —
// parsing, validation, merging an edit into what is stored, name=value
// assignments — and nothing of the gateway, so that the operator's tools
// share them without linking a gateway.
package settings

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/leveehq/levee/internal/strictjson"
	"github.com/leveehq/levee/pkg/callmeta"
)

// MaxSize bounds the settings value read from etcd, in bytes.
const MaxSize = 16 << 10

// Settings are the gateway's runtime settings, stored as one JSON object
// under the gateway's Config.SettingsKey and applied to every gateway within
// one watch round trip, without a restart. Every field is optional: a missing field keeps the
// gateway's configured value, and deleting the key restores them all. Unknown
// fields are errors, so that a typo is refused rather than ignored.
//
//	{"clamp": 40, "ceiling": 500, "critical_reserve": 0.2, "batch_share": 0.5,
//	 "retry_share": 0.9, "autopilot": true, "client_timeout": "2s",
//	 "breaker_failure_rate": 0.5, "breaker_open_for": "5s",
//	 "breaker_min_requests": 20}
type Settings struct {
	// Clamp caps the concurrency limit (0: no clamp). The operator's way to
	// shed load without a deploy.
	Clamp *int `json:"clamp,omitempty"`
	// Ceiling is the most the adaptive limit may grow to.
	Ceiling *int `json:"ceiling,omitempty"`
	// CriticalReserve, BatchShare and RetryShare divide the limit among
	// priorities (see admission.Config).
	CriticalReserve *float64 `json:"critical_reserve,omitempty"`
	BatchShare      *float64 `json:"batch_share,omitempty"`
	RetryShare      *float64 `json:"retry_share,omitempty"`
	// Autopilot turns the recovery autopilot on or off.
	Autopilot *bool `json:"autopilot,omitempty"`
	// ClientTimeout is the autopilot's typical client timeout.
	ClientTimeout *Duration `json:"client_timeout,omitempty"`
	// Breaker settings; a change gives every verifier a fresh breaker.
	BreakerFailureRate *float64  `json:"breaker_failure_rate,omitempty"`
	BreakerOpenFor     *Duration `json:"breaker_open_for,omitempty"`
	BreakerMinRequests *int      `json:"breaker_min_requests,omitempty"`
	// Fairness turns sharing the limit among tenants on or off.
	Fairness *bool `json:"fairness,omitempty"`
	// TenantWeights weighs tenants' shares of the limit (weight 1 for a
	// tenant not named): a tenant of weight 3 gets three times the share
	// of one of weight 1 while both need it.
	TenantWeights map[string]float64 `json:"tenant_weights,omitempty"`
	// TenantCaps bounds the calls a tenant may have in flight through one
	// gateway, whatever room it finds (its critical first attempts are
	// counted, never refused): a contract's ceiling, where a weight is a
	// share. A tenant not named has no cap but its share.
	TenantCaps map[string]int64 `json:"tenant_caps,omitempty"`
}

// MaxTenantWeights bounds the tenants TenantWeights, and TenantCaps, may
// name.
const MaxTenantWeights = 1024

// Duration is a time.Duration written as a Go duration string ("250ms").
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"2s\", got %s", truncate(string(b), 32))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration string such as \"2s\", got %q", truncate(s, 32))
	}
	*d = Duration(v)
	return nil
}

// Parse reads runtime settings as stored in etcd (at most MaxSize bytes,
// names exact, no unknown field) and checks every field's range. The error
// names the field and the problem.
func Parse(data []byte) (Settings, error) {
	var s Settings
	if err := strictjson.Decode(data, &s, MaxSize); err != nil {
		return Settings{}, err
	}
	return s, s.Validate()
}

// Validate checks every present field's range.
func (s Settings) Validate() error {
	fraction := func(name string, v *float64, lo float64, loOpen bool) error {
		if v == nil {
			return nil
		}
		if *v > 1 || *v < lo || (loOpen && *v == lo) || *v != *v {
			open := "["
			if loOpen {
				open = "("
			}
			return fmt.Errorf("%s must be in %s%v, 1], got %v", name, open, lo, *v)
		}
		return nil
	}
	switch {
	case s.Clamp != nil && (*s.Clamp < 0 || *s.Clamp > 1_000_000):
		return fmt.Errorf("clamp must be in [0, 1000000] (0: none), got %d", *s.Clamp)
	case s.Ceiling != nil && (*s.Ceiling < 1 || *s.Ceiling > 1_000_000):
		return fmt.Errorf("ceiling must be in [1, 1000000], got %d", *s.Ceiling)
	case s.ClientTimeout != nil && (*s.ClientTimeout <= 0 || time.Duration(*s.ClientTimeout) > time.Hour):
		return fmt.Errorf("client_timeout must be in (0, 1h], got %v", time.Duration(*s.ClientTimeout))
	case s.BreakerOpenFor != nil && (*s.BreakerOpenFor <= 0 || time.Duration(*s.BreakerOpenFor) > time.Hour):
		return fmt.Errorf("breaker_open_for must be in (0, 1h], got %v", time.Duration(*s.BreakerOpenFor))
	case s.BreakerMinRequests != nil && (*s.BreakerMinRequests < 1 || *s.BreakerMinRequests > 1_000_000):
		return fmt.Errorf("breaker_min_requests must be in [1, 1000000], got %d", *s.BreakerMinRequests)
	case len(s.TenantWeights) > MaxTenantWeights:
		return fmt.Errorf("tenant_weights names %d tenants, at most %d", len(s.TenantWeights), MaxTenantWeights)
	case len(s.TenantCaps) > MaxTenantWeights:
		return fmt.Errorf("tenant_caps names %d tenants, at most %d", len(s.TenantCaps), MaxTenantWeights)
	}
	for name, c := range s.TenantCaps {
		if err := (callmeta.Facts{Tenant: name}).Validate(); err != nil || name == "" {
			return fmt.Errorf("tenant_caps: %q is not a tenant name (1..%d bytes of [A-Za-z0-9._-])", truncate(name, 32), callmeta.MaxTenantLen)
		}
		if c < 1 || c > 1_000_000 {
			return fmt.Errorf("tenant_caps: %s's cap must be in [1, 1000000] calls in flight, got %d", name, c)
		}
	}
	for name, w := range s.TenantWeights {
		if err := (callmeta.Facts{Tenant: name}).Validate(); err != nil || name == "" {
			return fmt.Errorf("tenant_weights: %q is not a tenant name (1..%d bytes of [A-Za-z0-9._-])", truncate(name, 32), callmeta.MaxTenantLen)
		}
		if !(w > 0 && w <= 1e6) {
			return fmt.Errorf("tenant_weights: %s's weight must be in (0, 1000000], got %v", name, w)
		}
	}
	for _, f := range []struct {
		name   string
		v      *float64
		lo     float64
		loOpen bool
	}{
		{"critical_reserve", s.CriticalReserve, 0, false},
		{"batch_share", s.BatchShare, 0, true},
		{"retry_share", s.RetryShare, 0, true},
		{"breaker_failure_rate", s.BreakerFailureRate, 0, true},
	} {
		if err := fraction(f.name, f.v, f.lo, f.loOpen); err != nil {
			return err
		}
	}
	return nil
}

// String renders the settings as their JSON, for logs.
func (s Settings) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Merge returns s with every field set in t replacing its own: how the
// command-line tool edits one setting and keeps the rest. Every field is an
// omitempty pointer, so the JSON of each holds exactly its set fields;
// decoding s's and then t's onto new Settings replaces those and no others,
// and shares no pointer with s or t, which stay as they were.
func (s Settings) Merge(t Settings) Settings {
	var out Settings
	for _, v := range []Settings{s, t} {
		b, err := json.Marshal(v)
		if err == nil {
			err = json.Unmarshal(b, &out)
		}
		if err != nil {
			panic(fmt.Sprintf("settings: do not round-trip through JSON: %v", err))
		}
	}
	return out
}

// ParseAssignments reads "name=value" pairs as the command-line tool takes
// them (clamp=40 autopilot=false client_timeout=2s) into Settings.
func ParseAssignments(args []string) (Settings, error) {
	var parts []string
	for _, a := range args {
		name, value, ok := strings.Cut(a, "=")
		if !ok || name == "" {
			return Settings{}, fmt.Errorf("%q is not name=value", truncate(a, 64))
		}
		raw := value
		if !isJSONValue(value) {
			raw = fmt.Sprintf("%q", value)
		}
		parts = append(parts, fmt.Sprintf("%q:%s", name, raw))
	}
	return Parse([]byte("{" + strings.Join(parts, ",") + "}"))
}

// isJSONValue reports whether v is written as JSON as it stands: a number,
// true, false, null or an object (tenant_weights={"bank":3}). Anything
// else is a string to quote ("3s").
func isJSONValue(v string) bool {
	var x any
	if err := json.Unmarshal([]byte(v), &x); err != nil {
		return false
	}
	switch x.(type) {
	case float64, bool, nil, map[string]any:
		return true
	}
	return false
}

// truncate cuts what an error quotes of its input to n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
