package main

import (
	"fmt"
	"sort"
	"strings"
)

// preset is a named experiment: the flags it stands for.
type preset struct {
	what string
	args []string
}

// tenantRun is the shape of the tenant experiments: healthy load (no
// trigger), the Levee fleet only, 10 s of warm-up and 20 s judged, three
// seeds, fair share on and off.
var tenantRun = []string{"-fleets", "levee", "-trigger", "none", "-after", "0s", "-warmup", "10s", "-baseline", "20s",
	"-seeds", "3", "-fair-share", "on,off"}

// presets are the named experiments (docs/lab.md, "Tenants").
var presets = map[string]preset{
	"noisy-tenant": {
		what: "tenant a at 0.3 C beside tenant b flooding at 3 C and at 10 C, naive clients, fair share on and off, three seeds",
		args: append([]string{"-tenants", "a:0.3:naive,b:3:naive;a:0.3:naive,b:10:naive"}, tenantRun...),
	},
	"expensive-hashes": {
		what: "tenant a at 3 C and tenant b at 1 C with stored hashes costing 5 × the policy's, both more than half the fleet's hashing time, naive clients, fair share on and off, three seeds",
		args: append([]string{"-tenants", "a:3:naive,b:1:naive:cost=5"}, tenantRun...),
	},
}

func presetNames() []string {
	var names []string
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func presetUsage() string {
	var parts []string
	for _, n := range presetNames() {
		parts = append(parts, fmt.Sprintf("%s (%s)", n, presets[n].what))
	}
	return strings.Join(parts, "; ") + "; flags given beside it win"
}

// presetOf finds -preset NAME (or -preset=NAME, with one or two dashes)
// among args, before the flags are parsed.
func presetOf(args []string) (string, bool) {
	for i, a := range args {
		if a == "--" {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "preset" {
			continue
		}
		if hasValue {
			return value, true
		}
		if i+1 < len(args) {
			return args[i+1], true
		}
		return "", true
	}
	return "", false
}
