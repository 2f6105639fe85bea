package observe

import (
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// TenantSecond holds what one tenant's clients saw in one second.
type TenantSecond struct {
	Offered      atomic.Int64 // logical requests that arrived in this second
	Goodput      atomic.Int64 // logical requests that ended in success in this second
	Failed       atomic.Int64 // logical requests that ended without success in this second
	ArrivedOK    atomic.Int64 // of the logical requests that arrived in this second: how many succeeded
	ArrivedEnded atomic.Int64 // ... and how many have ended
	Attempts     atomic.Int64 // attempts sent in this second
	Codes        [NCodes]atomic.Int64
}

// SetTenants makes the series record each of names on its own as well
// (AddTenant), in this order; call it before recording.
func (s *Series) SetTenants(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tenants = append([]string(nil), names...)
	s.ten = make([][]TenantSecond, len(s.secs))
	for i := range s.ten {
		s.ten[i] = make([]TenantSecond, len(names))
	}
}

// Tenants are the tenants the series records, in order.
func (s *Series) Tenants() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tenants...)
}

// AddTenant calls f with tenant i's record of the second holding t; outside
// the series, or for a tenant it does not record, it does nothing.
func (s *Series) AddTenant(t time.Time, i int, f func(*TenantSecond)) {
	sec := int(t.Sub(s.start) / time.Second)
	if sec < 0 || sec >= len(s.ten) || i < 0 || i >= len(s.ten[sec]) {
		return
	}
	f(&s.ten[sec][i])
}

// Tenant returns tenant i's record of second sec; nil when there is none.
func (s *Series) Tenant(sec, i int) *TenantSecond {
	if sec < 0 || sec >= len(s.ten) || i < 0 || i >= len(s.ten[sec]) {
		return nil
	}
	return &s.ten[sec][i]
}

// TenantCol returns f of tenant i's record in each second (zeros when the
// series does not record it).
func (s *Series) TenantCol(i int, f func(*TenantSecond) float64) []float64 {
	out := make([]float64, len(s.secs))
	for sec := range out {
		if x := s.Tenant(sec, i); x != nil {
			out[sec] = f(x)
		}
	}
	return out
}

// tenantHead and tenantRow are the tenants' CSV columns:
// tenant_<name>_offered, _served (goodput), _failed,
// _arrival_success_ratio, _attempts and _attempts_<code>.
func (s *Series) tenantHead() []string {
	var head []string
	for _, name := range s.tenants {
		p := "tenant_" + name + "_"
		head = append(head, p+"offered", p+"served", p+"failed", p+"arrival_success_ratio", p+"attempts")
		for _, c := range CodeNames {
			head = append(head, p+"attempts_"+c)
		}
	}
	return head
}

func (s *Series) tenantRow(sec int) []string {
	var row []string
	for i := range s.tenants {
		x := &s.ten[sec][i]
		ratio := ""
		if n := x.ArrivedEnded.Load(); n > 0 {
			ratio = strconv.FormatFloat(math.Round(float64(x.ArrivedOK.Load())/float64(n)*1e4)/1e4, 'f', -1, 64)
		}
		row = append(row, itoa(x.Offered.Load()), itoa(x.Goodput.Load()), itoa(x.Failed.Load()), ratio, itoa(x.Attempts.Load()))
		for c := range x.Codes {
			row = append(row, itoa(x.Codes[c].Load()))
		}
	}
	return row
}
