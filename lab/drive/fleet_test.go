package drive

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSelect(t *testing.T) {
	f := &Fleet{Name: "levee"}
	for _, n := range []string{"etcd-1", "etcd-2", "etcd-3", "verifier-1", "verifier-2", "gateway-1"} {
		role := Role(n[:strings.IndexByte(n, '-')])
		f.Members = append(f.Members, &Member{Name: n, Role: role})
	}
	names := func(ms []*Member) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	for sel, want := range map[string][]string{
		"verifiers":            {"verifier-1", "verifier-2"},
		"gateways":             {"gateway-1"},
		"etcd-majority":        {"etcd-2", "etcd-3"},
		"verifier-2+gateway-1": {"verifier-2", "gateway-1"},
		"all":                  names(f.Members),
	} {
		got, err := f.Select(t.Context(), sel)
		if err != nil {
			t.Errorf("%s: %v", sel, err)
			continue
		}
		if d := cmp.Diff(want, names(got)); d != "" {
			t.Errorf("%s (-want +got):\n%s", sel, d)
		}
	}
	for _, bad := range []string{"verifier-9", "budgetds"} {
		if _, err := f.Select(t.Context(), bad); err == nil {
			t.Errorf("Select(%q) found members", bad)
		}
	}
}
