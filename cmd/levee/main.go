// Command levee is the operator's tool for a Levee fleet: it starts a local fleet, reads and sets its state,
// calibrates and issues certificates. Its subcommands:
//
//	levee local                      start a whole fleet on this machine (embedded etcd)
//	levee status   [-addr budgetd]   what the fleet-wide retry budget is doing
//	levee settings [-etcd ...] get|set name=value...|delete
//	                                 the gateways' runtime settings (clamp, ...)
//	levee calibrate -target 250ms -concurrency 2 -memory-budget 512MiB
//	                                 Argon2id parameters for this machine
//	levee etcd     [flags]           a single-member embedded etcd (labs, development)
//	levee certs    [-out DIR]        a development CA and a certificate per component
//	levee etcd-auth [-etcd ...]      etcd's access control for the fleet's identities
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
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/leveehq/levee/internal/embeddedetcd"
	"github.com/leveehq/levee/internal/etcdclient"
	"github.com/leveehq/levee/internal/flagenv"
	"github.com/leveehq/levee/pkg/bytesize"
	"github.com/leveehq/levee/pkg/calibrate"
	"github.com/leveehq/levee/pkg/fleet"
	"github.com/leveehq/levee/pkg/fleetctl"
	"github.com/leveehq/levee/pkg/gateway"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/residentheap"
	"github.com/leveehq/levee/pkg/wellknown"
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
  calibrate  pick Argon2id parameters for a latency target on this machine,
             with as many hashes at once as the verifier has workers, and
             print the verifier flags:
               levee calibrate -target 250ms -concurrency 2 -memory-budget 512MiB
  etcd       run a single-member etcd in this process, nothing to install
             (what the lab, levee-lab, starts for its fleets):
               levee etcd -data-dir levee.etcd -client-url http://127.0.0.1:2379
  certs      make a development CA and a certificate for each component
             (mTLS in a development or compose fleet; levee certs -h):
               levee certs -out certs
  etcd-auth  turn on etcd's access control for the fleet: a user per
             component's certificate, each allowed only its own keys, and
             settings writes for the admin alone (acting as the admin):
               levee etcd-auth -etcd https://etcd1:2379 -tls-dir certs
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
	case "calibrate":
		return calibrateCmd(ctx, args[1:], stdout, stderr)
	case "etcd":
		return etcdCmd(ctx, args[1:], stderr)
	case "certs":
		return certsCmd(args[1:], stdout, stderr)
	case "etcd-auth":
		return etcdAuthCmd(ctx, args[1:], stdout, stderr)
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
	fs.BoolVar(&cfg.EnableCapacityKnob, "enable-capacity-knob", false, "allow slowing verifiers down (experiments; the admin certificate only)")
	tlsDir := fs.String("tls-dir", "levee-local.certs", "development CA and certificates: made here on first start (and when they near expiry), reused after")
	insecure := fs.Bool("insecure", false, "plaintext everywhere instead of mutual TLS")
	verbose := fs.Bool("v", false, "log every component at info level (default: warnings)")
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	security := "plaintext everywhere (-insecure): passwords cross loopback in the clear"
	if !*insecure {
		made, err := mtls.EnsureDevelopmentSet(mtls.DevelopmentSet{Dir: *tlsDir, ValidFor: 90 * 24 * time.Hour}, time.Now())
		if err != nil {
			return fmt.Errorf("local: development certificates: %w (give -tls-dir another directory)", err)
		}
		cfg.TLSDir = *tlsDir
		security = "mutual TLS on every hop, etcd included, from the development CA in " + *tlsDir
		if made {
			security = "mutual TLS on every hop, etcd included, from a development CA made now in " + *tlsDir
		}
	}
	return fleet.Run(ctx, cfg, func(a fleet.Addresses) {
		fmt.Fprint(stdout, localBanner(a, security, cfg.TLSDir))
	})
}

