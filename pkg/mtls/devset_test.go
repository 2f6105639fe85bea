package mtls

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A development set loads for every identity; its server certificates name
// loopback, the compose services and the hosts given; the admin certificate
// alone grants the admin role; keys are private to their owner; a second
// write without Force is refused; and a set that expires within a day is
// not reused.
func TestDevelopmentSet(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	set := DevelopmentSet{Dir: dir, DNS: []string{"verifier.internal"}, IPs: []net.IP{net.ParseIP("10.0.0.7")}, ValidFor: 48 * time.Hour}
	if err := WriteDevelopmentSet(set, now); err != nil {
		t.Fatal(err)
	}
	for _, id := range devIdentities {
		src, err := Settings{Dir: dir}.Load(id.name, Options{})
		if err != nil {
			t.Fatalf("%s: %v", id.name, err)
		}
		leaf := src.Leaf()
		if id.server {
			for _, name := range append([]string{"localhost", "127.0.0.1", "::1", "verifier.internal", "10.0.0.7"}, id.dns...) {
				if err := leaf.VerifyHostname(name); err != nil {
					t.Errorf("%s: %v", id.name, err)
				}
			}
		} else if len(leaf.DNSNames)+len(leaf.IPAddresses) > 0 {
			t.Errorf("%s: a client-only certificate names %v %v", id.name, leaf.DNSNames, leaf.IPAddresses)
		}
		var roles []string
		for _, u := range leaf.URIs {
			roles = append(roles, u.String())
		}
		want := map[string][]string{
			IdentityBudgetd: {"urn:levee:role:budgetd"},
			IdentityGateway: {"urn:levee:role:gateway", "urn:levee:role:budget"},
			IdentityAdmin:   {"urn:levee:role:admin"},
			IdentityClient:  {"urn:levee:role:budget", "urn:levee:tenant:default", "urn:levee:priority:interactive"},
			IdentityFrontend: {"urn:levee:role:frontend", "urn:levee:role:budget", "urn:levee:tenant:frontend",
				"urn:levee:priority:critical"},
		}[id.name]
		if !slices.Equal(roles, want) {
			t.Errorf("%s: role URIs %v, want %v", id.name, roles, want)
		}
		if fi, err := os.Stat(filepath.Join(dir, id.name+".key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.key: %v; want mode 0600", id.name, err)
		}
	}
	if !UsableDevelopmentSet(dir, now) {
		t.Errorf("a fresh set valid for two days is not usable")
	}
	if UsableDevelopmentSet(dir, now.Add(36*time.Hour)) {
		t.Errorf("a set expiring within a day is usable")
	}
	if err := WriteDevelopmentSet(set, now); !errors.Is(err, ErrSetExists) {
		t.Errorf("second write without Force: %v, want ErrSetExists", err)
	}
	set.Force = true
	if err := WriteDevelopmentSet(set, now); err != nil {
		t.Errorf("second write with Force: %v", err)
	}
	os.Remove(filepath.Join(dir, IdentityGateway+".key"))
	if UsableDevelopmentSet(dir, now) {
		t.Errorf("a set missing a key is usable")
	}
}

// EnsureDevelopmentSet makes a set where there is none, keeps a usable one,
// replaces a development set near its expiry, and never replaces another
// CA's certificates.
func TestEnsureDevelopmentSet(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	set := DevelopmentSet{Dir: dir, ValidFor: 48 * time.Hour}
	if made, err := EnsureDevelopmentSet(set, now); err != nil || !made {
		t.Fatalf("empty directory: made %v, %v; want a new set", made, err)
	}
	before, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if made, err := EnsureDevelopmentSet(set, now); err != nil || made {
		t.Fatalf("usable set: made %v, %v; want it kept", made, err)
	}
	if made, err := EnsureDevelopmentSet(set, now.Add(36*time.Hour)); err != nil || !made {
		t.Fatalf("set expiring within a day: made %v, %v; want a new one", made, err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if string(after) == string(before) {
		t.Errorf("the expiring set's CA was kept")
	}

	// Someone's own PKI: a CA of another name, and only some of the files.
	own := t.TempDir()
	ca, err := NewCA("Example Corp Issuing CA", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.WriteFiles(own, IdentityGateway, Leaf{Name: "gw", Server: true, DNS: []string{"gw"}, ValidFor: time.Hour}, now); err != nil {
		t.Fatal(err)
	}
	ownCA, _ := os.ReadFile(filepath.Join(own, "ca.crt"))
	if _, err := EnsureDevelopmentSet(DevelopmentSet{Dir: own, ValidFor: time.Hour}, now); !errors.Is(err, ErrNotDevelopmentSet) {
		t.Errorf("directory of another CA: %v, want ErrNotDevelopmentSet", err)
	}
	if got, _ := os.ReadFile(filepath.Join(own, "ca.crt")); string(got) != string(ownCA) {
		t.Errorf("another CA's ca.crt was replaced")
	}
}

// Export gives a component its own identity alone: the CA, its certificate
// and its key (0600), no other file of the set.
func TestExportCopiesOneIdentityAlone(t *testing.T) {
	dir, to := t.TempDir(), t.TempDir()
	if err := WriteDevelopmentSet(DevelopmentSet{Dir: dir, ValidFor: time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := Export(dir, IdentityGateway, to); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(to)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"ca.crt", "gateway.crt", "gateway.key"}) {
		t.Errorf("exported %v, want ca.crt, gateway.crt, gateway.key", names)
	}
	if fi, err := os.Stat(filepath.Join(to, "gateway.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("gateway.key: %v, want mode 0600", err)
	}
	if _, err := (Settings{Dir: to}).Load(IdentityGateway, Options{}); err != nil {
		t.Errorf("the exported identity does not load: %v", err)
	}
	for _, bad := range []string{"missing", "../ca", ""} {
		if err := Export(dir, bad, to); err == nil {
			t.Errorf("Export of %q: no error", bad)
		}
	}
}
