// Package fleet runs a whole Levee fleet in one process: an embedded etcd,
// one budgetd, several verifiers that register in etcd, and a gateway that
// finds them there and draws its retries from budgetd. Every component is the
// same library its own binary runs, talking to the others over real sockets on
// loopback, so what works here works split across machines.
//
// It is what `levee local` runs, and what tests and benchmarks use to stand up
// a fleet.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leveehq/levee/internal/embeddedetcd"
	"github.com/leveehq/levee/internal/etcdclient"
	"github.com/leveehq/levee/pkg/budgetd"
	"github.com/leveehq/levee/pkg/etcdauth"
	"github.com/leveehq/levee/pkg/gateway"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/registry"
	"github.com/leveehq/levee/pkg/verifier"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/wellknown"
)

// Config describes a local fleet. Start from DefaultConfig.
type Config struct {
	// Etcd is the embedded etcd (data directory, client and peer URLs).
	Etcd embeddedetcd.Config
	// Host is the address every component listens on.
	Host string
	// GatewayPort, BudgetdPort and VerifierPort are gRPC ports; verifier i
	// (from 0) listens on VerifierPort+i. Metrics listen on the gRPC port
	// + MetricsOffset (none when it is 0). Port 0 picks free ports, for the
	// metrics too.
	GatewayPort, BudgetdPort, VerifierPort int
	MetricsOffset                          int
	// Verifiers is how many verifiers to run.
	Verifiers int
	// Workers per verifier: by default the cores shared among verifiers.
	Workers int
	// Policy is the verifiers' hashing policy.
	Policy verify.Policy
	// EnableCapacityKnob lets experiments slow verifiers down (with TLS,
	// only callers presenting the admin certificate).
	EnableCapacityKnob bool
	// TLSDir holds a development set of certificates
	// (mtls.WriteDevelopmentSet): every component serves and dials mutual
	// TLS with its own identity from it, etcd included, and the gateway's
	// callers present a certificate naming their tenant (the set's client
	// or frontend). Empty: plaintext everywhere.
	TLSDir string
	// Logger receives every component's logs, each tagged with its name.
	Logger *slog.Logger
	// Mutate, if set, adjusts each component's configuration before start.
	MutateGateway  func(*gateway.Config)
	MutateVerifier func(i int, c *verifier.Config)
	MutateBudgetd  func(*budgetd.Config)
}

// DefaultConfig is the fleet `levee local` starts: two verifiers, ports
// 7700 (gateway), 7702 (budgetd), 7711+ (verifiers), metrics at +2000.
func DefaultConfig() Config {
	return Config{
		Etcd: embeddedetcd.Config{
			DataDir:   "levee-local.etcd",
			ClientURL: wellknown.LoopbackAddr(wellknown.EtcdClientPort), // http://, or https:// with TLSDir
			PeerURL:   wellknown.LoopbackAddr(wellknown.EtcdPeerPort),
			Name:      "levee-local",
		},
		Host:          wellknown.Loopback,
		GatewayPort:   wellknown.GatewayPort,
		BudgetdPort:   wellknown.BudgetdPort,
		VerifierPort:  wellknown.LocalVerifierPort,
		MetricsOffset: wellknown.MetricsOffset,
		Verifiers:     2,
		Policy:        verify.DefaultPolicy(),
	}
}

// Addresses are where the fleet's components listen.
type Addresses struct {
	Etcd            []string
	Gateway         string
	GatewayMetrics  string
	Budgetd         string
	BudgetdMetrics  string
	Verifiers       []string
	VerifierMetrics []string
}

