package drive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/wellknown"
)

// ComposeConfig describes the compose fleet of docker-compose.yml as the lab
// runs it: with lab/compose/docker-compose.lab.yml on top (ports for the
// lab on 127.0.0.1, the lab's hashing policy, the capacity knob), and for
// the control also lab/compose/docker-compose.unguarded.yml.
type ComposeConfig struct {
	// Root is the Levee source tree: docker-compose.yml, deploy/ and
	// lab/compose/.
	Root string
	// Project is the compose project name (that of scripts/docker-up.sh
	// when empty: the directory's name).
	Project string
	// StartTimeout bounds each (re)start of the Levee services.
	StartTimeout time.Duration
	Logger       *slog.Logger
}

// The published ports of docker-compose.lab.yml, one home for them here:
// verifier i (from 1) at 1771i (gRPC) and 1971i (metrics), budgetd i at
// 1772i and 1972i; the gateway at docker-compose.yml's, Levee's default
// (wellknown.GatewayPort and its metrics port).
const (
	composeVerifiers = 3
	composeBudgetds  = 2
	composeEtcds     = 3
)

func composeVerifierPort(i int) (grpcPort, metricsPort int) { return 17710 + i, 19710 + i }
func composeBudgetdPort(i int) (grpcPort, metricsPort int)  { return 17720 + i, 19720 + i }

// leveeServices are the services a fresh compose fleet recreates; etcd keeps
// running across experiments.
var leveeServices = []string{"budgetd1", "budgetd2", "verifier1", "verifier2", "verifier3", "gateway"}

func (c ComposeConfig) files(unguarded bool) []string {
	fs := []string{"docker-compose.yml", filepath.Join("lab", "compose", "docker-compose.lab.yml")}
	if unguarded {
		fs = append(fs, filepath.Join("lab", "compose", "docker-compose.unguarded.yml"))
	}
	return fs
}

