package ledger

import (
	"errors"
	"fmt"
)

// MaxNameLen bounds a budget key and a client ID, in bytes.
const MaxNameLen = 128

// ErrInvalidName is wrapped by every rejection of a budget key or client ID.
var ErrInvalidName = errors.New("must be 1 to 128 bytes of [A-Za-z0-9._:/-]")

// ValidateName checks a budget key or a client ID: 1 to MaxNameLen bytes,
// each one a NameByte. Both sides of levee.budget.v1 check names with it:
// the budget client before it sends one, budgetd when a lease, a status
// query or an etcd key names one. The error wraps ErrInvalidName and says
// which byte, by value and offset, or how many bytes.
func ValidateName(s string) error {
	if len(s) == 0 || len(s) > MaxNameLen {
		return fmt.Errorf("%w, got %d bytes", ErrInvalidName, len(s))
	}
	for i := 0; i < len(s); i++ {
		if !NameByte(s[i]) {
			return fmt.Errorf("%w, got byte 0x%02x at offset %d", ErrInvalidName, s[i], i)
		}
	}
	return nil
}

// NameByte reports whether c may appear in a name: [A-Za-z0-9._:/-].
func NameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == ':' || c == '/' || c == '-'
}