// localBanner is what levee local prints once the fleet is up: where each
// component listens and commands that work against it as it runs (with
// TLS, grpcurl trusts the development CA and presents the caller
// certificate of tenant "default", and the CLIs present the admin's).
func localBanner(a fleet.Addresses, security, tlsDir string) string {
	grpcurl, cli := "grpcurl -plaintext", "go run ./cmd/levee"
	cliFlags := " -insecure"
	if tlsDir != "" {
		grpcurl = "grpcurl -cacert " + filepath.Join(tlsDir, "ca.crt") + " -cert " + filepath.Join(tlsDir, mtls.IdentityClient+".crt") +
			" -key " + filepath.Join(tlsDir, mtls.IdentityClient+".key")
		cliFlags = " -tls-dir " + tlsDir
	}
	return fmt.Sprintf(`Levee local fleet is up (Ctrl-C stops it).

  security   %s
  gateway    %s   metrics http://%s/metrics
  budgetd    %s   status  http://%s/
  verifiers  %s
  etcd       %s

Verify a password through the gateway:

  %s -d '{"encoded_hash":"%s","password":"%s"}' \
    %s levee.verify.v1.VerifyService/Verify

Hash one:   %s -d '{"password":"%s"}' %s levee.verify.v1.VerifyService/Hash
Budget:     %s status%s
Shed load:  %s settings%s set clamp=4
`, security, a.Gateway, a.GatewayMetrics, a.Budgetd, a.BudgetdMetrics, strings.Join(a.Verifiers, ", "),
		strings.Join(a.Etcd, ", "), grpcurl, exampleHash, examplePasswordB64, a.Gateway, grpcurl, examplePasswordB64, a.Gateway,
		cli, cliFlags, cli, cliFlags)
}

// exampleHash is "correct horse battery staple" under the default policy
// (m=64 MiB, t=3, p=4); examplePasswordB64 is that password in base64, as
// grpcurl wants bytes fields.
const (
	exampleHash        = "$argon2id$v=19$m=65536,t=3,p=4$bGV2ZWUtZXhhbXBsZS1zYWx0$JBG2wCja7dk6LFpIxQhqDoo0phNBP4J1yZeJ9iQCx2g"
	examplePasswordB64 = "Y29ycmVjdCBob3JzZSBiYXR0ZXJ5IHN0YXBsZQ=="
)

// etcdCmd runs an embedded single-member etcd until ctx ends.
func etcdCmd(ctx context.Context, args []string, stderr io.Writer) error {
	cfg := fleet.DefaultConfig().Etcd
	fs := flag.NewFlagSet("levee etcd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.DataDir, wellknown.FlagEtcdDataDir, "levee.etcd", "data directory")
	fs.StringVar(&cfg.ClientURL, wellknown.FlagEtcdClientURL, cfg.ClientURL, "client URL to listen on and advertise (http://host:port, or https:// with TLS)")
	fs.StringVar(&cfg.PeerURL, wellknown.FlagEtcdPeerURL, cfg.PeerURL, "peer URL to listen on and advertise")
	fs.StringVar(&cfg.Name, wellknown.FlagEtcdName, cfg.Name, "member name")
	level := fs.String("log-level", "error", "least severe etcd log shown: debug, info, warn, error")
	auth := fs.Bool(wellknown.FlagEtcdAuth, false, "turn on etcd's access control for the fleet once serving, as levee etcd-auth does (with -tls-dir, as its admin)")
	var sec mtls.Settings
	sec.AddFlags(fs)
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	if err := sec.Check(mtls.IdentityEtcd); err != nil {
		return err
	}
	var admin *mtls.Source
	if !sec.Insecure {
		cfg.TLS = sec.Resolve(mtls.IdentityEtcd)
	}
	if *auth {
		if sec.Dir == "" {
			return errors.New("etcd: -auth acts as the admin of a -tls-dir set; give -tls-dir")
		}
		var err error
		if admin, err = (mtls.Settings{Dir: sec.Dir}).Load(mtls.IdentityAdmin, mtls.Options{}); err != nil {
			return err
		}
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return fmt.Errorf("etcd: -log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	e, err := embeddedetcd.Start(cfg, log, lv)
	if err != nil {
		return err
	}
	if admin != nil {
		if err := fleet.EnableEtcdAuth(ctx, e.Endpoints(), admin, fleet.EtcdLayout()); err != nil {
			e.Close()
			return fmt.Errorf("etcd: access control: %w", err)
		}
	}
	log.Info("etcd serving", "endpoints", strings.Join(e.Endpoints(), ","), "data_dir", cfg.DataDir, "access_control", admin != nil)
	<-ctx.Done()
	e.Close()
	return nil
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("levee status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var status fleetctl.StatusCommand
	status.AddFlags(fs)
	gatewayMetrics := fs.String("gateway-metrics", "http://"+wellknown.LoopbackAddr(wellknown.GatewayPort+wellknown.MetricsOffset)+"/metrics", "a gateway's /metrics, for the bistability margin (empty: none; not with -json)")
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("status: unexpected argument %q", fs.Arg(0))
	}
	if err := status.Run(ctx, stdout); err != nil {
		return err
	}
	if status.JSON || *gatewayMetrics == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, status.Timeout)
	defer cancel()
	if err := fleetctl.PrintMargin(ctx, stdout, *gatewayMetrics); err != nil {
		// The budget is the command's first answer; a gateway not running
		// here is worth a line, not a failure.
		fmt.Fprintf(stdout, "\nBistability margin: %v\n", err)
	}
	return nil
}

func settingsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("levee settings", flag.ContinueOnError)
	fs.SetOutput(stderr)
	etcd := fs.String(wellknown.FlagEtcd, wellknown.LoopbackAddr(wellknown.EtcdClientPort), "comma-separated etcd endpoints")
	key := fs.String("settings-key", gateway.DefaultSettingsKey, "etcd key of the gateways' settings")
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	var sec mtls.Settings
	sec.AddFlags(fs)
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return errors.New("settings: want get, set name=value... or delete")
	}
	// The operator's identity: with etcd's auth on, its certificate's name
	// (admin) is the etcd user allowed to write the settings.
	id, err := sec.Load(mtls.IdentityAdmin, mtls.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: flagenv.List(*etcd), DialTimeout: *timeout, TLS: id})
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer cli.Close()
	return fleetctl.EditSettings(ctx, cli, *key, rest[0], rest[1:], stdout)
}

func calibrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := calibrate.DefaultConfig()
	fs := flag.NewFlagSet("levee calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&cfg.Target, "target", cfg.Target, "p95 latency of one hash while -concurrency hashes run at once")
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "hashes at once: the verifier's -workers (default: the cores)")
	var budget bytesize.Size
	fs.Var(&budget, "memory-budget", "Argon2 memory of all concurrent hashes, with a unit: 512MiB (×1024) or 512MB (×1000); required")
	par := fs.Uint("parallelism", uint(cfg.Parallelism), "Argon2 lanes per hash; above 1, lanes × concurrency outnumber the cores")
	minIter := fs.Uint("min-iterations", uint(cfg.MinIterations), "fewest Argon2 passes to accept (OWASP: 2 with 19 MiB, 1 only with 46 MiB)")
	maxMem := fs.Uint("max-memory-kib", uint(cfg.MaxMemoryKiB), "most memory per hash, in KiB, whatever the budget")
	fs.IntVar(&cfg.Samples, "samples", cfg.Samples, "hashes measured per candidate")
	timeout := fs.Duration("timeout", 3*time.Minute, "give up after this long")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	if budget == 0 {
		return errors.New("calibrate: -memory-budget is required, with a unit: 512MiB (×1024) or 512MB (×1000)")
	}
	if *par > 255 || *minIter > 1<<32-1 || *maxMem > 1<<32-1 {
		return errors.New("calibrate: an Argon2 parameter is out of range")
	}
	cfg.MemoryBudget = int64(budget)
	cfg.Parallelism, cfg.MinIterations, cfg.MaxMemoryKiB = uint8(*par), uint32(*minIter), uint32(*maxMem)
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Measure under the runtime settings the verifier will run with: a hash
	// that faults a fresh array in is several times slower than one reusing
	// a freed array. Put them back afterwards: tests call run in-process.
	gcPercent, memLimit := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	defer func() { debug.SetGCPercent(gcPercent); debug.SetMemoryLimit(memLimit) }()
	residentheap.Keep(cfg.Concurrency, int64(cfg.PerHashKiB())<<10, cfg.MemoryBudget)

	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	res, err := calibrate.Run(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	if *asJSON {
		return res.WriteJSON(stdout)
	}
	return res.WriteText(stdout)
}

// etcdAuthCmd turns on etcd's access control for the fleet (etcdauth),
// presenting the admin identity.
func etcdAuthCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("levee etcd-auth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	etcd := fs.String(wellknown.FlagEtcd, wellknown.LoopbackAddr(wellknown.EtcdClientPort), "comma-separated etcd endpoints")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	layout := fleet.EtcdLayout()
	registry := fs.String("registry-target", strings.TrimSuffix(layout.Registry, "/"), "the verifiers' -registry-target")
	fs.StringVar(&layout.GatewaySettings, "settings-key", layout.GatewaySettings, "the gateways' -settings-key")
	fs.StringVar(&layout.Budget, "budget-prefix", layout.Budget, "budgetd's -prefix")
	var sec mtls.Settings
	sec.AddFlags(fs)
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("etcd-auth: unexpected argument %q", fs.Arg(0))
	}
	layout.Registry = *registry + "/"
	if sec.Insecure {
		return errors.New("etcd-auth: etcd takes its users from client certificates: give the admin's (-tls-dir)")
	}
	admin, err := sec.Load(mtls.IdentityAdmin, mtls.Options{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := fleet.EnableEtcdAuth(ctx, flagenv.List(*etcd), admin, layout); err != nil {
		return fmt.Errorf("etcd-auth: %w", err)
	}
	fmt.Fprintln(stdout, "levee etcd-auth: access control on; users verifier, gateway, budgetd (their own keys) and admin (everything)")
	return nil
}
