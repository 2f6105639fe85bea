package experiment

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/verify"
)

// Tenant is one tenant's client population: its own arrivals, client kind
// and stored hash, its calls naming it in levee-tenant (the lab's load
// identity is a front end, which may name any tenant).
type Tenant struct {
	// Name is sent as levee-tenant: 1..64 bytes of [A-Za-z0-9._-].
	Name string
	// Load is the tenant's offered load as a multiple of the measured
	// capacity C, before the experiment's Load multiplies it.
	Load float64
	// Kind is the tenant's client behaviour (naive, levee, human,
	// nodeadline).
	Kind Kind
	// Cost is how many times the policy's hash the tenant's stored hashes
	// cost: the policy's Argon2id memory × Cost, the same iterations and
	// lanes (Argon2's work is memory × iterations, and the verifiers cap
	// iterations at the lab's policy already). 1 is the policy's own hash.
	Cost int
}

// Tenant limits: enough for any experiment the lab runs, few enough that a
// report stays readable and the verifiers label each tenant on its own
// (they label the 32 busiest).
const (
	MaxTenants    = 16
	MaxTenantCost = 64
)

// String is the tenant as ParseTenants reads it.
func (t Tenant) String() string {
	s := fmt.Sprintf("%s:%s:%s", t.Name, strconv.FormatFloat(t.Load, 'g', -1, 64), t.Kind)
	if t.Cost > 1 {
		s += fmt.Sprintf(":cost=%d", t.Cost)
	}
	return s
}

// Params is the tenant's stored hash's parameters under the policy.
func (t Tenant) Params(policy verify.Params) verify.Params {
	p := policy
	p.Memory = policy.Memory * uint32(max(t.Cost, 1))
	return p
}

// ParseTenants reads "a:0.3:naive,b:3:naive:cost=5": comma-separated
// tenants, each name:load[:kind][:cost=N]. The load is a multiple of C
// (a positive number up to 100); the kind defaults to naive, the cost to 1
// (an integer in [1, MaxTenantCost]). Names are levee-tenant names, each at
// most once; at most MaxTenants tenants.
func ParseTenants(s string) ([]Tenant, error) {
	ts, err := parseTenants(s)
	if err != nil {
		return nil, fmt.Errorf("tenants %q: %w", truncate(s), err)
	}
	return ts, nil
}

func parseTenants(s string) ([]Tenant, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("empty")
	}
	var out []Tenant
	for _, entry := range strings.Split(s, ",") {
		if len(out) == MaxTenants {
			return nil, fmt.Errorf("more than %d tenants", MaxTenants)
		}
		fields := strings.Split(strings.TrimSpace(entry), ":")
		if len(fields) < 2 || len(fields) > 4 {
			return nil, fmt.Errorf("entry %q: want name:load[:kind][:cost=N]", truncate(entry))
		}
		t := Tenant{Name: fields[0], Kind: Naive, Cost: 1}
		if err := (callmeta.Facts{Tenant: t.Name}).Validate(); err != nil || t.Name == "" {
			return nil, fmt.Errorf("tenant name %q: want 1..%d bytes of [A-Za-z0-9._-]", truncate(t.Name), callmeta.MaxTenantLen)
		}
		if slices.ContainsFunc(out, func(o Tenant) bool { return o.Name == t.Name }) {
			return nil, fmt.Errorf("tenant %s named twice", t.Name)
		}
		v, err := strconv.ParseFloat(fields[1], 64)
		if err != nil || !(v > 0 && v <= 100) {
			return nil, fmt.Errorf("tenant %s: load %q: want a number in (0, 100] (× C)", t.Name, truncate(fields[1]))
		}
		t.Load = v
		kindSeen, costSeen := false, false
		for _, f := range fields[2:] {
			if num, ok := strings.CutPrefix(f, "cost="); ok {
				c, err := strconv.Atoi(num)
				if costSeen || err != nil || c < 1 || c > MaxTenantCost {
					return nil, fmt.Errorf("tenant %s: cost %q: want cost=N once, N an integer in [1, %d]", t.Name, truncate(num), MaxTenantCost)
				}
				t.Cost, costSeen = c, true
				continue
			}
			if kindSeen || costSeen || !slices.Contains(Kinds, Kind(f)) {
				return nil, fmt.Errorf("tenant %s: %q: want a client kind (naive, levee, human or nodeadline) before cost=N, at most once", t.Name, truncate(f))
			}
			t.Kind, kindSeen = Kind(f), true
		}
		out = append(out, t)
	}
	return out, nil
}

// ParseTenantSets reads one or more tenant sets separated by ";", each as
// ParseTenants reads it: one experiment each.
func ParseTenantSets(s string) ([][]Tenant, error) {
	var out [][]Tenant
	for _, part := range strings.Split(s, ";") {
		ts, err := ParseTenants(part)
		if err != nil {
			return nil, err
		}
		out = append(out, ts)
	}
	return out, nil
}

// FormatTenants is the inverse of ParseTenants.
func FormatTenants(ts []Tenant) string {
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	return strings.Join(parts, ",")
}

// validateTenants reports what is wrong with a set of tenants built by hand
// (ParseTenants checks the same).
func validateTenants(ts []Tenant) error {
	if len(ts) > MaxTenants {
		return fmt.Errorf("clients: more than %d tenants", MaxTenants)
	}
	if len(ts) == 0 {
		return nil
	}
	if _, err := ParseTenants(FormatTenants(ts)); err != nil {
		return fmt.Errorf("clients: %w", err)
	}
	for _, t := range ts {
		if t.Cost < 1 {
			return fmt.Errorf("clients: tenant %s: cost must be at least 1, got %d", t.Name, t.Cost)
		}
	}
	return nil
}

// tenantLoad is the tenants' total offered load, × C.
func tenantLoad(ts []Tenant) float64 {
	total := 0.0
	for _, t := range ts {
		total += t.Load
	}
	return total
}
