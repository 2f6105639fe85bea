// Package flagenv lets environment variables stand in for command-line
// flags, with one prefix: flag -max-queue-wait is LEVEE_MAX_QUEUE_WAIT.
// A flag given on the command line always wins over the environment.
package flagenv

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/leveehq/levee/pkg/wellknown"
)

// Prefix starts every variable name.
const Prefix = "LEVEE_"

// Name returns the environment variable standing in for flag name.
func Name(flagName string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse parses args into fs, then sets every flag not given in args from its
// environment variable, if present. lookup is os.LookupEnv when nil. The
// variable of a flag that turns a defence off (wellknown.DefenceFlags) is
// an error: those flags come from the command line only.
func Parse(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		if v, ok := lookup(Name(f.Name)); ok {
			if slices.Contains(wellknown.DefenceFlags, f.Name) {
				err = fmt.Errorf("%s is set, but -%s turns a defence off and is read from the command line only", Name(f.Name), f.Name)
				return
			}
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", Name(f.Name), v, serr)
			}
		}
	})
	return err
}

// List splits a comma-separated flag value, trimming each element and
// dropping empty ones: "a, b,,c" is [a b c], "" is nil.
func List(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
