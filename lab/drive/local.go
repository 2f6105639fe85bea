package drive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/leveehq/levee/internal/promscrape"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/wellknown"
)

// LocalConfig describes a fleet of separate processes on this machine, each
// of which a trigger can pause, kill or throttle on its own.
type LocalConfig struct {
	// Bin holds the programs (see Binaries); StartLocal checks them.
	Bin Binaries
	// Dir receives each fleet's logs and etcd data, in a directory of its
	// own per fleet; the etcd data is removed when the fleet closes.
	Dir string
	// Verifiers is how many verifiers, Workers their -workers each.
	Verifiers, Workers int
	// Budgetds is how many budgetd replicas the guarded fleet runs (two, so
	// that losing the leader elects the other).
	Budgetds int
	// Params is the verifiers' hashing policy, which is also what the lab's
	// stored hash is made with: cheap hashes (m = 1 MiB, t = 8) put the
	// fleet's capacity where two cores can offer it ten times over.
	Params verify.Params
	// VerifierFlags, GatewayFlags and BudgetdFlags are appended to the
	// lab's own flags of every such process, so that a platform team can
	// run the lab against its own configuration: later flags win.
	VerifierFlags, GatewayFlags, BudgetdFlags []string
	// StartTimeout bounds the start of each member.
	StartTimeout time.Duration
	// Insecure runs the Levee fleet in plaintext, as its control always
	// runs. Otherwise it runs mutual TLS on every hop (etcd included) from
	// a development CA made for the fleet, and the lab presents the set's
	// admin certificate: what TLS costs is then in Levee's figures and not
	// in the control's.
	Insecure bool
	// Logger receives the lab's own progress; nil: slog.Default().
	Logger *slog.Logger
}

// DefaultLocal is the lab's standard fleet: 2 verifiers of 1 worker, 2
// budgetd replicas on one embedded etcd, a gateway, all with default flags,
// and hashes at m = 1 MiB, t = 8, p = 1.
func DefaultLocal() LocalConfig {
	return LocalConfig{
		Verifiers:    2,
		Workers:      1,
		Budgetds:     2,
		Params:       verify.Params{Memory: 1024, Iterations: 8, Parallelism: 1},
		StartTimeout: 60 * time.Second,
	}
}

// Validate reports every invalid field.
func (c LocalConfig) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("drive: local fleet needs a directory for logs and data"))
	}
	if c.Verifiers < 1 || c.Verifiers > 64 {
		errs = append(errs, fmt.Errorf("drive: verifiers must be in [1, 64], got %d", c.Verifiers))
	}
	if c.Workers < 1 || c.Workers > 256 {
		errs = append(errs, fmt.Errorf("drive: workers must be in [1, 256], got %d", c.Workers))
	}
	if c.Budgetds < 1 || c.Budgetds > 5 {
		errs = append(errs, fmt.Errorf("drive: budgetd replicas must be in [1, 5], got %d", c.Budgetds))
	}
	if err := (verify.Policy{Params: c.Params, SaltLen: 16, KeyLen: 32}).Validate(verify.DefaultLimits()); err != nil {
		errs = append(errs, fmt.Errorf("drive: hash parameters: %w", err))
	}
	if c.StartTimeout <= 0 {
		errs = append(errs, fmt.Errorf("drive: start timeout must be positive, got %v", c.StartTimeout))
	}
	return errors.Join(errs...)
}

