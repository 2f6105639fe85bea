package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leveehq/levee/pkg/calibrate"
	"github.com/leveehq/levee/pkg/calibrate/calibratetest"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/wellknown"
	"github.com/leveehq/levee/pkg/wellknown/wellknowntest"
)

func TestParse(t *testing.T) {
	env := map[string]string{"LEVEE_MAX_QUEUE_WAIT": "750ms", "LEVEE_TLS_DIR": "/certs"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, o, err := parse([]string{"-etcd", "https://a:2379, https://b:2379", "-workers", "3",
		"-argon2-memory-kib", "19456", "-argon2-iterations", "2", "-max-memory-kib", "131072",
		"-pepper-file", "peppers.txt", "-resident-heap=false", "-log-json"}, io.Discard, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.EtcdEndpoints, ","); got != "https://a:2379,https://b:2379" {
		t.Errorf("EtcdEndpoints = %q", got)
	}
	if cfg.Workers != 3 || cfg.MaxQueueWait != 750*time.Millisecond || cfg.Policy.Params.Memory != 19456 ||
		cfg.Policy.Params.Iterations != 2 || cfg.Limits.MaxMemoryKiB != 131072 {
		t.Errorf("parsed %+v", cfg)
	}
	if o.pepperFile != "peppers.txt" || o.resident || !o.logJSON {
		t.Errorf("options %+v", o)
	}
	if got, want := o.tls.Resolve(tlsIdentity), (mtls.Files{CA: "/certs/ca.crt", Cert: "/certs/verifier.crt", Key: "/certs/verifier.key"}); got != want {
		t.Errorf("LEVEE_TLS_DIR=/certs resolves to %+v, want %+v", got, want)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		// Refuses to start in plaintext unless told to, and says how.
		{nil, "levee certs"},
		{[]string{"-insecure", "-tls-dir", "/certs"}, "pick one"},
		{[]string{"-tls-cert", "v.crt", "-tls-key", "v.key"}, "-tls-ca"},
		{[]string{"-insecure", "-argon2-parallelism", "300"}, "out of range"},
		{[]string{"-insecure", "-workers", "-1"}, "Workers"},
		{[]string{"-insecure", "extra"}, "unexpected argument"},
		{[]string{"-insecure", "-memory-budget", "lots"}, "memory-budget"},
	} {
		_, _, err := parse(tc.args, io.Discard, func(string) (string, bool) { return "", false })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%q) = %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
}

// setup loads what parse only named: the pepper file (its keys in the
// Config, a missing file an error naming it), the memory budget as given,
// and logs the plaintext warning and the budget on stderr, never a key.
func TestSetupLoadsWhatParseNamed(t *testing.T) {
	key := bytes.Repeat([]byte{0x5a}, 32)
	path := filepath.Join(t.TempDir(), "peppers.txt")
	b64 := base64.StdEncoding.EncodeToString(key)
	if err := os.WriteFile(path, []byte("current=k1\nk1:"+b64+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	none := func(string) (string, bool) { return "", false }
	cfg, o, err := parse([]string{"-insecure", "-pepper-file", path, "-memory-budget", "256MiB", "-resident-heap=false"}, io.Discard, none)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg, err = setup(cfg, o, &logs)
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
	if cfg.Peppers.Current() != "k1" || cfg.Peppers.Len() != 1 || cfg.MemoryBudget != 256<<20 || cfg.Logger == nil {
		t.Errorf("setup gave peppers %v, memory budget %d, logger %v; want the file's keys and 256 MiB", cfg.Peppers, cfg.MemoryBudget, cfg.Logger)
	}
	for _, want := range []string{"-insecure: plaintext", "memory budget"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), b64) {
		t.Errorf("logs show the pepper key:\n%s", logs.String())
	}

	missing := filepath.Join(t.TempDir(), "none.txt")
	cfg, o, err = parse([]string{"-insecure", "-pepper-file", missing, "-resident-heap=false"}, io.Discard, none)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := setup(cfg, o, io.Discard); err == nil || !strings.Contains(err.Error(), "none.txt") {
		t.Errorf("setup with a missing pepper file: %v, want an error naming it", err)
	}
}

// The soft memory limit levee calibrate prints is the one a verifier started
// with the flags it prints sets: the calibration's result, through this
// main's own flag parsing, to the verifier's Config.
func TestCalibratedFlagsGiveTheCalibratedHeapLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		target      time.Duration
		budget      int64
		concurrency int
	}{
		{250 * time.Millisecond, 1 << 30, 4},
		{100 * time.Millisecond, 300 << 20, 2},
		{500 * time.Millisecond, 2 << 30, 1}, // a policy m above the default limit: -max-memory-kib is printed
	} {
		cfg := calibrate.DefaultConfig()
		cfg.Target, cfg.MemoryBudget, cfg.Concurrency = c.target, c.budget, c.concurrency
		md := &calibratetest.Model{Base: time.Millisecond, PerKiBPass: 40 * time.Millisecond / 65536, Cores: 2, Spread: 0.1}
		cfg.Bench = md.Bench
		r, err := calibrate.Run(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		args := append([]string{"-insecure"}, strings.Fields(r.Flags())...)
		vcfg, _, err := parse(args, io.Discard, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("parse(%q): %v", args, err)
		}
		if got := vcfg.ResidentHeapLimit(); got != r.HeapLimit {
			t.Errorf("flags %q: the verifier's soft limit %d MiB, calibrate printed %d MiB", r.Flags(), got>>20, r.HeapLimit>>20)
		}
	}
}

// The flags other programs pass to a verifier (levee calibrate's output,
// the lab) are ones it defines.
func TestDefinesWellKnownFlags(t *testing.T) {
	var usage strings.Builder
	if _, _, err := parse([]string{"-help"}, &usage, func(string) (string, bool) { return "", false }); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parse(-help) = %v, want flag.ErrHelp", err)
	}
	wellknowntest.CheckFlags(t, usage.String(), wellknown.VerifierFlags)
}