// Run starts the fleet, calls ready (if not nil) once every component has
// started and the gateway sees every verifier, and runs until ctx ends; then
// it stops the gateway, the verifiers (draining), budgetd and etcd, in that
// order, and returns after all of them have. A component that stops on its
// own — fails to start serving, or dies — stops the fleet the same way, and
// Run returns an error naming it.
func Run(ctx context.Context, cfg Config, ready func(Addresses)) error {
	if cfg.Verifiers < 1 {
		return fmt.Errorf("fleet: Verifiers must be at least 1, got %d", cfg.Verifiers)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.Workers == 0 {
		cfg.Workers = max(1, runtime.GOMAXPROCS(0)/cfg.Verifiers)
	}
	ids, err := loadIdentities(cfg.TLSDir, log)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if cfg.TLSDir != "" {
		cfg.Etcd.TLS = mtls.Settings{Dir: cfg.TLSDir}.Resolve(mtls.IdentityEtcd)
	}
	etcd, err := embeddedetcd.Start(cfg.Etcd, log.With("component", "etcd"), slog.LevelError)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	defer etcd.Close()
	endpoints := etcd.Endpoints()
	if cfg.TLSDir != "" {
		admin, err := mtls.Settings{Dir: cfg.TLSDir}.Load(mtls.IdentityAdmin, mtls.Options{})
		if err == nil {
			err = EnableEtcdAuth(ctx, endpoints, admin, EtcdLayout())
		}
		if err != nil {
			return fmt.Errorf("fleet: etcd access control: %w", err)
		}
	} else if err := refuseAuthWithoutTLS(ctx, endpoints, cfg.Etcd.DataDir); err != nil {
		return err
	}

	// Listen first, so that every address is known (port 0 included) and
	// taken before anything dials it.
	listen := func(port int) (net.Listener, net.Listener, error) {
		lis, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(port)))
		if err != nil || cfg.MetricsOffset == 0 {
			return lis, nil, err
		}
		mport := 0
		if port != 0 {
			mport = port + cfg.MetricsOffset
		}
		mlis, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(mport)))
		if err != nil {
			lis.Close()
			return nil, nil, err
		}
		return lis, mlis, nil
	}
	var closers []net.Listener
	closeAll := func() {
		for _, l := range closers {
			if l != nil {
				l.Close()
			}
		}
	}
	addrOf := func(l net.Listener) string {
		if l == nil {
			return ""
		}
		return l.Addr().String()
	}
	var addrs Addresses
	addrs.Etcd = endpoints

	blis, bmlis, err := listen(cfg.BudgetdPort)
	if err != nil {
		return fmt.Errorf("fleet: budgetd: %w", err)
	}
	closers = append(closers, blis, bmlis)
	addrs.Budgetd, addrs.BudgetdMetrics = addrOf(blis), addrOf(bmlis)

	type vl struct{ lis, mlis net.Listener }
	var vls []vl
	for i := range cfg.Verifiers {
		port := 0
		if cfg.VerifierPort != 0 {
			port = cfg.VerifierPort + i
		}
		lis, mlis, err := listen(port)
		if err != nil {
			closeAll()
			return fmt.Errorf("fleet: verifier %d: %w", i+1, err)
		}
		closers = append(closers, lis, mlis)
		vls = append(vls, vl{lis, mlis})
		addrs.Verifiers = append(addrs.Verifiers, addrOf(lis))
		addrs.VerifierMetrics = append(addrs.VerifierMetrics, addrOf(mlis))
	}
	glis, gmlis, err := listen(cfg.GatewayPort)
	if err != nil {
		closeAll()
		return fmt.Errorf("fleet: gateway: %w", err)
	}
	closers = append(closers, glis, gmlis)
	addrs.Gateway, addrs.GatewayMetrics = addrOf(glis), addrOf(gmlis)

	bcfg := budgetd.DefaultConfig()
	bcfg.EtcdEndpoints = endpoints
	bcfg.AdvertiseAddr = addrs.Budgetd
	bcfg.Logger = log.With("component", "budgetd")
	bcfg.TLS = ids.budgetd
	if cfg.MutateBudgetd != nil {
		cfg.MutateBudgetd(&bcfg)
	}
	bsrv, err := budgetd.New(bcfg)
	if err != nil {
		closeAll()
		return fmt.Errorf("fleet: budgetd: %w", err)
	}

	vsrvs := make([]*verifier.Server, cfg.Verifiers)
	for i := range cfg.Verifiers {
		vc := verifier.DefaultConfig()
		vc.Workers = cfg.Workers
		vc.Policy = cfg.Policy
		vc.EtcdEndpoints = endpoints
		vc.AdvertiseAddr = addrs.Verifiers[i]
		vc.EnableCapacityKnob = cfg.EnableCapacityKnob
		vc.Logger = log.With("component", "verifier", "verifier", i+1)
		vc.TLS = ids.verifier
		if cfg.MutateVerifier != nil {
			cfg.MutateVerifier(i, &vc)
		}
		if vsrvs[i], err = verifier.New(vc); err != nil {
			for _, v := range vsrvs[:i] {
				v.Close()
			}
			closeAll()
			return fmt.Errorf("fleet: verifier %d: %w", i+1, err)
		}
	}

	gcfg := gateway.DefaultConfig()
	gcfg.EtcdEndpoints = endpoints
	gcfg.BudgetTarget = addrs.Budgetd
	gcfg.Logger = log.With("component", "gateway")
	gcfg.TLS = ids.gateway
	if cfg.MutateGateway != nil {
		cfg.MutateGateway(&gcfg)
	}
	gw, err := gateway.New(gcfg)
	if err != nil {
		for _, v := range vsrvs {
			v.Close()
		}
		closeAll()
		return fmt.Errorf("fleet: gateway: %w", err)
	}

	// Stop order: the gateway first (no new work), then the verifiers
	// (drain), then budgetd; etcd last (deferred above).
	gctx, stopGateway := context.WithCancel(context.Background())
	vctx, stopVerifiers := context.WithCancel(context.Background())
	bctx, stopBudgetd := context.WithCancel(context.Background())
	// Every component serves until the fleet stops: one that returns first,
	// with an error or without, fails the whole fleet at once, named.
	type exit struct {
		component string
		err       error
	}
	exits := make(chan exit, 2+len(vsrvs))
	serve := func(g *errgroup.Group, component string, f func() error) {
		g.Go(func() error {
			err := f()
			exits <- exit{component, err}
			return err
		})
	}
	var gg, vg, bg errgroup.Group
	serve(&bg, "budgetd", func() error { return bsrv.Serve(bctx, blis, bmlis) })
	for i, v := range vsrvs {
		serve(&vg, fmt.Sprintf("verifier %d", i+1), func() error { return v.Serve(vctx, vls[i].lis, vls[i].mlis) })
	}
	serve(&gg, "gateway", func() error { return gw.Serve(gctx, glis, gmlis) })

	// Wait for the gateway to see every verifier (each registers after its
	// warm-up), or for a component to fail or the fleet to be stopped.
	var runErr error
	tick := time.NewTicker(20 * time.Millisecond)
	announced := false
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case e := <-exits:
			if e.err == nil {
				e.err = errors.New("stopped serving on its own")
			}
			runErr = fmt.Errorf("fleet: %s: %w", e.component, e.err)
			break wait
		case <-tick.C:
			if !announced && gw.ServingVerifiers() == cfg.Verifiers {
				announced = true
				if ready != nil {
					ready(addrs)
				}
			}
		}
	}
	tick.Stop()
	// The failed component's error is runErr already; the others' come
	// from their groups as they stop.
	stopGateway()
	gerr := gg.Wait()
	stopVerifiers()
	verr := vg.Wait()
	stopBudgetd()
	berr := bg.Wait()
	if runErr != nil {
		return runErr
	}
	return errors.Join(gerr, verr, berr)
}

