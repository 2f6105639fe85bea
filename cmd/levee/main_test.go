package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/leveehq/levee/pkg/budgetd/budgetdtest"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/verify"
)

// The grpcurl line `levee local` prints must verify: the example hash is
// the example password under the default policy.
func TestExampleHashVerifies(t *testing.T) {
	v, err := verify.New(verify.DefaultPolicy(), verify.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	h, err := v.Parse(exampleHash)
	if err != nil {
		t.Fatal(err)
	}
	match, rehash, err := v.Verify(h, []byte("correct horse battery staple"))
	if err != nil || !match || rehash {
		t.Errorf("example hash: match %v, needs_rehash %v, err %v; want a match under the policy", match, rehash, err)
	}
	if examplePasswordB64 != "Y29ycmVjdCBob3JzZSBiYXR0ZXJ5IHN0YXBsZQ==" {
		t.Errorf("examplePasswordB64 changed without the hash")
	}
}

func TestSettingsCommand(t *testing.T) {
	endpoints := budgetdtest.StartEtcd(t)
	etcd := strings.Join(endpoints, ",")
	ctx := context.Background()
	do := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"settings", "-etcd", etcd}, args...), &out, &errOut)
		return out.String() + errOut.String(), err
	}
	steps := []struct {
		args    []string
		want    string
		wantErr bool
	}{
		{[]string{"get"}, "none set", false},
		{[]string{"set", "clamp=40"}, `{"clamp":40}`, false},
		{[]string{"set", "autopilot=false", "client_timeout=3s"}, `{"clamp":40,"autopilot":false,"client_timeout":"3s"}`, false},
		{[]string{"set", "clamp=-1"}, "clamp must be in", true},
		{[]string{"set", "typo=1"}, "unknown field", true},
		{[]string{"get"}, `{"clamp":40,"autopilot":false,"client_timeout":"3s"}`, false},
		{[]string{"delete"}, "deleted", false},
		{[]string{"get"}, "none set", false},
		{[]string{"frob"}, "unknown settings verb", true},
	}
	for _, st := range steps {
		out, err := do(st.args...)
		if (err != nil) != st.wantErr {
			t.Fatalf("levee settings %q: err %v, want error %v (output %q)", st.args, err, st.wantErr, out)
		}
		text := out
		if err != nil {
			text += err.Error()
		}
		if !strings.Contains(text, st.want) {
			t.Fatalf("levee settings %q: %q, want it to contain %q", st.args, text, st.want)
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"frob"}, &out, &errOut); err == nil || !strings.Contains(errOut.String(), "usage") {
		t.Errorf("levee frob: %v, stderr %q", err, errOut.String())
	}
}

// levee certs writes a set every component can load, whose server
// certificates name the compose services and loopback and whose admin
// certificate alone grants the admin role; it refuses to overwrite the set
// without -force.
func TestCertsCommand(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"certs", "-out", dir, "-hosts", "verifier.internal,10.0.0.7"}, &out, &errOut); err != nil {
		t.Fatalf("levee certs: %v (%s)", err, errOut.String())
	}
	for _, id := range devIdentities {
		src, err := mtls.Load(mtls.Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, id.name+".crt"),
			Key: filepath.Join(dir, id.name+".key")}, mtls.Options{})
		if err != nil {
			t.Fatalf("%s: %v", id.name, err)
		}
		leaf := src.Leaf()
		if id.server {
			for _, name := range append([]string{"localhost", "127.0.0.1", "verifier.internal", "10.0.0.7"}, id.dns...) {
				if err := leaf.VerifyHostname(name); err != nil {
					t.Errorf("%s: %v", id.name, err)
				}
			}
		}
		var roles []string
		for _, u := range leaf.URIs {
			roles = append(roles, u.String())
		}
		want := []string(nil)
		if id.name == "admin" {
			want = []string{"urn:levee:role:admin"}
		}
		if !slices.Equal(roles, want) {
			t.Errorf("%s: role URIs %v, want %v", id.name, roles, want)
		}
		if fi, err := os.Stat(filepath.Join(dir, id.name+".key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.key: mode %v, %v; want 0600", id.name, fi.Mode().Perm(), err)
		}
	}
	if err := run(t.Context(), []string{"certs", "-out", dir}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "-force") {
		t.Errorf("second run without -force: %v, want a refusal naming -force", err)
	}
	if err := run(t.Context(), []string{"certs", "-out", dir, "-force"}, &out, &errOut); err != nil {
		t.Errorf("second run with -force: %v", err)
	}
}
