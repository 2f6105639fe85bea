// Command gateway is Levee's front door: it serves VerifyService and forwards
// each call to a verifier found in etcd (-etcd) or given by -verifiers, with
// admission control, priorities, circuit breakers and budgeted retries. Every
// flag can also be set through the environment: -etcd is LEVEE_ETCD. See the
// README for the full reference.
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
	"github.com/leveehq/levee/pkg/gateway"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/wellknown"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// parse turns flags (and LEVEE_* variables) into a Config.
func parse(args []string, stderr io.Writer, lookup func(string) (string, bool)) (gateway.Config, mtls.Settings, bool, error) {
	cfg := gateway.DefaultConfig()
	var sec mtls.Settings
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	sec.AddFlags(fs)
	cfg.ServerLimits.AddFlags(fs)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.ListenAddr, wellknown.FlagListen, cfg.ListenAddr, "gRPC listen address")
	fs.StringVar(&cfg.MetricsAddr, wellknown.FlagMetricsListen, cfg.MetricsAddr, "HTTP address for /metrics (empty: none)")
	etcd := fs.String(wellknown.FlagEtcd, "", "comma-separated etcd endpoints: follow verifier registrations and runtime settings")
	fs.StringVar(&cfg.VerifiersTarget, "registry-target", cfg.VerifiersTarget, "etcd naming target verifiers register under")
	fs.StringVar(&cfg.SettingsKey, "settings-key", cfg.SettingsKey, "etcd key of the runtime settings (JSON)")
	verifiers := fs.String(wellknown.FlagVerifiers, "", "comma-separated static verifier addresses (with or instead of -etcd)")
	fs.StringVar(&cfg.VerifierServerName, wellknown.FlagVerifierServerName, "",
		"the name every verifier's certificate must carry, instead of the host dialled (verifiers registering pod IPs)")
	fs.StringVar(&cfg.BudgetTarget, wellknown.FlagBudgetd, "", "budgetd target funding in-fleet retries (empty: no retries)")
	fs.StringVar(&cfg.BudgetKey, "budget-key", cfg.BudgetKey, "budget key the gateway's retries draw from")
	fs.DurationVar(&cfg.Deadline.Default, "default-deadline", cfg.Deadline.Default, "deadline applied to calls that bring none")
	fs.DurationVar(&cfg.Deadline.Max, "max-deadline", cfg.Deadline.Max, "longer incoming deadlines are clamped to this")
	fs.DurationVar(&cfg.Deadline.Margin, "hop-margin", cfg.Deadline.Margin, "per-hop margin subtracted from forwarded deadlines")
	fs.IntVar(&cfg.Admission.InitialLimit, "initial-limit", cfg.Admission.InitialLimit, "concurrency limit at start; 0: the ceiling the verifiers' slots give, until a queue first forms")
	fs.IntVar(&cfg.Admission.MinLimit, "min-limit", cfg.Admission.MinLimit, "the adaptive limit never goes below this")
	fs.IntVar(&cfg.Admission.Ceiling, "max-limit", cfg.Admission.Ceiling, "ceiling of the adaptive limit (runtime setting: ceiling)")
	fs.DurationVar(&cfg.VerifierQueueDelay, "verifier-queue-delay", cfg.VerifierQueueDelay,
		"queue let form at each verifier beyond its workers, in time at its service time (at least one call per worker; 0: none)")
	fs.DurationVar(&cfg.Admission.TargetQueueWait, "target-queue-wait", cfg.Admission.TargetQueueWait, "verifier queue wait above which the limit shrinks")
	fs.Float64Var(&cfg.Admission.CriticalReserve, "critical-reserve", cfg.Admission.CriticalReserve, "share of the limit only critical calls may use")
	fs.Float64Var(&cfg.Admission.BatchShare, "batch-share", cfg.Admission.BatchShare, "share of the limit batch calls may use")
	fs.Float64Var(&cfg.Admission.RetryShare, "retry-share", cfg.Admission.RetryShare, "share of its priority's share a retry may use")
	fs.Float64Var(&cfg.Breaker.FailureRate, "breaker-failure-rate", cfg.Breaker.FailureRate, "failure rate that opens a verifier's breaker")
	fs.DurationVar(&cfg.Breaker.OpenFor, "breaker-open-for", cfg.Breaker.OpenFor, "base open time of a breaker (jittered up by half)")
	fs.BoolVar(&cfg.Autopilot.Enabled, "autopilot", cfg.Autopilot.Enabled, "recovery autopilot on")
	fs.BoolVar(&cfg.FairShare, wellknown.FlagFairShare, cfg.FairShare, "share the concurrency limit among tenants (runtime setting: fairness)")
	fs.DurationVar(&cfg.Autopilot.ClientTimeout, "client-timeout", cfg.Autopilot.ClientTimeout, "autopilot: how long a typical caller waits")
	fs.IntVar(&cfg.Margin.Attempts, "margin-attempts", cfg.Margin.Attempts, "bistability margin: attempts a caller makes when every one fails")
	fs.Float64Var(&cfg.Margin.RetryRatio, "margin-retry-ratio", cfg.Margin.RetryRatio, "bistability margin: the callers' retry budget, retries per first attempt (negative: none)")
	fs.BoolVar(&cfg.Unguarded, wellknown.FlagUnguarded, false, "turn every defence off: the lab's control fleet (levee-lab) only, never production")
	fs.BoolVar(&cfg.AllowAnonymous, wellknown.FlagAllowAnonymous, false, "also serve callers without a client certificate, as one tenant (anonymous) at priority batch at most; command line only")
	logJSON := fs.Bool("log-json", false, "log JSON instead of text")
	if err := flagenv.Parse(fs, args, lookup); err != nil {
		return cfg, sec, false, err
	}
	if fs.NArg() > 0 {
		return cfg, sec, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.EtcdEndpoints = flagenv.List(*etcd)
	cfg.Verifiers = flagenv.List(*verifiers)
	if err := sec.Check(tlsIdentity); err != nil {
		return cfg, sec, false, err
	}
	return cfg, sec, *logJSON, cfg.Validate()
}

// tlsIdentity names the gateway's certificate in a -tls-dir.
const tlsIdentity = "gateway"

func run(args []string, stderr io.Writer) error {
	cfg, sec, logJSON, err := parse(args, stderr, nil)
	if err != nil {
		return err
	}
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if logJSON {
		handler = slog.NewJSONHandler(stderr, nil)
	}
	cfg.Logger = slog.New(handler)
	if cfg.TLS, err = sec.Load(tlsIdentity, mtls.Options{Logger: cfg.Logger}); err != nil {
		return err
	}
	if cfg.TLS.Plaintext() {
		cfg.Logger.Warn("-insecure: plaintext gRPC and etcd; passwords cross the network in the clear, and callers' tenants and priorities are taken on their word")
	} else if cfg.AllowAnonymous {
		cfg.Logger.Warn("-allow-anonymous: callers without a certificate are served, as tenant anonymous at priority batch at most")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return gateway.Run(ctx, cfg)
}
