package ledger

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wantErr string // "" means valid
	}{
		{"verify", ""},
		{"verify/tenant-a", ""},
		{"gateway-7f3c/4121/0a1b2c3d", ""},
		{"a.b_c:d", ""},
		{"A", ""},                      // one byte, upper case
		{"./:-_", ""},                  // punctuation only
		{strings.Repeat("x", 128), ""}, // the longest
		{"", "got 0 bytes"},
		{strings.Repeat("x", 129), "got 129 bytes"},
		{" ", "got byte 0x20 at offset 0"},
		{"a b", "got byte 0x20 at offset 1"},
		{"a*", "got byte 0x2a at offset 1"},
		{"a\x00", "got byte 0x00 at offset 1"},
		{"tenant\n", "got byte 0x0a at offset 6"},
		{"é", "got byte 0xc3 at offset 0"}, // UTF-8 is bytes, not letters
		{"a\\b", "got byte 0x5c at offset 1"},
		{"key=1", "got byte 0x3d at offset 3"},
	} {
		err := ValidateName(tc.name)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("ValidateName(%q) = %v, want nil", tc.name, err)
		case tc.wantErr != "" && (!errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName with %q", tc.name, err, tc.wantErr)
		}
	}
}

// FuzzValidateName: ValidateName accepts exactly the strings the protocol's
// regular expression describes.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"verify", "verify/tenant-a", "", " ", "a\x00", "é", strings.Repeat("x", 128), strings.Repeat("x", 129)} {
		f.Add(s)
	}
	grammar := regexp.MustCompile(`^[A-Za-z0-9._:/-]{1,128}$`)
	f.Fuzz(func(t *testing.T, s string) {
		err := ValidateName(s)
		if want := grammar.MatchString(s); (err == nil) != want {
			t.Fatalf("ValidateName(%q) = %v, the grammar says valid=%v", s, err, want)
		}
	})
}
