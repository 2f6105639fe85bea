// Command budgetd serves Levee's fleet-wide retry budget
// (levee.budget.v1.BudgetService). Replicas elect a leader through etcd;
// with no -etcd endpoints, budgetd runs an embedded single-node etcd under
// -data-dir. Every flag can also be set through the environment: -etcd is
// LEVEE_ETCD. See docs/budgetd.md.
//
//	budgetd [flags]                                  serve
//	budgetd status [-addr host:port] [-key k] [-json] describe the budgets
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
	"syscall"

	"github.com/leveehq/levee/internal/flagenv"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/fleetctl"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/wellknown"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "budgetd:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "status" {
		return runStatus(ctx, args[1:], stdout, stderr)
	}
	return serve(ctx, args, stderr)
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := budgetd.DefaultConfig()
	var sec mtls.Settings
	fs := flag.NewFlagSet("budgetd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sec.AddFlags(fs)
	cfg.ServerLimits.AddFlags(fs)
	fs.StringVar(&cfg.ListenAddr, wellknown.FlagListen, cfg.ListenAddr, "gRPC listen address")
	fs.StringVar(&cfg.MetricsAddr, wellknown.FlagMetricsListen, cfg.MetricsAddr, "HTTP address for the status page (/) and /metrics (empty: none)")
	fs.StringVar(&cfg.AdvertiseAddr, wellknown.FlagAdvertise, "", "address the other replicas reach this one at (default: the listen address)")
	etcd := fs.String(wellknown.FlagEtcd, "", "comma-separated etcd endpoints (empty: run an embedded single-node etcd)")
	fs.StringVar(&cfg.EmbeddedEtcd.DataDir, "data-dir", cfg.EmbeddedEtcd.DataDir, "embedded etcd: data directory")
	fs.StringVar(&cfg.EmbeddedEtcd.ClientURL, "etcd-client-url", cfg.EmbeddedEtcd.ClientURL, "embedded etcd: client URL")
	fs.StringVar(&cfg.EmbeddedEtcd.PeerURL, "etcd-peer-url", cfg.EmbeddedEtcd.PeerURL, "embedded etcd: peer URL")
	fs.StringVar(&cfg.EmbeddedEtcd.Name, "etcd-name", cfg.EmbeddedEtcd.Name, "embedded etcd: member name")
	fs.StringVar(&cfg.Prefix, "prefix", cfg.Prefix, "etcd key prefix (election, config)")
	fs.DurationVar(&cfg.RefreshInterval, "refresh-interval", cfg.RefreshInterval, "how often clients report (jittered)")
	fs.DurationVar(&cfg.LeaseValidity, "lease-validity", cfg.LeaseValidity, "how long granted tokens stay valid")
	fs.DurationVar(&cfg.ForgetAfter, "forget-after", cfg.ForgetAfter, "forget clients silent for this long")
	fs.DurationVar(&cfg.ElectionTTL, "election-ttl", cfg.ElectionTTL, "etcd session TTL (whole seconds, at least 2s)")
	fs.Float64Var(&cfg.Defaults.Ratio, "default-ratio", cfg.Defaults.Ratio, "default retries per first attempt (etcd <prefix>config/_default wins)")
	fs.Float64Var(&cfg.Defaults.Burst, "default-burst", cfg.Defaults.Burst, "default most tokens saved up")
	fs.Float64Var(&cfg.Defaults.MinPerSecond, "default-min-per-second", cfg.Defaults.MinPerSecond, "default tokens per second whatever the traffic")
	fs.IntVar(&cfg.MaxKeys, "max-keys", cfg.MaxKeys, "most budget keys the leader accounts for")
	fs.Float64Var(&cfg.MaxClientRate, "max-client-rate", cfg.MaxClientRate, "most first attempts plus retries a second credited to one identity (certificate name), over all its reports; a single report above it is refused, the excess over time is not credited; both are counted")
	fs.IntVar(&cfg.MaxClientsPerIdentity, "max-clients-per-identity", cfg.MaxClientsPerIdentity, "most client ids one identity (certificate name) may report under at once")
	etcdLog := fs.String("etcd-log-level", "error", "least severe etcd log shown: debug, info, warn, error")
	logJSON := fs.Bool("log-json", false, "log JSON instead of text")
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (subcommands: status)", fs.Arg(0))
	}
	cfg.EtcdEndpoints = append(cfg.EtcdEndpoints, flagenv.List(*etcd)...)
	if err := cfg.EtcdLogLevel.UnmarshalText([]byte(*etcdLog)); err != nil {
		return fmt.Errorf("-etcd-log-level: %w", err)
	}
	if err := sec.Check(tlsIdentity); err != nil {
		return err
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if *logJSON {
		handler = slog.NewJSONHandler(stderr, nil)
	}
	cfg.Logger = slog.New(handler)
	var err error
	if cfg.TLS, err = sec.Load(tlsIdentity, mtls.Options{Logger: cfg.Logger}); err != nil {
		return err
	}
	if cfg.TLS.Plaintext() {
		cfg.Logger.Warn("-insecure: plaintext gRPC and etcd; anyone who reaches the port can lease retry tokens")
	} else {
		// An embedded etcd serves mutual TLS with the replica's own files.
		cfg.EmbeddedEtcd.TLS = sec.Resolve(tlsIdentity)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	return budgetd.Run(ctx, cfg)
}

// tlsIdentity names the replica's certificate in a -tls-dir.
const tlsIdentity = "budgetd"

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("budgetd status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var status fleetctl.StatusCommand
	status.AddFlags(fs)
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("status: unexpected argument %q", fs.Arg(0))
	}
	return status.Run(ctx, stdout)
}
