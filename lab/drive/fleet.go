// Package drive starts the fleets the lab measures and acts on their
// members. A fleet is separate processes on this machine (StartLocal), the
// compose fleet's containers (StartCompose), or a running Verify service it
// only calls (Target).
//
// What it promises:
//
//   - Real parts: every member is its own process or container, and every
//     action on one is real — a signal, a cgroup CPU quota, docker pause,
//     kill, stop or update, iptables rules in the container's network
//     namespace, or the verifiers' own capacity knob.
//   - Every action has its undo (Resume, Restart, LimitCPU(0), Heal, the
//     knob back to full), and Fleet.Close resumes, lifts and stops every
//     member it started; local members die with the lab (Pdeathsig).
//   - It imports no server package: the fleet is the product's binaries,
//     started with the flags package wellknown names, and budgetd is asked
//     who leads over its wire API.
package drive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	verifyv1 "github.com/leveehq/levee/gen/levee/verify/v1"
	"github.com/leveehq/levee/internal/backoff"
	"github.com/leveehq/levee/pkg/mtls"
)

// Role is what a fleet member does.
type Role string

// The roles of a Levee fleet.
const (
	RoleEtcd     Role = "etcd"
	RoleBudgetd  Role = "budgetd"
	RoleVerifier Role = "verifier"
	RoleGateway  Role = "gateway"
)

// Fleet is a running fleet under test: where its clients call, and the
// members triggers act on and metrics come from.
type Fleet struct {
	// Name labels the fleet in reports: "levee", "control" or "target".
	Name string
	// Target is the gRPC address of the Verify service the clients call.
	Target string
	// Budgetd is the budgetd target the levee population leases retry
	// tokens from; empty when the fleet has none (its levee clients then
	// never retry).
	Budgetd string
	// Members are the fleet's processes or containers, in start order.
	Members []*Member
	// TLS is the identity the lab presents to the fleet's operator ports
	// (the admin certificate of its development set: the capacity knob,
	// budgetd's status, health); nil: the fleet is plaintext.
	TLS *mtls.Source
	// Caller is the identity the lab's load presents to the gateway and
	// budgetd (the development set's front end: it names tenants, asks for
	// any priority, and leases retry tokens); nil: the fleet is plaintext.
	Caller *mtls.Source

	close func() error
}

// Close stops the fleet and waits for it: every member is resumed, lifted of
// any CPU cut and stopped. It is safe to call more than once.
func (f *Fleet) Close() error {
	if f.close == nil {
		return nil
	}
	c := f.close
	f.close = nil
	return c()
}

// Member is one process or container of a fleet.
type Member struct {
	// Name is unique in the fleet: "verifier-1", "budgetd-2", "etcd-1".
	Name string
	Role Role
	// Addr is its gRPC address as the lab reaches it ("" if none).
	Addr string
	// Metrics is its Prometheus URL as the lab reaches it ("" if none).
	Metrics string

	advertised string // the address the fleet knows it by, when not Addr
	ctl        controller
}

// controller acts on one member: a local process or a container.
type controller interface {
	// pause stops the member without its knowledge (SIGSTOP, docker
	// pause); resume undoes it.
	pause() error
	resume() error
	// kill ends the member at once (SIGKILL, docker kill); restart starts
	// it again, with its old identity, and waits until it serves.
	kill() error
	restart(ctx context.Context) error
	// limitCPU caps the CPU the member may use, in cores; 0 lifts the cap.
	limitCPU(cores float64) error
	// drain stops the member as an operator would (SIGTERM; docker stop),
	// giving it time to drain, and returns once it has exited; restart
	// brings it back.
	drain(ctx context.Context) error
	// partition drops every packet between the member and the peers, in
	// both directions, until heal (compose only: in the container's own
	// network namespace).
	partition(peers []controller) error
	heal() error
}

// Target is a running Verify service at addr that the lab only calls; the
// metrics URLs, if any, are scraped as its gateways'.
func Target(addr string, metrics []string) *Fleet {
	f := &Fleet{Name: "target", Target: addr}
	for i, u := range metrics {
		f.Members = append(f.Members, &Member{Name: fmt.Sprintf("target-%d", i+1), Role: RoleGateway, Metrics: u})
	}
	return f
}

