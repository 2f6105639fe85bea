package lab

import (
	"testing"
	"time"

	"github.com/leveehq/levee/pkg/mtls"
)

// A -fleet target fleet presents the caller certificate named from
// -target-tls-dir (a fleet the lab did not start, such as a cluster's,
// asks for one), and plaintext without the directory; a missing
// certificate is an error that names it.
func TestTargetPresentsTheCallerIdentity(t *testing.T) {
	dir := t.TempDir()
	if err := mtls.WriteDevelopmentSet(mtls.DevelopmentSet{Dir: dir, ValidFor: time.Hour}, time.Now()); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Source, cfg.Target = Target, "127.0.0.1:1"
	f, err := startFleet(t.Context(), cfg, "target")
	if err != nil || f.Caller != nil {
		t.Fatalf("without a TLS dir: caller %v, err %v; want plaintext", f.Caller, err)
	}
	cfg.TargetTLSDir = dir
	if f, err = startFleet(t.Context(), cfg, "target"); err != nil || f.Caller == nil {
		t.Fatalf("with a TLS dir: caller %v, err %v; want the front end's certificate", f.Caller, err)
	}
	cfg.TargetIdentity = "nobody"
	if _, err := startFleet(t.Context(), cfg, "target"); err == nil {
		t.Error("an identity with no certificate in the dir was accepted")
	}
}
