package mtls

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Identity names of a development set, one per kind of component, and the
// file names (NAME.crt, NAME.key) Settings.Dir resolves them to.
const (
	IdentityEtcd     = "etcd"
	IdentityBudgetd  = "budgetd"
	IdentityVerifier = "verifier"
	IdentityGateway  = "gateway"
	// IdentityAdmin is the operator's: the admin role (settings writes, the
	// capacity knob), and the identity of the command-line tools.
	IdentityAdmin = "admin"
	// IdentityClient is a caller of the gateway: tenant "default", at
	// most interactive priority, and a budget client of its own retries.
	IdentityClient = "client"
	// IdentityFrontend is a front end that serves many applications (an
	// identity provider's): it names each call's tenant and may ask for
	// any priority. The lab drives the fleet with it.
	IdentityFrontend = "frontend"
)

// DefaultTenant is the tenant of the development set's client identity.
const DefaultTenant = "default"

// devIdentity is one certificate of a development set.
type devIdentity struct {
	name string
	// dns are the names its servers answer to (the compose services).
	dns              []string
	server, client   bool
	roles            []string
	tenant, priority string
}

// devIdentities: one per kind of component, naming every replica of the
// compose fleet, and two for people and programs that call the fleet.
var devIdentities = []devIdentity{
	{name: IdentityEtcd, dns: []string{"etcd1", "etcd2", "etcd3"}, server: true, client: true},
	{name: IdentityBudgetd, dns: []string{"budgetd1", "budgetd2"}, server: true, client: true, roles: []string{RoleBudgetd}},
	{name: IdentityVerifier, dns: []string{"verifier1", "verifier2", "verifier3"}, server: true, client: true},
	{name: IdentityGateway, dns: []string{"gateway"}, server: true, client: true, roles: []string{RoleGateway, RoleBudget}},
	{name: IdentityAdmin, client: true, roles: []string{RoleAdmin}},
	{name: IdentityClient, client: true, roles: []string{RoleBudget}, tenant: DefaultTenant, priority: "interactive"},
	{name: IdentityFrontend, client: true, roles: []string{RoleFrontend, RoleBudget}, tenant: IdentityFrontend, priority: "critical"},
}

// DevelopmentNames are the identities WriteDevelopmentSet writes, in order.
func DevelopmentNames() []string {
	var n []string
	for _, id := range devIdentities {
		n = append(n, id.name)
	}
	return n
}

// DevelopmentSet describes a development set of certificates.
type DevelopmentSet struct {
	// Dir receives ca.crt and NAME.crt, NAME.key for each identity.
	Dir string
	// DNS and IPs are named by every server certificate, besides
	// localhost, 127.0.0.1, ::1 and the compose services.
	DNS []string
	IPs []net.IP
	// ValidFor is how long the CA and the certificates are valid.
	ValidFor time.Duration
	// Force replaces a set already in Dir; without it WriteDevelopmentSet
	// refuses to touch one.
	Force bool
	// Callers are more callers of the gateway, one certificate each
	// (CallerName: tenant-NAME.crt, .key), beside the set's own.
	Callers []Caller
}

// Caller is a caller of the gateway a development set issues a
// certificate to: a tenant, the highest priority it may ask for (a
// callmeta wire name; empty: the gateway's default, interactive), and the
// budget role, so that its client library can lease retry tokens.
type Caller struct {
	Tenant, Priority string
}

// CallerName is the identity name (file name) of caller c's certificate.
func (c Caller) CallerName() string { return "tenant-" + c.Tenant }

// ErrSetExists is WriteDevelopmentSet's error when Dir holds a set and Force
// is not given.
var ErrSetExists = errors.New("a certificate set is there already")

// WriteDevelopmentSet makes a new CA and issues every identity of the set
// from it into d.Dir (CA.WriteSet). The CA's key is not kept: reissuing
// means a new set.
func WriteDevelopmentSet(d DevelopmentSet, now time.Time) error {
	if d.ValidFor <= 0 {
		return errors.New("mtls: a development set needs a positive validity")
	}
	ca, err := NewCA(devCAName, d.ValidFor, now)
	if err != nil {
		return err
	}
	return ca.WriteSet(d, now)
}

