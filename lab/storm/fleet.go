package storm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
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
	// TLS is the identity the lab presents to the fleet (the admin
	// certificate of its development set: any call, the capacity knob,
	// budgetd's status); nil: the fleet is plaintext.
	TLS *mtls.Source

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

// errNoControl is returned by triggers on members the lab cannot act on
// (a -target fleet's).
var errNoControl = errors.New("storm: the lab cannot act on this member (a -target fleet is only called)")

func (m *Member) control() (controller, error) {
	if m.ctl == nil {
		return nil, fmt.Errorf("%s: %w", m.Name, errNoControl)
	}
	return m.ctl, nil
}

// byRole returns the members of role r.
func (f *Fleet) byRole(r Role) []*Member {
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
		out = f.byRole(Role(strings.TrimSuffix(sel, "s")))
	case "budgetd-leader":
		m, err := f.budgetdLeader(ctx)
		if err != nil {
			return nil, err
		}
		out = []*Member{m}
	case "etcd-majority":
		// A quorum is a majority: lose n/2+1 of n and none is left.
		if etcds := f.byRole(RoleEtcd); len(etcds) > 0 {
			out = etcds[len(etcds)-(len(etcds)/2+1):]
		}
	default:
		for _, name := range strings.Split(sel, "+") {
			i := slices.IndexFunc(f.Members, func(m *Member) bool { return m.Name == name })
			if i < 0 {
				return nil, fmt.Errorf("storm: no member %q in the %s fleet (members: %s)", truncate(name), f.Name, f.names())
			}
			out = append(out, f.Members[i])
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("storm: %q selects no member of the %s fleet (members: %s)", truncate(sel), f.Name, f.names())
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
	bs := f.byRole(RoleBudgetd)
	var errs []error
	for _, b := range bs {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		leader, err := leaderOf(qctx, b.Addr, f.TLS)
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
	return nil, fmt.Errorf("storm: no budgetd leader: %w", errors.Join(errs...))
}

// budgetdStatus asks the budgetd replica at addr for its status, every key's,
// through the wire API (levee.budget.v1.BudgetService/Status).
func budgetdStatus(ctx context.Context, addr string, id *mtls.Source) (*budgetv1.StatusResponse, error) {
	cc, err := grpc.NewClient(addr, id.DialOption(""))
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

// leaderOf asks the budgetd replica at addr for the leader's address.
func leaderOf(ctx context.Context, addr string, id *mtls.Source) (string, error) {
	resp, err := budgetdStatus(ctx, addr, id)
	if err != nil {
		return "", err
	}
	if resp.GetLeader() == "" {
		return "", fmt.Errorf("budgetd %s knows no leader", addr)
	}
	return resp.GetLeader(), nil
}
