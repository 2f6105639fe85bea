package flagenv

import (
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	env := map[string]string{
		"LEVEE_MAX_QUEUE_WAIT": "3s",
		"LEVEE_WORKERS":        "7",
		"LEVEE_LISTEN":         "ignored:1",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	wait := fs.Duration("max-queue-wait", time.Second, "")
	workers := fs.Int("workers", 1, "")
	listen := fs.String("listen", "default:1", "")
	other := fs.String("other", "keep", "")
	if err := Parse(fs, []string{"-listen", "flag:1"}, lookup); err != nil {
		t.Fatal(err)
	}
	if *wait != 3*time.Second || *workers != 7 {
		t.Errorf("env fallback: wait=%v workers=%d, want 3s and 7", *wait, *workers)
	}
	if *listen != "flag:1" {
		t.Errorf("listen = %q: a flag on the command line must win over the environment", *listen)
	}
	if *other != "keep" {
		t.Errorf("other = %q, want its default", *other)
	}
}

func TestParseBadEnvNamesVariable(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("workers", 1, "")
	err := Parse(fs, nil, func(k string) (string, bool) { return "many", k == "LEVEE_WORKERS" })
	if err == nil || !strings.Contains(err.Error(), "LEVEE_WORKERS") {
		t.Fatalf("Parse = %v, want an error naming LEVEE_WORKERS", err)
	}
}

func TestList(t *testing.T) {
	for in, want := range map[string][]string{
		"":               nil,
		"a":              {"a"},
		" a , b,,c , ":   {"a", "b", "c"},
		"127.0.0.1:2379": {"127.0.0.1:2379"},
	} {
		if got := List(in); !slices.Equal(got, want) {
			t.Errorf("List(%q) = %q, want %q", in, got, want)
		}
	}
}

// A flag that turns a defence off is never read from the environment: its
// variable is an error, and the command line still sets it.
func TestDefenceFlagsComeFromTheCommandLineOnly(t *testing.T) {
	for _, name := range []string{"unguarded", "enable-capacity-knob", "allow-anonymous"} {
		t.Run(name, func(t *testing.T) {
			env := map[string]string{Name(name): "true"}
			lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			on := fs.Bool(name, false, "")
			if err := Parse(fs, nil, lookup); err == nil || *on || !strings.Contains(err.Error(), Name(name)) {
				t.Errorf("from the environment: %v, flag %v; want an error naming %s and the flag off", err, *on, Name(name))
			}
			fs = flag.NewFlagSet("t", flag.ContinueOnError)
			on = fs.Bool(name, false, "")
			if err := Parse(fs, []string{"-" + name}, lookup); err != nil || !*on {
				t.Errorf("from the command line (the variable set too): %v, flag %v; want it on", err, *on)
			}
		})
	}
}
