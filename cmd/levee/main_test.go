package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/mtls"
	"github.com/leveehq/levee/pkg/verify"
	"github.com/leveehq/levee/pkg/wellknown"
	"github.com/leveehq/levee/pkg/wellknown/wellknowntest"
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
	endpoints := etcdtest.StartEtcd(t)
	etcd := strings.Join(endpoints, ",")
	ctx := context.Background()
	do := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"settings", "-insecure", "-etcd", etcd}, args...), &out, &errOut)
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

// levee certs writes a set every component can load (what it holds is
// pkg/mtls's TestDevelopmentSet), names the hosts it is given, and refuses to
// overwrite the set without -force.
func TestCertsCommand(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"certs", "-out", dir, "-hosts", "verifier.internal,10.0.0.7"}, &out, &errOut); err != nil {
		t.Fatalf("levee certs: %v (%s)", err, errOut.String())
	}
	if !mtls.UsableDevelopmentSet(dir, time.Now()) {
		t.Fatalf("levee certs wrote a set that does not load")
	}
	src, err := mtls.Settings{Dir: dir}.Load(mtls.IdentityVerifier, mtls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"verifier.internal", "10.0.0.7", "verifier1"} {
		if err := src.Leaf().VerifyHostname(name); err != nil {
			t.Errorf("verifier certificate: %v", err)
		}
	}
	if err := run(t.Context(), []string{"certs", "-out", dir}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "-force") {
		t.Errorf("second run without -force: %v, want a refusal naming -force", err)
	}
	if err := run(t.Context(), []string{"certs", "-out", dir, "-force"}, &out, &errOut); err != nil {
		t.Errorf("second run with -force: %v", err)
	}
	out.Reset()
	if err := run(t.Context(), []string{"certs", "-out", dir, "-reuse"}, &out, &errOut); err != nil || !strings.Contains(out.String(), "kept") {
		t.Errorf("-reuse on a usable set: %v, %q; want it kept", err, out.String())
	}
	if err := run(t.Context(), []string{"certs", "-out", dir, "-reuse", "-force"}, &out, &errOut); err == nil {
		t.Errorf("-reuse with -force: no error")
	}
}

// The flags the lab passes to levee etcd are ones it defines.
func TestEtcdDefinesWellKnownFlags(t *testing.T) {
	var usage strings.Builder
	if err := run(t.Context(), []string{"etcd", "-help"}, io.Discard, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("levee etcd -help = %v, want flag.ErrHelp", err)
	}
	wellknowntest.CheckFlags(t, usage.String(), wellknown.EtcdFlags)
}