// WriteSet issues every identity of a development set from ca into d.Dir,
// with ca.crt beside them. Issued again into the same directory (Force), it
// rotates every certificate under the same CA: what a component reloads
// without a restart.
func (ca *CA) WriteSet(d DevelopmentSet, now time.Time) error {
	if d.ValidFor <= 0 {
		return errors.New("mtls: a development set needs a positive validity")
	}
	if err := os.MkdirAll(d.Dir, 0o755); err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	if !d.Force {
		for _, n := range append(DevelopmentNames(), "ca") {
			if _, err := os.Stat(filepath.Join(d.Dir, n+".crt")); err == nil {
				return fmt.Errorf("mtls: %s holds %s.crt: %w", d.Dir, n, ErrSetExists)
			}
		}
	}
	ids := slices.Clone(devIdentities)
	for _, c := range d.Callers {
		ids = append(ids, devIdentity{name: c.CallerName(), client: true, roles: []string{RoleBudget}, tenant: c.Tenant, priority: c.Priority})
	}
	for _, id := range ids {
		leaf := Leaf{Name: id.name, Server: id.server, Client: id.client, Roles: id.roles,
			Tenant: id.tenant, Priority: id.priority, ValidFor: d.ValidFor}
		if id.server {
			leaf.DNS = slices.Concat([]string{"localhost"}, id.dns, d.DNS)
			leaf.IPs = slices.Concat([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, d.IPs)
		}
		if _, err := ca.WriteFiles(d.Dir, id.name, leaf, now); err != nil {
			return err
		}
	}
	return nil
}

// devCAName is the common name of every development CA: what marks a set
// as one EnsureDevelopmentSet may replace.
const devCAName = "Levee development CA"

// ErrNotDevelopmentSet is EnsureDevelopmentSet's error for a directory whose
// ca.crt is another CA's: certificates someone issued are never replaced
// automatically.
var ErrNotDevelopmentSet = errors.New("holds certificates of another CA; not replacing them")

// EnsureDevelopmentSet keeps a usable development set in d.Dir
// (UsableDevelopmentSet), or makes a new one (d.Force is implied) when the
// directory holds none, or a development set that no longer loads or
// expires within a day. A ca.crt of any other CA is refused with
// ErrNotDevelopmentSet. It reports whether it made a set. (A kept set keeps
// the names it was made with, whatever d.DNS and d.IPs ask.)
func EnsureDevelopmentSet(d DevelopmentSet, now time.Time) (made bool, err error) {
	if UsableDevelopmentSet(d.Dir, now) {
		return false, nil
	}
	if pemData, err := os.ReadFile(filepath.Join(d.Dir, "ca.crt")); err == nil {
		block, _ := pem.Decode(pemData)
		if block == nil {
			return false, fmt.Errorf("mtls: %s: ca.crt %w", d.Dir, ErrNotDevelopmentSet)
		}
		ca, err := x509.ParseCertificate(block.Bytes)
		if err != nil || ca.Subject.CommonName != devCAName {
			return false, fmt.Errorf("mtls: %s %w", d.Dir, ErrNotDevelopmentSet)
		}
	}
	d.Force = true
	return true, WriteDevelopmentSet(d, now)
}

// UsableDevelopmentSet reports whether dir holds a whole set that loads and
// stays valid for at least another day (what `levee local` reuses rather
// than making a new CA each start).
func UsableDevelopmentSet(dir string, now time.Time) bool {
	s := Settings{Dir: dir}
	for _, n := range DevelopmentNames() {
		src, err := s.Load(n, Options{})
		if err != nil || src.Leaf().NotAfter.Before(now.Add(24*time.Hour)) {
			return false
		}
	}
	return true
}

// Export copies one identity of the set in dir (ca.crt, name.crt, name.key)
// into to, and nothing else, so that a component can be given its own key
// alone (the compose fleet mounts one such directory per component). Each
// file is written to a temporary name and renamed, with the set's modes
// (the key 0600), and is replaced when it differs: a component reloads it
// without a restart. An identity the set does not hold is an error.
func Export(dir, name, to string) error {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return fmt.Errorf("mtls: export: %q is not an identity name", name)
	}
	for _, f := range []struct {
		file string
		mode os.FileMode
	}{{"ca.crt", 0o644}, {name + ".crt", 0o644}, {name + ".key", 0o600}} {
		data, err := os.ReadFile(filepath.Join(dir, f.file))
		if err != nil {
			return fmt.Errorf("mtls: export %s: %w", name, err)
		}
		if old, err := os.ReadFile(filepath.Join(to, f.file)); err == nil && bytes.Equal(old, data) {
			continue
		}
		if err := writeAtomic(filepath.Join(to, f.file), data, f.mode); err != nil {
			return fmt.Errorf("mtls: export %s: %w", name, err)
		}
	}
	return nil
}
