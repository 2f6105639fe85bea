// Package wellknowntest checks a command against the names package
// wellknown says it defines.
package wellknowntest

import (
	"regexp"
	"testing"
)

// CheckFlags fails t for each of names that usage, a command's -help output
// (flag.FlagSet.PrintDefaults), does not list as a flag.
func CheckFlags(t testing.TB, usage string, names []string) {
	t.Helper()
	if usage == "" {
		t.Fatal("no usage to check: the command printed nothing for -help")
	}
	for _, name := range names {
		if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(name) + `(\s|$)`).MatchString(usage) {
			t.Errorf("the command defines no -%s, which package wellknown says it takes", name)
		}
	}
}
