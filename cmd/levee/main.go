// Command levee is the operator's tool for a Levee fleet:
//
//	levee local                      start a whole fleet on this machine (embedded etcd)
//	levee status   [-addr budgetd]   what the fleet-wide retry budget is doing
//	levee settings [-etcd ...] get|set name=value...|delete
//	                                 the gateways' runtime settings (clamp, ...)
//
// Flags can also be set through the environment: -etcd is LEVEE_ETCD.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/leveehq/levee/internal/flagenv"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/fleet"
	"github.com/leveehq/levee/pkg/gateway"
)

const usage = `usage: levee <command> [flags]

commands:
  local      start a whole fleet on this machine: embedded etcd, budgetd,
             verifiers and a gateway; Ctrl-C stops it
  status     show the fleet-wide retry budget (any budgetd replica)
  settings   show or change the gateways' runtime settings in etcd:
               levee settings get
               levee settings set clamp=40 autopilot=false
               levee settings delete
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "levee:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "local":
		return local(ctx, args[1:], stdout, stderr)
	case "status":
		return statusCmd(ctx, args[1:], stdout, stderr)
	case "settings":
		return settingsCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func local(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := fleet.DefaultConfig()
	fs := flag.NewFlagSet("levee local", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Verifiers, "verifiers", cfg.Verifiers, "how many verifiers to run")
	fs.IntVar(&cfg.Workers, "workers", 0, "Argon2 workers per verifier (default: the cores shared among verifiers)")
	fs.StringVar(&cfg.Etcd.DataDir, "data-dir", cfg.Etcd.DataDir, "embedded etcd data directory")
	fs.IntVar(&cfg.GatewayPort, "gateway-port", cfg.GatewayPort, "gateway gRPC port (metrics at +2000)")
	fs.BoolVar(&cfg.EnableCapacityKnob, "enable-capacity-knob", false, "allow slowing verifiers down (experiments)")
	verbose := fs.Bool("v", false, "log every component at info level (default: warnings)")
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	return fleet.Run(ctx, cfg, func(a fleet.Addresses) {
		fmt.Fprintf(stdout, `Levee local fleet is up (Ctrl-C stops it).

  gateway    %s   metrics http://%s/metrics
  budgetd    %s   status  http://%s/
  verifiers  %s
  etcd       %s

Verify a password through the gateway:

  grpcurl -plaintext -d '{"encoded_hash":"%s","password":"%s"}' \
    %s levee.verify.v1.VerifyService/Verify

Hash one:   grpcurl -plaintext -d '{"password":"%s"}' %s levee.verify.v1.VerifyService/Hash
Budget:     go run ./cmd/levee status
Shed load:  go run ./cmd/levee settings set clamp=4
`, a.Gateway, a.GatewayMetrics, a.Budgetd, a.BudgetdMetrics, strings.Join(a.Verifiers, ", "),
			strings.Join(a.Etcd, ", "), exampleHash, examplePasswordB64, a.Gateway, examplePasswordB64, a.Gateway)
	})
}

// exampleHash is "correct horse battery staple" under the default policy
// (m=64 MiB, t=3, p=4); examplePasswordB64 is that password in base64, as
// grpcurl wants bytes fields.
const (
	exampleHash        = "$argon2id$v=19$m=65536,t=3,p=4$bGV2ZWUtZXhhbXBsZS1zYWx0$JBG2wCja7dk6LFpIxQhqDoo0phNBP4J1yZeJ9iQCx2g"
	examplePasswordB64 = "Y29ycmVjdCBob3JzZSBiYXR0ZXJ5IHN0YXBsZQ=="
)

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("levee status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", budgetd.DefaultConfig().ListenAddr, "address of any budgetd replica")
	key := fs.String("key", "", "budget key to describe (default: all)")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	return budgetd.PrintStatus(ctx, stdout, *addr, *key, *asJSON)
}

func settingsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("levee settings", flag.ContinueOnError)
	fs.SetOutput(stderr)
	etcd := fs.String("etcd", "http://127.0.0.1:2379", "comma-separated etcd endpoints")
	key := fs.String("settings-key", gateway.DefaultSettingsKey, "etcd key of the gateways' settings")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return errors.New("settings: want get, set name=value... or delete")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(*etcd, ","), DialTimeout: *timeout, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer cli.Close()
	return gateway.EditSettings(ctx, cli, *key, rest[0], rest[1:], stdout)
}