// StartLocal starts a fleet of separate processes: the guarded Levee fleet
// (an embedded etcd run by `levee etcd`, Budgetds budgetd replicas, the
// verifiers registered in etcd, a gateway following them and funding its
// retries from budgetd), or with unguarded the control built from the same
// binaries with every defence off (-unguarded verifiers behind an -unguarded
// gateway that lists them; no etcd, no budgetd). It returns once the gateway
// sees every verifier serving.
func StartLocal(ctx context.Context, cfg LocalConfig, unguarded bool) (_ *Fleet, err error) {
	if err := errors.Join(cfg.Validate(), cfg.Bin.Check()); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	name := "levee"
	if unguarded {
		name = "control"
	}
	dir, err := os.MkdirTemp(cfg.Dir, name+"-")
	if err != nil {
		return nil, fmt.Errorf("drive: %w", err)
	}
	f := &Fleet{Name: name}
	var procs []*proc
	f.close = func() error {
		// Front first: no new work, then the verifiers drain, then the
		// control plane.
		var errs []error
		for i := len(procs) - 1; i >= 0; i-- {
			errs = append(errs, procs[i].stop(10*time.Second))
		}
		errs = append(errs, os.RemoveAll(filepath.Join(dir, "etcd")))
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
		}
	}()
	add := func(m *Member, bin string, args []string, ready func(context.Context) error) error {
		p := &proc{name: m.Name, bin: cfg.Bin.path(bin), args: args, logPath: filepath.Join(dir, m.Name+".log"), ready: ready}
		procs = append(procs, p)
		m.ctl = p
		f.Members = append(f.Members, m)
		sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
		defer cancel()
		log.Debug("starting", "fleet", name, "member", m.Name, "args", strings.Join(args, " "))
		return p.start(sctx)
	}
	hp := func() (string, string, error) {
		a, err1 := freeAddr()
		b, err2 := freeAddr()
		return a, b, errors.Join(err1, err2)
	}

	// Every member's transport security, as flags.
	security, etcdAuth := []string{flag(wellknown.FlagInsecure)}, []string(nil)
	scheme := "http://"
	if !unguarded && !cfg.Insecure {
		certs := filepath.Join(dir, "certs")
		if err := mtls.WriteDevelopmentSet(mtls.DevelopmentSet{Dir: certs, ValidFor: 7 * 24 * time.Hour}, time.Now()); err != nil {
			return nil, fmt.Errorf("drive: %w", err)
		}
		if f.TLS, err = (mtls.Settings{Dir: certs}).Load(mtls.IdentityAdmin, mtls.Options{}); err != nil {
			return nil, fmt.Errorf("drive: %w", err)
		}
		if f.Caller, err = (mtls.Settings{Dir: certs}).Load(mtls.IdentityFrontend, mtls.Options{}); err != nil {
			return nil, fmt.Errorf("drive: %w", err)
		}
		security, scheme = []string{flag(wellknown.FlagTLSDir), certs}, "https://"
		etcdAuth = []string{flag(wellknown.FlagEtcdAuth)}
	}

	var etcdURL string
	var budgetds []string
	if !unguarded {
		client, peer, err := hp()
		if err != nil {
			return nil, err
		}
		etcdURL = scheme + client
		m := &Member{Name: "etcd-1", Role: RoleEtcd, Addr: client}
		if err := add(m, "levee", append([]string{"etcd", flag(wellknown.FlagEtcdDataDir), filepath.Join(dir, "etcd"),
			flag(wellknown.FlagEtcdName), "storm", flag(wellknown.FlagEtcdClientURL), etcdURL,
			flag(wellknown.FlagEtcdPeerURL), scheme + peer}, slices.Concat(security, etcdAuth)...), grpcServing(client, "", f.TLS)); err != nil {
			return nil, err
		}
		for i := range cfg.Budgetds {
			addr, maddr, err := hp()
			if err != nil {
				return nil, err
			}
			m := &Member{Name: "budgetd-" + strconv.Itoa(i+1), Role: RoleBudgetd, Addr: addr, Metrics: "http://" + maddr + "/metrics"}
			args := slices.Concat([]string{flag(wellknown.FlagEtcd), etcdURL, flag(wellknown.FlagListen), addr,
				flag(wellknown.FlagAdvertise), addr, flag(wellknown.FlagMetricsListen), maddr}, security, cfg.BudgetdFlags)
			if err := add(m, "budgetd", args, grpcServing(addr, "", f.TLS)); err != nil {
				return nil, err
			}
			budgetds = append(budgetds, addr)
		}
		f.Budgetd = strings.Join(budgetds, ",")
	}
	var verifiers []string
	for i := range cfg.Verifiers {
		addr, maddr, err := hp()
		if err != nil {
			return nil, err
		}
		m := &Member{Name: "verifier-" + strconv.Itoa(i+1), Role: RoleVerifier, Addr: addr, Metrics: "http://" + maddr + "/metrics"}
		args := []string{flag(wellknown.FlagListen), addr, flag(wellknown.FlagMetricsListen), maddr,
			flag(wellknown.FlagWorkers), strconv.Itoa(cfg.Workers),
			flag(wellknown.FlagArgon2MemoryKiB), strconv.FormatUint(uint64(cfg.Params.Memory), 10),
			flag(wellknown.FlagArgon2Iterations), strconv.FormatUint(uint64(cfg.Params.Iterations), 10),
			flag(wellknown.FlagArgon2Parallelism), strconv.Itoa(int(cfg.Params.Parallelism)),
			flag(wellknown.FlagEnableCapacityKnob), flag(wellknown.FlagDrainTimeout), "5s"}
		if unguarded {
			args = append(args, flag(wellknown.FlagUnguarded))
		} else {
			args = append(args, flag(wellknown.FlagEtcd), etcdURL)
		}
		if err := add(m, "verifier", slices.Concat(args, security, cfg.VerifierFlags), grpcServing(addr, "", f.TLS)); err != nil {
			return nil, err
		}
		verifiers = append(verifiers, addr)
	}
	addr, maddr, err := hp()
	if err != nil {
		return nil, err
	}
	m := &Member{Name: "gateway-1", Role: RoleGateway, Addr: addr, Metrics: "http://" + maddr + "/metrics"}
	args := []string{flag(wellknown.FlagListen), addr, flag(wellknown.FlagMetricsListen), maddr}
	if unguarded {
		args = append(args, flag(wellknown.FlagUnguarded), flag(wellknown.FlagVerifiers), strings.Join(verifiers, ","))
	} else {
		args = append(args, flag(wellknown.FlagEtcd), etcdURL, flag(wellknown.FlagBudgetd), f.Budgetd)
	}
	if err := add(m, "gateway", slices.Concat(args, security, cfg.GatewayFlags), gatewaySees(addr, m.Metrics, cfg.Verifiers, f.TLS)); err != nil {
		return nil, err
	}
	f.Target = addr
	log.Info("fleet up", "fleet", name, "gateway", addr, "verifiers", len(verifiers), "budgetd", len(budgetds), "logs", dir)
	return f, nil
}

