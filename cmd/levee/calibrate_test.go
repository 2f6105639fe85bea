package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leveehq/levee/pkg/calibrate"
)

// A tiny real calibration: the output carries the verifier flags and their
// environment form, and -json the same flags. The target is ten times what
// the cheapest policy takes alone (0.5 ms): with 5 ms, one hash delayed by
// the other test packages sharing the CPU failed the calibration.
func TestCalibrateCommand(t *testing.T) {
	tiny := []string{"calibrate", "-target", "50ms", "-concurrency", "1", "-memory-budget", "4MiB", "-samples", "3", "-timeout", "30s"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	if err := run(ctx, tiny, &out, &errOut); err != nil {
		t.Fatalf("levee %q: %v\n%s", tiny, err, errOut.String())
	}
	for _, want := range []string{"-argon2-memory-kib ", "-argon2-iterations ", "-argon2-parallelism 1", "-workers 1", "-memory-budget 4MiB",
		"LEVEE_ARGON2_MEMORY_KIB=", "KiB", "ms", "hashes/s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errOut.String(), "t= 2") {
		t.Errorf("no progress lines on stderr: %q", errOut.String())
	}

	out.Reset()
	if err := run(ctx, append(tiny, "-json"), &out, &errOut); err != nil {
		t.Fatalf("-json: %v", err)
	}
	var j struct {
		Flags     string `json:"flags"`
		MemoryKiB uint32 `json:"argon2_memory_kib"`
	}
	if err := json.Unmarshal(out.Bytes(), &j); err != nil || !strings.Contains(j.Flags, "-argon2-memory-kib") || j.MemoryKiB == 0 || j.MemoryKiB > 4096 {
		t.Errorf("-json: %v, %+v\n%s", err, j, out.String())
	}
}

func TestCalibrateCommandRefuses(t *testing.T) {
	tests := []struct {
		args []string
		want string
		is   error // the flag package keeps only the text of a flag.Value's error
	}{
		{[]string{"-target", "5ms"}, "-memory-budget is required", nil},
		{[]string{"-memory-budget", "536870912"}, "no unit", nil},
		{[]string{"-memory-budget", "512M"}, "Docker", nil},
		{[]string{"-memory-budget", "8KiB", "-concurrency", "2"}, "below Argon2's minimum", calibrate.ErrBudgetTooSmall},
		{[]string{"-memory-budget", "4MiB", "-parallelism", "0"}, "Parallelism", calibrate.ErrInvalidConfig},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"calibrate"}, tt.args...), &out, &errOut)
		if err == nil || !strings.Contains(err.Error()+errOut.String(), tt.want) || (tt.is != nil && !errors.Is(err, tt.is)) {
			t.Errorf("levee calibrate %q: %v (stderr %q), want an error mentioning %q", tt.args, err, errOut.String(), tt.want)
		}
	}
}