// errNoControl is returned by actions on members the lab cannot act on
// (a -target fleet's).
var errNoControl = errors.New("drive: the lab cannot act on this member (a -target fleet is only called)")

func (m *Member) control() (controller, error) {
	if m.ctl == nil {
		return nil, fmt.Errorf("%s: %w", m.Name, errNoControl)
	}
	return m.ctl, nil
}

// Pause stops the member without its knowledge (SIGSTOP; docker pause);
// Resume undoes it.
func (m *Member) Pause() error {
	ctl, err := m.control()
	if err != nil {
		return err
	}
	return ctl.pause()
}

// Resume continues a paused member.
func (m *Member) Resume() error {
	ctl, err := m.control()
	if err != nil {
		return err
	}
	return ctl.resume()
}

// Kill ends the member at once (SIGKILL; docker kill); Restart brings it
// back.
func (m *Member) Kill() error {
	ctl, err := m.control()
	if err != nil {
		return err
	}
	return ctl.kill()
}

// Restart starts the member again, with its old identity, and waits until
// it serves.
func (m *Member) Restart(ctx context.Context) error {
	ctl, err := m.control()
	if err != nil {
		return err
	}
	return ctl.restart(ctx)
}

// LimitCPU caps the CPU the member may use, in cores (a cgroup CPU quota;
// docker update --cpus); 0 lifts the cap.
func (m *Member) LimitCPU(cores float64) error {
	ctl, err := m.control()
	if err != nil {
		return err
	}
	return ctl.limitCPU(cores)
}

// Drain stops the member as an operator would (SIGTERM; docker stop),
// giving it time to drain, and returns once it has exited; Restart brings
// it back.
func (m *Member) Drain(ctx context.Context) error {
	ctl, err := m.control()
	if err != nil {
		return err
	}
	return ctl.drain(ctx)
}

// Partition drops every packet between the member and the peers, in both
// directions, until Heal (compose only: in the container's own network
// namespace).
func (m *Member) Partition(peers []*Member) error {
	ctl, err := m.control()
	if err != nil {
		return err
	}
	var pcs []controller
	for _, p := range peers {
		pc, err := p.control()
		if err != nil {
			return err
		}
		pcs = append(pcs, pc)
	}
	return ctl.partition(pcs)
}

// Heal removes what Partition put in place.
func (m *Member) Heal() error {
	ctl, err := m.control()
	if err != nil {
		return err
	}
	return ctl.heal()
}

// PID is the process ID of a member the lab runs as a local process, or 0
// (a container, a target, a process not running).
func (m *Member) PID() int {
	if p, ok := m.ctl.(*proc); ok {
		return p.pid()
	}
	return 0
}

// ByRole returns the members of role r.
func (f *Fleet) ByRole(r Role) []*Member {
	var out []*Member
	for _, m := range f.Members {
		if m.Role == r {
			out = append(out, m)
		}
	}
	return out
}

