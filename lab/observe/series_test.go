package observe

import (
	"encoding/csv"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLatencyQuantile(t *testing.T) {
	s := NewSeries(time.Now(), 2)
	for range 99 {
		s.Second(0).Latency[LatBucket(10*time.Millisecond)].Add(1)
	}
	s.Second(1).Latency[LatBucket(time.Second)].Add(1)
	if got := s.LatencyQuantile(0, 2, 0.5); got < 10*time.Millisecond || got > 10900*time.Microsecond {
		t.Errorf("p50 = %v, want the bucket holding 10ms (≤ 9 %% above it)", got)
	}
	if got := s.LatencyQuantile(0, 2, 0.995); got < time.Second || got > 1090*time.Millisecond {
		t.Errorf("p99.5 = %v, want the bucket holding 1s", got)
	}
	if got := s.LatencyQuantile(0, 1, 0.99); got > 10900*time.Microsecond {
		t.Errorf("p99 of second 0 alone = %v, want ≤ 10.9ms", got)
	}
}

// Each tenant's seconds are its own, in its own CSV columns; a call of no
// tenant (-1) or outside the series is not recorded for any.
func TestTenantColumns(t *testing.T) {
	start := time.Now()
	s := NewSeries(start, 2)
	s.SetTenants([]string{"a", "b"})
	s.AddTenant(start, 0, func(x *TenantSecond) { x.Offered.Add(3); x.ArrivedEnded.Add(3); x.ArrivedOK.Add(2) })
	s.AddTenant(start.Add(time.Second), 1, func(x *TenantSecond) { x.Codes[CodeResourceExhausted].Add(5) })
	s.AddTenant(start, -1, func(x *TenantSecond) { t.Error("recorded for no tenant") })
	s.AddTenant(start.Add(5*time.Second), 0, func(x *TenantSecond) { t.Error("recorded outside the series") })
	var b strings.Builder
	if err := s.WriteCSV(&b); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(b.String())).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := func(name string) int {
		i := slices.Index(rows[0], name)
		if i < 0 {
			t.Fatalf("no column %s in %v", name, rows[0])
		}
		return i
	}
	for _, c := range []struct {
		row  int
		name string
		want string
	}{
		{1, "tenant_a_offered", "3"}, {1, "tenant_a_arrival_success_ratio", "0.6667"}, {1, "tenant_b_offered", "0"},
		{2, "tenant_b_attempts_resource_exhausted", "5"}, {2, "tenant_a_attempts_resource_exhausted", "0"},
	} {
		if got := rows[c.row][col(c.name)]; got != c.want {
			t.Errorf("second %d, %s = %q, want %q", c.row-1, c.name, got, c.want)
		}
	}
}