// identities are the fleet's TLS identities; nil for plaintext.
type identities struct{ budgetd, verifier, gateway *mtls.Source }

// loadIdentities loads each component's identity from dir; an empty dir is
// plaintext.
func loadIdentities(dir string, log *slog.Logger) (identities, error) {
	var ids identities
	if dir == "" {
		return ids, nil
	}
	set := mtls.Settings{Dir: dir}
	for _, id := range []struct {
		name string
		to   **mtls.Source
	}{{mtls.IdentityBudgetd, &ids.budgetd}, {mtls.IdentityVerifier, &ids.verifier}, {mtls.IdentityGateway, &ids.gateway}} {
		src, err := set.Load(id.name, mtls.Options{Logger: log.With("component", id.name)})
		if err != nil {
			return ids, err
		}
		*id.to = src
	}
	return ids, nil
}

// EtcdLayout is where the fleet's components keep their keys in etcd, with
// every component at its defaults: what etcd's access control is set up for.
func EtcdLayout() etcdauth.Layout {
	return etcdauth.Layout{
		Registry:        registry.DefaultTarget + "/",
		GatewaySettings: gateway.DefaultSettingsKey,
		Budget:          budgetd.DefaultConfig().Prefix,
	}
}

// EnableEtcdAuth turns on etcd's access control for the fleet's identities
// (etcdauth, for the keys of layout), presenting admin, within a 30 s bound.
func EnableEtcdAuth(ctx context.Context, endpoints []string, admin *mtls.Source, layout etcdauth.Layout) error {
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second, TLS: admin})
	if err != nil {
		return err
	}
	defer cli.Close()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return etcdauth.Enable(actx, cli, layout)
}

// refuseAuthWithoutTLS fails when the etcd a plaintext fleet runs on has
// its access control on (a run with TLS turned it on in the same data
// directory): without certificates no component could read or write a key,
// and each would retry "user name is empty" for ever.
func refuseAuthWithoutTLS(ctx context.Context, endpoints []string, dataDir string) error {
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: endpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	defer cli.Close()
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := cli.AuthStatus(actx)
	if err != nil {
		return fmt.Errorf("fleet: etcd auth status: %w", err)
	}
	if st.Enabled {
		return fmt.Errorf("fleet: the etcd data in %s has access control on, from a run with TLS: run without -insecure, "+
			"or give another data directory", dataDir)
	}
	return nil
}
