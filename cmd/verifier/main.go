// Command verifier serves Levee's VerifyService from a pool of Argon2
// workers; with -etcd it registers in etcd, where gateways find it. Every
// flag can also be set through the environment: -workers is LEVEE_WORKERS.
// See the README for the full reference.
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
	"github.com/leveehq/levee/pkg/bytesize"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/residentheap"
	"github.com/leveehq/levee/pkg/verifier"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/wellknown"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2) // the usage is printed already
		}
		fmt.Fprintln(os.Stderr, "verifier:", err)
		os.Exit(1)
	}
}

// options are the flags that are not verifier.Config fields.
type options struct {
	tls        mtls.Settings
	pepperFile string
	resident   bool
	logJSON    bool
}

// tlsIdentity names the verifier's certificate in a -tls-dir.
const tlsIdentity = "verifier"

// parse turns flags (and LEVEE_* variables) into a Config and the options
// run acts on; it reads no file.
func parse(args []string, stderr io.Writer, lookup func(string) (string, bool)) (verifier.Config, options, error) {
	cfg := verifier.DefaultConfig()
	var o options
	fs := flag.NewFlagSet("verifier", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.tls.AddFlags(fs)
	cfg.ServerLimits.AddFlags(fs)
	fs.StringVar(&cfg.ListenAddr, wellknown.FlagListen, cfg.ListenAddr, "gRPC listen address")
	fs.StringVar(&cfg.MetricsAddr, wellknown.FlagMetricsListen, cfg.MetricsAddr, "HTTP address for /metrics (empty: none)")
	fs.IntVar(&cfg.Workers, wellknown.FlagWorkers, cfg.Workers, "hashes run at once (default: the cores)")
	fs.Var((*bytesize.Auto)(&cfg.MemoryBudget), wellknown.FlagMemoryBudget,
		"Argon2 memory the running hashes may hold in all, with a unit: 512MiB, 2GiB, 300MB (auto: the container's limit less 128MiB, else half the host's memory less 64MiB)")
	fs.IntVar(&cfg.QueueCapacity, "queue", cfg.QueueCapacity, "requests that may wait for a worker")
	fs.DurationVar(&cfg.MaxQueueWait, "max-queue-wait", cfg.MaxQueueWait, "refuse arrivals whose projected queue wait exceeds this")
	fs.DurationVar(&cfg.LIFOAfter, "lifo-after", cfg.LIFOAfter, "serve newest first while the oldest queued request is this much later than projected at admission and more than a quarter of it is queued")
	fs.DurationVar(&cfg.DrainTimeout, wellknown.FlagDrainTimeout, cfg.DrainTimeout, "bound on a graceful drain at SIGTERM")
	fs.DurationVar(&cfg.Deadline.Default, "default-deadline", cfg.Deadline.Default, "deadline applied to calls that bring none")
	fs.DurationVar(&cfg.Deadline.Max, "max-deadline", cfg.Deadline.Max, "longer incoming deadlines are clamped to this")
	fs.DurationVar(&cfg.Deadline.Margin, "hop-margin", cfg.Deadline.Margin, "per-hop margin subtracted from forwarded deadlines")
	mem := fs.Uint(wellknown.FlagArgon2MemoryKiB, uint(cfg.Policy.Params.Memory), "hashing policy: Argon2id memory in KiB")
	iter := fs.Uint(wellknown.FlagArgon2Iterations, uint(cfg.Policy.Params.Iterations), "hashing policy: Argon2id iterations")
	par := fs.Uint(wellknown.FlagArgon2Parallelism, uint(cfg.Policy.Params.Parallelism), "hashing policy: Argon2id lanes")
	maxMem := fs.Uint(wellknown.FlagMaxMemoryKiB, uint(cfg.Limits.MaxMemoryKiB), "refuse stored hashes asking for more memory than this (KiB)")
	maxIter := fs.Uint("max-iterations", uint(cfg.Limits.MaxIterations), "refuse stored hashes asking for more iterations")
	maxPar := fs.Uint("max-parallelism", uint(cfg.Limits.MaxParallelism), "refuse stored hashes asking for more lanes")
	fs.StringVar(&o.pepperFile, "pepper-file", "", "file of pepper keys, lines ID:BASE64KEY and one current=ID (empty: no pepper; see docs/verifier.md#pepper)")
	etcd := fs.String(wellknown.FlagEtcd, "", "comma-separated etcd endpoints to register in, for gateways (empty: no registration)")
	fs.StringVar(&cfg.AdvertiseAddr, wellknown.FlagAdvertise, "", "address registered for gateways to dial (default: the listen address)")
	fs.StringVar(&cfg.RegistryTarget, "registry-target", cfg.RegistryTarget, "etcd naming target to register under (gateways dial etcd:///<target>)")
	fs.DurationVar(&cfg.RegistryTTL, "registry-ttl", cfg.RegistryTTL, "registration lease TTL: a verifier that dies vanishes within it (whole seconds, at least 2s)")
	fs.BoolVar(&cfg.EnableCapacityKnob, wellknown.FlagEnableCapacityKnob, false, "allow VerifierAdminService.SetCapacity (experiments only; with TLS, only to certificates with the admin role)")
	fs.BoolVar(&cfg.Unguarded, wellknown.FlagUnguarded, false, "turn every overload defence off: the lab's control fleet (levee-lab) only, never production")
	fs.BoolVar(&o.resident, "resident-heap", true, "keep Argon2 memory resident between hashes (GOGC off, soft memory limit)")
	fs.BoolVar(&o.logJSON, "log-json", false, "log JSON instead of text")
	if err := flagenv.Parse(fs, args, lookup); err != nil {
		return cfg, o, err
	}
	if fs.NArg() > 0 {
		return cfg, o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *par > 255 || *maxPar > 255 || *mem > 1<<32-1 || *iter > 1<<32-1 || *maxMem > 1<<32-1 || *maxIter > 1<<32-1 {
		return cfg, o, fmt.Errorf("an Argon2 parameter is out of range")
	}
	cfg.EtcdEndpoints = append(cfg.EtcdEndpoints, flagenv.List(*etcd)...)
	cfg.Policy.Params.Memory, cfg.Policy.Params.Iterations, cfg.Policy.Params.Parallelism = uint32(*mem), uint32(*iter), uint8(*par)
	cfg.Limits.MaxMemoryKiB, cfg.Limits.MaxIterations, cfg.Limits.MaxParallelism = uint32(*maxMem), uint32(*maxIter), uint8(*maxPar)
	if err := o.tls.Check(tlsIdentity); err != nil {
		return cfg, o, err
	}
	return cfg, o, cfg.Validate()
}

func run(args []string, stderr io.Writer) error {
	cfg, o, err := parse(args, stderr, nil)
	if err != nil {
		return err
	}
	if cfg, err = setup(cfg, o, stderr); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return verifier.Run(ctx, cfg)
}

// setup does what parse leaves to run: the logger on stderr, the TLS
// identity, the pepper file, the memory budget resolved from the container
// or the host, and (with -resident-heap) the Go runtime kept resident for
// Argon2. It returns the Config verifier.Run takes.
func setup(cfg verifier.Config, o options, stderr io.Writer) (verifier.Config, error) {
	var handler slog.Handler = slog.NewTextHandler(stderr, nil)
	if o.logJSON {
		handler = slog.NewJSONHandler(stderr, nil)
	}
	cfg.Logger = slog.New(handler)
	var err error
	if cfg.TLS, err = o.tls.Load(tlsIdentity, mtls.Options{Logger: cfg.Logger}); err != nil {
		return cfg, err
	}
	if cfg.TLS.Plaintext() {
		cfg.Logger.Warn("-insecure: plaintext gRPC and etcd; passwords cross the network in the clear")
		if cfg.EnableCapacityKnob {
			cfg.Logger.Warn("-insecure with -enable-capacity-knob: anyone who reaches this port may slow this verifier down; no identity guards the knob without TLS")
		}
	}
	if o.pepperFile != "" {
		p, err := verify.LoadPepperFile(o.pepperFile, cfg.Logger)
		if err != nil {
			return cfg, err
		}
		cfg.Peppers = p
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	budget, source := cfg.ResolveMemoryBudget()
	cfg.MemoryBudget = budget
	cfg.Logger.Info("memory budget", "budget", bytesize.Size(budget).Approx(), "bytes", budget, "source", source)
	if o.resident {
		limit := residentheap.Keep(cfg.Workers, cfg.WidestHash(), budget)
		cfg.Logger.Info("heap kept resident", "soft_memory_limit_mib", limit>>20)
	}
	return cfg, nil
}