// compose runs docker compose (v2) or docker-compose (v1.27+) with the
// fleet's files and args, in Root.
func (c ComposeConfig) compose(ctx context.Context, unguarded bool, args ...string) (string, error) {
	var base []string
	if c.Project != "" {
		base = append(base, "-p", c.Project)
	}
	for _, f := range c.files(unguarded) {
		base = append(base, "-f", f)
	}
	name, pre := "docker-compose", []string(nil)
	if err := exec.CommandContext(ctx, "docker", "compose", "version").Run(); err == nil {
		name, pre = "docker", []string{"compose"}
	}
	cmd := exec.CommandContext(ctx, name, append(append(pre, base...), args...)...)
	cmd.Dir = c.Root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("drive: %s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// Down removes the compose fleet, the control's services and volumes
// included.
func (c ComposeConfig) Down(ctx context.Context) (string, error) {
	return c.compose(ctx, true, "down", "-v", "--remove-orphans")
}

// docker runs one docker command.
func docker(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("drive: docker %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return strings.TrimSpace(string(out)), nil
}

// StartCompose (re)creates the Levee services of the compose fleet — the
// guarded fleet, or with unguarded the control — and returns once the
// gateway sees every verifier serving. etcd is started if it is not running
// and otherwise left alone. The images must exist: scripts/docker-up.sh
// builds them. Close resumes and lifts every member; the fleet stays up
// (scripts/docker-down.sh removes it).
func StartCompose(ctx context.Context, cfg ComposeConfig, unguarded bool) (*Fleet, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 3 * time.Minute
	}
	if _, err := docker(ctx, "image", "inspect", "levee/levee:dev"); err != nil {
		return nil, fmt.Errorf("drive: the compose fleet's image is missing; build it with scripts/docker-up.sh: %w", err)
	}
	name := "levee"
	if unguarded {
		name = "control"
	}
	sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	// etcd and what it depends on and needs: the certificates first, its
	// access control once it is up.
	if _, err := cfg.compose(sctx, unguarded, "up", "-d", "etcd1", "etcd2", "etcd3", "etcd-auth"); err != nil {
		return nil, err
	}
	if _, err := cfg.compose(sctx, unguarded, append([]string{"up", "-d", "--force-recreate", "--no-deps"}, leveeServices...)...); err != nil {
		return nil, err
	}
	f := &Fleet{Name: name, Target: wellknown.LoopbackAddr(wellknown.GatewayPort)}
	container := func(service string) (string, error) {
		id, err := cfg.compose(sctx, unguarded, "ps", "-q", service)
		id = strings.TrimSpace(id)
		if err == nil && id == "" {
			err = fmt.Errorf("drive: compose service %s has no container", service)
		}
		return id, err
	}
	id, err := container("certs")
	if err != nil {
		return nil, err
	}
	certs := filepath.Join(cfg.Root, "deploy", "bin", "certs") // where scripts/docker-up.sh copies them
	if cfg.Project != "" {
		certs += "-" + cfg.Project
	}
	if f.TLS, f.Caller, err = composeIdentities(sctx, id, certs); err != nil {
		return nil, err
	}
	var budgetds []string
	add := func(m *Member, service string, ready func(context.Context) error) error {
		id, err := container(service)
		if err != nil {
			return err
		}
		m.ctl = &containerCtl{id: id, ready: ready}
		f.Members = append(f.Members, m)
		return nil
	}
	for i := 1; i <= composeEtcds; i++ {
		if err := add(&Member{Name: "etcd-" + strconv.Itoa(i), Role: RoleEtcd}, "etcd"+strconv.Itoa(i), nil); err != nil {
			return nil, err
		}
	}
	for i := 1; i <= composeBudgetds; i++ {
		gp, mp := composeBudgetdPort(i)
		addr := "127.0.0.1:" + strconv.Itoa(gp)
		m := &Member{Name: "budgetd-" + strconv.Itoa(i), Role: RoleBudgetd, Addr: addr,
			Metrics: "http://127.0.0.1:" + strconv.Itoa(mp) + "/metrics", advertised: net.JoinHostPort("budgetd"+strconv.Itoa(i), strconv.Itoa(wellknown.BudgetdPort))}
		if err := add(m, "budgetd"+strconv.Itoa(i), grpcServing(addr, "", f.TLS)); err != nil {
			return nil, err
		}
		budgetds = append(budgetds, addr)
	}
	for i := 1; i <= composeVerifiers; i++ {
		gp, mp := composeVerifierPort(i)
		addr := "127.0.0.1:" + strconv.Itoa(gp)
		m := &Member{Name: "verifier-" + strconv.Itoa(i), Role: RoleVerifier, Addr: addr, Metrics: "http://127.0.0.1:" + strconv.Itoa(mp) + "/metrics"}
		if err := add(m, "verifier"+strconv.Itoa(i), grpcServing(addr, "", f.TLS)); err != nil {
			return nil, err
		}
	}
	gw := &Member{Name: "gateway-1", Role: RoleGateway, Addr: f.Target,
		Metrics: "http://" + wellknown.LoopbackAddr(wellknown.GatewayPort+wellknown.MetricsOffset) + "/metrics"}
	if err := add(gw, "gateway", gatewaySees(f.Target, gw.Metrics, composeVerifiers, f.TLS)); err != nil {
		return nil, err
	}
	if !unguarded {
		f.Budgetd = strings.Join(budgetds, ",")
	}
	for _, m := range f.Members {
		if c := m.ctl.(*containerCtl); c.ready != nil {
			if err := c.ready(sctx); err != nil {
				return nil, fmt.Errorf("drive: compose %s not ready: %w", m.Name, err)
			}
		}
	}
	f.close = func() error {
		var errs []error
		for _, m := range f.Members {
			c := m.ctl.(*containerCtl)
			errs = append(errs, c.lift())
		}
		return errors.Join(errs...)
	}
	log.Info("compose fleet up", "fleet", name, "gateway", f.Target)
	return f, nil
}

// composeIdentities copies the compose fleet's CA, admin and front-end
// identities out of the certs service's container into dir (as
// scripts/docker-up.sh does) and loads the two identities the lab presents
// to the fleet: the admin's to its operator ports, the front end's as its
// load.
func composeIdentities(ctx context.Context, certsContainer, dir string) (admin, caller *mtls.Source, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("drive: %w", err)
	}
	if _, err := docker(ctx, "cp", certsContainer+":/certs/ca.crt", filepath.Join(dir, "ca.crt")); err != nil {
		return nil, nil, err
	}
	for _, name := range []string{mtls.IdentityAdmin, mtls.IdentityFrontend} {
		for _, f := range []string{name + ".crt", name + ".key"} {
			if _, err := docker(ctx, "cp", certsContainer+":/certs/"+f, filepath.Join(dir, f)); err != nil {
				return nil, nil, err
			}
		}
		if err := os.Chmod(filepath.Join(dir, name+".key"), 0o600); err != nil {
			return nil, nil, fmt.Errorf("drive: %w", err)
		}
	}
	if admin, err = (mtls.Settings{Dir: dir}).Load(mtls.IdentityAdmin, mtls.Options{}); err != nil {
		return nil, nil, err
	}
	caller, err = mtls.Settings{Dir: dir}.Load(mtls.IdentityFrontend, mtls.Options{})
	return admin, caller, err
}

// containerCtl acts on one container of the compose fleet.
type containerCtl struct {
	id     string
	ready  func(context.Context) error
	paused bool
	cut    bool
	cutOff []string // addresses partition dropped
}

var _ controller = (*containerCtl)(nil)

func (c *containerCtl) run(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := docker(ctx, append(args, c.id)...)
	return err
}

// pause freezes the container. Freezing a busy container's cgroup can fail
// while its threads keep changing ("unable to freeze"); it is tried again a
// few times before the trigger gives up.
func (c *containerCtl) pause() error {
	var err error
	for try := range 5 {
		if try > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if err = c.run("pause"); err == nil {
			c.paused = true
			return nil
		}
	}
	return err
}

func (c *containerCtl) resume() error {
	if !c.paused {
		return nil
	}
	if err := c.run("unpause"); err != nil {
		return err
	}
	c.paused = false
	return nil
}

func (c *containerCtl) kill() error { return c.run("kill") }

func (c *containerCtl) restart(ctx context.Context) error {
	if err := c.run("start"); err != nil {
		return err
	}
	if c.ready == nil {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return c.ready(rctx)
}

// drain stops the container as docker stop does (SIGTERM, then SIGKILL
// after its stop_grace_period) and waits for it, or for ctx.
func (c *containerCtl) drain(ctx context.Context) error {
	_, err := docker(ctx, "stop", c.id)
	return err
}

// partitionRule is the iptables comment that marks the lab's rules.
const partitionRule = "levee-storm-partition"

// partition drops every packet between the container and each peer's
// addresses on the compose networks, with iptables rules in the
// container's own network namespace (entered through its PID; the
// images have no iptables of their own). heal removes them.
func (c *containerCtl) partition(peers []controller) error {
	var addrs []string
	for _, p := range peers {
		pc, ok := p.(*containerCtl)
		if !ok {
			return errLocalPartition
		}
		ips, err := pc.addresses()
		if err != nil {
			return err
		}
		addrs = append(addrs, ips...)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("drive: partition of %s: the peers have no address", c.id)
	}
	for _, a := range addrs {
		// Recorded first: heal (and lift) remove whatever went in, and -D
		// of a rule not there only fails.
		c.cutOff = append(c.cutOff, a)
		for _, rule := range partitionRules(a) {
			if err := c.iptables(append([]string{"-I"}, rule...)...); err != nil {
				return errors.Join(err, c.heal())
			}
		}
	}
	return nil
}

// partitionRules are the two rules that drop what goes to a and comes
// from it.
func partitionRules(a string) [][]string { return [][]string{{"OUTPUT", "-d", a}, {"INPUT", "-s", a}} }

// heal removes the rules partition inserted. A rule that is not there
// (its insertion failed) is no error.
func (c *containerCtl) heal() error {
	var errs []error
	for _, a := range c.cutOff {
		for _, rule := range partitionRules(a) {
			if c.iptables(append([]string{"-C"}, rule...)...) != nil {
				continue // not there
			}
			errs = append(errs, c.iptables(append([]string{"-D"}, rule...)...))
		}
	}
	c.cutOff = nil
	return errors.Join(errs...)
}

// iptables runs iptables in the container's network namespace with rule
// (a chain and a match), adding the drop target and the lab's comment.
func (c *containerCtl) iptables(rule ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pid, err := docker(ctx, "inspect", "-f", "{{.State.Pid}}", c.id)
	if err != nil {
		return err
	}
	args := append([]string{"-t", pid, "-n", "iptables"}, rule...)
	args = append(args, "-m", "comment", "--comment", partitionRule, "-j", "DROP")
	if out, err := exec.CommandContext(ctx, "nsenter", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("drive: nsenter %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// addresses are the container's IP addresses on its networks.
func (c *containerCtl) addresses() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := docker(ctx, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", c.id)
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// limitCPU sets docker's CPU quota on the container; 0 lifts it. Docker
// ignores --cpus 0, so lifting sets the quota to every CPU of the Docker
// host, which is no limit at all (and the fleet's next start recreates the
// container without one).
func (c *containerCtl) limitCPU(cores float64) error {
	if cores == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n, err := docker(ctx, "info", "--format", "{{.NCPU}}")
		if err != nil {
			return err
		}
		if _, err := strconv.Atoi(n); err != nil {
			return fmt.Errorf("drive: docker info: NCPU %q: %w", n, err)
		}
		if err := c.run("update", "--cpus", n); err != nil {
			return err
		}
		c.cut = false
		return nil
	}
	if err := c.run("update", "--cpus", strconv.FormatFloat(cores, 'f', 3, 64)); err != nil {
		return err
	}
	c.cut = true
	return nil
}

// lift undoes whatever a trigger left: unpaused, no CPU quota.
func (c *containerCtl) lift() error {
	var errs []error
	if c.paused {
		errs = append(errs, c.resume())
	}
	if c.cut {
		errs = append(errs, c.limitCPU(0))
	}
	if len(c.cutOff) > 0 {
		errs = append(errs, c.heal())
	}
	return errors.Join(errs...)
}
