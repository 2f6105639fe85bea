package budgetd

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
	"github.com/leveehq/levee/pkg/ledger"
)

// Limits on what a client may send; names are ledger.ValidateName's.
const (
	// MaxReports bounds the reports of one LeaseRequest.
	MaxReports = 64
	// maxCount bounds the first attempts or retries of one report: far
	// beyond any real interval's traffic, and small enough that the
	// accounting's float arithmetic stays exact.
	maxCount = 1 << 40
)

// validateLease checks a LeaseRequest; the error names the offending field.
// It formats nothing from the request beyond a byte and an index, so a
// hostile request costs no more to reject than to read.
func validateLease(req *budgetv1.LeaseRequest) error {
	if err := ledger.ValidateName(req.GetClientId()); err != nil {
		return fmt.Errorf("client_id: %w", err)
	}
	reports := req.GetReports()
	if len(reports) > MaxReports {
		return fmt.Errorf("reports: at most %d per request, got %d", MaxReports, len(reports))
	}
	for i, r := range reports {
		if err := ledger.ValidateName(r.GetKey()); err != nil {
			return fmt.Errorf("reports[%d].key: %w", i, err)
		}
		for j := range i {
			if reports[j].GetKey() == r.GetKey() {
				return fmt.Errorf("reports[%d].key: duplicates reports[%d].key", i, j)
			}
		}
		if r.GetFirstAttempts() > maxCount {
			return fmt.Errorf("reports[%d].first_attempts: at most %d per report, got %d", i, uint64(maxCount), r.GetFirstAttempts())
		}
		if r.GetRetries() > maxCount {
			return fmt.Errorf("reports[%d].retries: at most %d per report, got %d", i, uint64(maxCount), r.GetRetries())
		}
		if r.GetFallbackFirstAttempts() > r.GetFirstAttempts() {
			return fmt.Errorf("reports[%d].fallback_first_attempts: at most first_attempts (%d), got %d", i, r.GetFirstAttempts(), r.GetFallbackFirstAttempts())
		}
		if sp := r.GetSpan(); sp != nil {
			if err := sp.CheckValid(); err != nil {
				return fmt.Errorf("reports[%d].span: %w", i, err)
			}
			if sp.AsDuration() < 0 {
				return fmt.Errorf("reports[%d].span: must not be negative, got %v", i, sp.AsDuration())
			}
		}
	}
	return nil
}

// bindClientID is the name budgetd accounts a lease under: the client's
// certificate name, a colon, and the client_id it sent ("gateway:host/pid/x"),
// so that a client can report and hold tokens only under its own name. A
// certificate name that is not a valid client name, or a bound name too
// long to be one, is refused with PERMISSION_DENIED or INVALID_ARGUMENT.
func bindClientID(certName, clientID string) (string, error) {
	if certName == "" || strings.Contains(certName, ":") || ledger.ValidateName(certName) != nil {
		return "", status.Error(codes.PermissionDenied,
			"Lease needs a client certificate whose common name is 1..128 bytes of [A-Za-z0-9._/-]: budgetd accounts the lease under it")
	}
	id := certName + ":" + clientID
	if err := ledger.ValidateName(id); err != nil {
		return "", status.Errorf(codes.InvalidArgument, "client_id: bound to the certificate's name it is too long (%v); send a shorter one", err)
	}
	return id, nil
}

// plausible reports a report that claims more first attempts plus retries
// than maxRate a second over its span (at least a second): a report no real
// client could make.
func plausible(req *budgetv1.LeaseRequest, maxRate float64) error {
	for i, r := range req.GetReports() {
		span := time.Second
		if sp := r.GetSpan(); sp != nil {
			span = max(span, sp.AsDuration())
		}
		if n := float64(r.GetFirstAttempts()) + float64(r.GetRetries()); n > maxRate*span.Seconds() {
			return fmt.Errorf("reports[%d]: %.0f first attempts and retries over %v is more than %.0f a second, which no client sends; refused",
				i, n, span, maxRate)
		}
	}
	return nil
}

// TenantScope is the prefix of the budget keys of tenant's clients: a
// client whose certificate names a tenant leases key K as TenantScope + K,
// so that two tenants' keys of one name are two budgets, and no tenant's
// client can spend or fill another's.
func TenantScope(tenant string) string { return "tenant/" + tenant + "/" }

// scopeKeys moves every key of req into scope.
func scopeKeys(req *budgetv1.LeaseRequest, scope string) error {
	for i, r := range req.GetReports() {
		key := scope + r.GetKey()
		if err := ledger.ValidateName(key); err != nil {
			return status.Errorf(codes.InvalidArgument,
				"reports[%d]: key %q: in this certificate's tenant's key space (%s) it is too long (%v); send a shorter one",
				i, r.GetKey(), scope, err)
		}
		r.Key = key
	}
	return nil
}

// unscopeKeys gives resp's keys back their names as the client sent them.
func unscopeKeys(resp *budgetv1.LeaseResponse, scope string) {
	for _, l := range resp.GetLeases() {
		l.Key = strings.TrimPrefix(l.GetKey(), scope)
	}
}