// Select resolves a member selector: a role in the plural ("verifiers",
// "budgetds", "etcds", "gateways"), "all", "budgetd-leader" (the budgetd
// replica leading now), "etcd-majority" (enough etcd members to lose the
// quorum), or member names joined by '+' ("verifier-1+verifier-2").
func (f *Fleet) Select(ctx context.Context, sel string) ([]*Member, error) {
	var out []*Member
	switch sel {
	case "all":
		out = append(out, f.Members...)
	case "verifiers", "budgetds", "etcds", "gateways":
		out = f.ByRole(Role(strings.TrimSuffix(sel, "s")))
	case "budgetd-leader":
		m, err := f.budgetdLeader(ctx)
		if err != nil {
			return nil, err
		}
		out = []*Member{m}
	case "etcd-majority":
		// A quorum is a majority: lose n/2+1 of n and none is left.
		if etcds := f.ByRole(RoleEtcd); len(etcds) > 0 {
			out = etcds[len(etcds)-(len(etcds)/2+1):]
		}
	default:
		for _, name := range strings.Split(sel, "+") {
			i := slices.IndexFunc(f.Members, func(m *Member) bool { return m.Name == name })
			if i < 0 {
				return nil, fmt.Errorf("drive: no member %q in the %s fleet (members: %s)", Truncate(name), f.Name, f.names())
			}
			out = append(out, f.Members[i])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("drive: %q selects no member of the %s fleet (members: %s)", Truncate(sel), f.Name, f.names())
	}
	return out, nil
}

func (f *Fleet) names() string {
	var ns []string
	for _, m := range f.Members {
		ns = append(ns, m.Name)
	}
	return strings.Join(ns, ", ")
}

// budgetdLeader asks any budgetd replica which one leads.
func (f *Fleet) budgetdLeader(ctx context.Context) (*Member, error) {
	bs := f.ByRole(RoleBudgetd)
	var errs []error
	for _, b := range bs {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		leader, err := f.LeaderOf(qctx, b.Addr)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, c := range bs {
			if c.Addr == leader || c.advertised == leader {
				return c, nil
			}
		}
		errs = append(errs, fmt.Errorf("budgetd says the leader is %q, which is no member of the fleet", leader))
	}
	return nil, fmt.Errorf("drive: no budgetd leader: %w", errors.Join(errs...))
}

// BudgetdStatus asks the budgetd replica at addr for its status, every
// key's, through the wire API (levee.budget.v1.BudgetService/Status),
// presenting the fleet's identity.
func (f *Fleet) BudgetdStatus(ctx context.Context, addr string) (*budgetv1.StatusResponse, error) {
	cc, err := grpc.NewClient(addr, f.TLS.DialOption(""))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	defer cc.Close()
	resp, err := budgetv1.NewBudgetServiceClient(cc).Status(ctx, &budgetv1.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("status from %s: %w", addr, err)
	}
	return resp, nil
}

// LeaderOf asks the budgetd replica at addr for the leader's address.
func (f *Fleet) LeaderOf(ctx context.Context, addr string) (string, error) {
	resp, err := f.BudgetdStatus(ctx, addr)
	if err != nil {
		return "", err
	}
	if resp.GetLeader() == "" {
		return "", fmt.Errorf("budgetd %s knows no leader", addr)
	}
	return resp.GetLeader(), nil
}

// SetKnob sets a verifier's capacity knob (VerifierAdminService.SetCapacity):
// the fraction of its workers it keeps and how much slower each hash runs. A
// duration makes the verifier restore full capacity by itself when it
// elapses, should the lab die first; (1, 1, 0) restores it now.
func (f *Fleet) SetKnob(ctx context.Context, m *Member, fraction, slowdown float64, d time.Duration) error {
	if m.Role != RoleVerifier {
		return fmt.Errorf("drive: the capacity knob is a verifier's; %s is a %s", m.Name, m.Role)
	}
	cc, err := grpc.NewClient(m.Addr, f.TLS.DialOption(""))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = verifyv1.NewVerifierAdminServiceClient(cc).SetCapacity(ctx, &verifyv1.SetCapacityRequest{
		WorkerFraction: fraction, Slowdown: slowdown, DurationMs: d.Milliseconds()})
	return err
}

// RollingRestart restarts targets one at a time in the background, as an
// operator's rolling restart does: each is drained, started again and waited
// for until it serves, the next only then. It returns what waits for the
// round to end; a round cannot be taken back (a member half way through is
// brought up, not left down).
func RollingRestart(ctx context.Context, targets []*Member) (wait func(context.Context) error, err error) {
	var ctls []controller
	for _, m := range targets {
		ctl, err := m.control()
		if err != nil {
			return nil, err
		}
		ctls = append(ctls, ctl)
	}
	done := make(chan error, 1)
	go func() {
		// One at a time, and not one more after a member that did not come
		// back: a rolling restart that carries on takes the fleet down.
		for i, ctl := range ctls {
			if err := ctl.drain(ctx); err != nil {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
				err = errors.Join(err, ctl.restart(rctx)) // bring it back whatever state it is in
				cancel()
				done <- fmt.Errorf("drive: stopping %s: %w", targets[i].Name, err)
				return
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
			err := ctl.restart(rctx)
			cancel()
			if err != nil {
				done <- fmt.Errorf("drive: starting %s: %w", targets[i].Name, err)
				return
			}
		}
		done <- nil
	}()
	return func(ctx context.Context) error {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("drive: the rolling restart did not end in time: %w", ctx.Err())
		}
	}, nil
}

// Truncate bounds user text quoted back in errors to 40 bytes.
func Truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Sleep waits for d or until ctx ends, whichever is first, and returns
// ctx's error if it ended.
func Sleep(ctx context.Context, d time.Duration) error {
	if !backoff.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}
