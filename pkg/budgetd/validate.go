package budgetd

import (
	"errors"
	"fmt"
	"strconv"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
)

// Limits on what a client may send.
const (
	// MaxNameLen bounds a budget key and a client ID, in bytes.
	MaxNameLen = 128
	// MaxReports bounds the reports of one LeaseRequest.
	MaxReports = 64
	// maxCount bounds the first attempts or retries of one report: far
	// beyond any real interval's traffic, and small enough that the
	// accounting's float arithmetic stays exact.
	maxCount = 1 << 40
)

// ErrInvalidName is wrapped by every rejection of a key or client ID.
var ErrInvalidName = errors.New("must be 1 to 128 bytes of [A-Za-z0-9._:/-]")

// ValidateName checks a budget key or client ID.
func ValidateName(s string) error {
	if len(s) == 0 || len(s) > MaxNameLen {
		return fmt.Errorf("%w, got %d bytes", ErrInvalidName, len(s))
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return fmt.Errorf("%w, got %s at byte %d", ErrInvalidName, strconv.QuoteRune(rune(s[i])), i)
		}
	}
	return nil
}

func nameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '.', '_', ':', '/', '-':
		return true
	}
	return false
}

// validateLease checks a LeaseRequest; the error names the offending field.
// It formats nothing from the request beyond a byte and an index, so a
// hostile request costs no more to reject than to read.
func validateLease(req *budgetv1.LeaseRequest) error {
	if err := ValidateName(req.GetClientId()); err != nil {
		return fmt.Errorf("client_id: %w", err)
	}
	reports := req.GetReports()
	if len(reports) > MaxReports {
		return fmt.Errorf("reports: at most %d per request, got %d", MaxReports, len(reports))
	}
	for i, r := range reports {
		if err := ValidateName(r.GetKey()); err != nil {
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
