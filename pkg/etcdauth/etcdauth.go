// Package etcdauth turns on etcd's own access control for a Levee fleet, so
// that reaching etcd with a certificate of the fleet's CA is not enough to
// rewrite the gateways' settings, the retry budgets or the verifier
// registry.
//
// etcd started with --client-cert-auth takes the common name of a client's
// verified certificate as its etcd user. Enable makes one user per Levee
// identity (mtls.Identity*: the development set's certificates carry these
// names; a certificate of your own PKI must carry them as its common name)
// and gives each only what its component does:
//
//	verifier  read and write the registry (its own registration)
//	gateway   read the registry and the gateways' settings
//	budgetd   read and write the election; read the budget settings
//	admin     everything (etcd's root role): settings writes, budgets
//
// and the root user etcd requires. Any other identity of the CA (client,
// etcd) may connect and read nothing. Enable is idempotent: it adds what is
// missing and turns authentication on if it is off.
package etcdauth

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leveehq/levee/pkg/mtls"
)

// Layout is where the fleet keeps its keys in etcd.
type Layout struct {
	// Registry is the prefix verifiers register under (registry's Target
	// and a slash).
	Registry string
	// GatewaySettings is the key of the gateways' runtime settings.
	GatewaySettings string
	// Budget is budgetd's prefix (its Config.Prefix): the election under
	// Budget + "election", settings under Budget + "config/".
	Budget string
}

// Validate reports a layout with an empty part.
func (l Layout) Validate() error {
	if l.Registry == "" || l.GatewaySettings == "" || l.Budget == "" {
		return fmt.Errorf("etcdauth: every part of the layout must be set, got %+v", l)
	}
	return nil
}

// grant is one permission of a role: the key, or every key under it when
// prefix.
type grant struct {
	key    string
	prefix bool
	perm   clientv3.PermissionType
}

// roles are the roles Enable makes, by the user that gets each.
func (l Layout) roles() map[string][]grant {
	read, rw := clientv3.PermissionType(clientv3.PermRead), clientv3.PermissionType(clientv3.PermReadWrite)
	return map[string][]grant{
		mtls.IdentityVerifier: {{l.Registry, true, rw}},
		mtls.IdentityGateway:  {{l.Registry, true, read}, {l.GatewaySettings, false, read}},
		mtls.IdentityBudgetd:  {{l.Budget + "election", true, rw}, {l.Budget + "config/", true, read}},
	}
}

// rootUser and rootRole are etcd's: authentication cannot be on without
// them.
const (
	rootUser = "root"
	rootRole = "root"
)

// Enable makes the fleet's users and roles in etcd and turns authentication
// on. cli must be allowed everything: any client before authentication is
// on, the admin (or root) identity after.
func Enable(ctx context.Context, cli *clientv3.Client, l Layout) error {
	if err := l.Validate(); err != nil {
		return err
	}
	return enable(ctx, cli, l.roles())
}

// EnableBudgetd turns on access control on an etcd that budgetd alone uses
// (its embedded one, without -etcd), as user: the common name of the
// certificate budgetd's client presents, which etcd takes as its user. The
// etcd is budgetd's own store (its election and its settings), so user,
// admin and root get etcd's root role and any other certificate of the CA
// nothing.
//
// It reconciles on every start: with access control off, any client of the
// CA (budgetd itself) may turn it on; with it on, budgetd's user is root
// already and re-grants what is missing, whatever prefix budgetd now uses.
// A certificate whose name is not a user of an etcd that has access
// control on (budgetd's certificate was reissued under another name) is
// refused by etcd; the error says how to add the name.
func EnableBudgetd(ctx context.Context, cli *clientv3.Client, user string) error {
	if user == "" {
		return errors.New("etcdauth: budgetd's certificate must have a common name: etcd takes it as the user")
	}
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("etcdauth: status: %w", err)
	}
	for _, u := range []string{rootUser, mtls.IdentityAdmin, user} {
		if err := addUser(ctx, cli, u, rootRole); err != nil {
			if st.Enabled {
				return fmt.Errorf("%w (access control is on, and certificate name %q may not manage users: "+
					"add it as the admin with `etcdctl user add %s --no-password` and `etcdctl user grant-role %s root`, "+
					"or present the certificate name that turned access control on)", err, user, user, user)
			}
			return err
		}
	}
	if st.Enabled {
		return nil
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcdauth: enable: %w", err)
	}
	return nil
}

// enable makes a role levee-USER with its grants for each user of roles,
// the users admin and root with etcd's root role, and turns authentication
// on.
func enable(ctx context.Context, cli *clientv3.Client, roles map[string][]grant) error {
	for user, grants := range roles {
		role := "levee-" + user
		if _, err := cli.RoleAdd(ctx, role); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
			return fmt.Errorf("etcdauth: role %s: %w", role, err)
		}
		for _, g := range grants {
			end := ""
			if g.prefix {
				end = clientv3.GetPrefixRangeEnd(g.key)
			}
			if _, err := cli.RoleGrantPermission(ctx, role, g.key, end, g.perm); err != nil {
				return fmt.Errorf("etcdauth: role %s on %s: %w", role, g.key, err)
			}
		}
		if err := addUser(ctx, cli, user, role); err != nil {
			return err
		}
	}
	for _, user := range []string{rootUser, mtls.IdentityAdmin} {
		if err := addUser(ctx, cli, user, rootRole); err != nil {
			return err
		}
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("etcdauth: enable: %w", err)
	}
	return nil
}

// addUser adds user, who logs in by certificate only (no password), with
// role; either may exist already.
func addUser(ctx context.Context, cli *clientv3.Client, user, role string) error {
	if _, err := cli.UserAddWithOptions(ctx, user, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil &&
		!errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("etcdauth: user %s: %w", user, err)
	}
	if _, err := cli.UserGrantRole(ctx, user, role); err != nil {
		return fmt.Errorf("etcdauth: user %s role %s: %w", user, role, err)
	}
	return nil
}