// flag is a command-line flag as a member's arguments spell it.
func flag(name string) string { return "-" + name }

// freeAddr returns a loopback address with a port free now. Another process
// may take it before the member binds it; the member then fails to start and
// says so in its log.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("drive: no free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// poll calls f every 50 ms until it returns nil or ctx ends (then the last
// error).
func poll(ctx context.Context, f func(context.Context) error) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// grpcServing waits until the gRPC health service at addr says SERVING for
// service ("" is the server as a whole).
func grpcServing(addr, service string, id *mtls.Source) func(context.Context) error {
	return func(ctx context.Context) error {
		cc, err := grpc.NewClient(addr, id.DialOption(""))
		if err != nil {
			return err
		}
		defer cc.Close()
		hc := healthpb.NewHealthClient(cc)
		return poll(ctx, func(ctx context.Context) error {
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
			if err != nil {
				return err
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("health %v", resp.GetStatus())
			}
			return nil
		})
	}
}

// gatewaySees waits until the gateway serves and counts n verifiers serving
// (its wellknown.MetricGatewayVerifierServing gauges, refreshed every second).
func gatewaySees(addr, metricsURL string, n int, id *mtls.Source) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := grpcServing(addr, "", id)(ctx); err != nil {
			return err
		}
		return poll(ctx, func(ctx context.Context) error {
			mfs, err := promscrape.Fetch(ctx, metricsURL)
			if err != nil {
				return err
			}
			if got := mfs.Sum(wellknown.MetricGatewayVerifierServing, nil); got != float64(n) {
				return fmt.Errorf("gateway sees %v verifiers serving, want %d", got, n)
			}
			return nil
		})
	}
}
