package budgetd

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/leveehq/levee/internal/embeddedetcd"
	"github.com/leveehq/levee/pkg/ledger"
)

func TestSettingsTable(t *testing.T) {
	tab := newSettingsTable("/p/config/", ledger.DefaultSettings())
	good := ledger.Settings{Ratio: 0.5, Burst: 10, MinPerSecond: 0}
	if err, _ := tab.put("verify", []byte(`{"ratio":0.5,"burst":10,"min_per_second":0}`), 2); err != nil {
		t.Fatal(err)
	}
	if got := tab.forKey("verify"); got != good {
		t.Errorf("verify: %v, want %v", got, good)
	}
	if got := tab.forKey("other"); got != ledger.DefaultSettings() {
		t.Errorf("other: %v, want the built-in default", got)
	}

	err, news := tab.put("verify", []byte(`{"ratio":-1,"burst":10,"min_per_second":0}`), 3)
	if err == nil || !news {
		t.Fatalf("bad value: %v, news %v", err, news)
	}
	if _, news := tab.put("verify", []byte(`{"ratio":-1,"burst":10,"min_per_second":0}`), 3); news {
		t.Errorf("the same rejected revision read again counts as news")
	}
	if got := tab.forKey("verify"); got != good {
		t.Errorf("after a bad value: %v, want the last good %v", got, good)
	}
	want := []string{"/p/config/verify: ratio must be in [0, 10], got -1; keeping the last good settings (ratio 0.5, burst 10, min_per_second 0)"}
	if diff := cmp.Diff(want, tab.errors()); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}

	if err, _ := tab.put(DefaultConfigKey, []byte(`{"ratio":0.3,"burst":5,"min_per_second":2}`), 4); err != nil {
		t.Fatal(err)
	}
	if got := tab.forKey("other"); got.Ratio != 0.3 {
		t.Errorf("other after _default: %v", got)
	}
	tab.del("verify")
	if got := tab.forKey("verify"); got.Ratio != 0.3 || len(tab.errors()) != 0 {
		t.Errorf("after delete: %v, errors %v; want the etcd default and no errors", got, tab.errors())
	}
	if err, _ := tab.put("no spaces", []byte(`{"ratio":0.3,"burst":5,"min_per_second":2}`), 5); err == nil || !strings.Contains(err.Error(), "not a budget key") {
		t.Errorf("bad name: %v", err)
	}
	if tab.configured("no spaces") {
		t.Errorf("a bad name was configured")
	}
	tab.del(DefaultConfigKey)
	if got := tab.forKey("other"); got != ledger.DefaultSettings() {
		t.Errorf("after deleting _default: %v, want the built-in default", got)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	c := DefaultConfig()
	c.Prefix = "/no/slash"
	c.RefreshInterval = 3 * DefaultConfig().LeaseValidity
	c.ElectionTTL = 1
	c.MaxKeys = 0
	c.Defaults.Ratio = -1
	c.EmbeddedEtcd.ClientURL = "https://127.0.0.1:2379"
	c.AdvertiseAddr = "nohost"
	err := c.Validate()
	for _, field := range []string{"Prefix", "LeaseValidity", "ElectionTTL", "MaxKeys", "Defaults: ratio", "EmbeddedEtcd: ClientURL", "AdvertiseAddr"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate() = %v; want it to name %s", err, field)
		}
	}
	c = DefaultConfig()
	c.EtcdEndpoints = []string{"http://etcd:2379"}
	c.EmbeddedEtcd = embeddedetcd.Config{} // unused with endpoints
	if err := c.Validate(); err != nil {
		t.Errorf("external etcd: %v", err)
	}
}
