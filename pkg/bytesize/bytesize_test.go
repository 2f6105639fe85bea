package bytesize_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leveehq/levee/pkg/bytesize"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr error
		msg     string // the error names this
	}{
		{in: "512MiB", want: 512 << 20},
		{in: "512 MiB", want: 512 << 20},
		{in: "512mib", want: 512 << 20},
		{in: "512Mi", want: 512 << 20},
		{in: "512MB", want: 512e6},
		{in: "512mb", want: 512e6},
		{in: "46KiB", want: 47104},
		{in: "47104KiB", want: 47104 << 10},
		{in: "1KB", want: 1000},
		{in: "1.5GiB", want: 3 << 29},
		{in: "1GB", want: 1e9},
		{in: "2TiB", want: 2 << 40},
		{in: "100B", want: 100},
		{in: "0MiB", want: 0},
		{in: "0.5KB", want: 500},
		{in: "536870912", wantErr: bytesize.ErrAmbiguous, msg: "536870912MiB (×1024) or 536870912MB (×1000)"},
		{in: "512", wantErr: bytesize.ErrAmbiguous, msg: "no unit"},
		{in: "512M", wantErr: bytesize.ErrAmbiguous, msg: "Docker"},
		{in: "512m", wantErr: bytesize.ErrAmbiguous, msg: "512MiB"},
		{in: "4g", wantErr: bytesize.ErrAmbiguous, msg: "4GB"},
		{in: "", wantErr: bytesize.ErrInvalid},
		{in: "MiB", wantErr: bytesize.ErrInvalid},
		{in: "-5MiB", wantErr: bytesize.ErrInvalid},
		{in: "1e3MiB", wantErr: bytesize.ErrInvalid, msg: "unknown unit"},
		{in: "5 parsecs", wantErr: bytesize.ErrInvalid, msg: "unknown unit"},
		{in: "1..5MiB", wantErr: bytesize.ErrInvalid},
		{in: ".5MiB", wantErr: bytesize.ErrInvalid},
		{in: "0.1B", wantErr: bytesize.ErrInvalid, msg: "whole number"},
		{in: "9999999TiB", wantErr: bytesize.ErrInvalid, msg: "too large"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := bytesize.Parse(tt.in)
			if tt.wantErr == nil {
				if err != nil || got != tt.want {
					t.Fatalf("ParseBytes(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ParseBytes(%q) = %d, %v; want an error matching %v", tt.in, got, err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("ParseBytes(%q) error %q; want it to mention %q", tt.in, err, tt.msg)
			}
		})
	}
}

func TestSizeFlag(t *testing.T) {
	var b bytesize.Size
	if err := b.Set("256MiB"); err != nil || b != 256<<20 || b.String() != "256MiB" {
		t.Errorf("Set(256MiB): %v, %d, %q", err, b, b.String())
	}
	if err := b.Set("268435456"); !errors.Is(err, bytesize.ErrAmbiguous) {
		t.Errorf("Set of a bare number: %v, want ErrAmbiguousSize", err)
	}
}

// FormatBytes and ParseBytes agree, and ParseBytes never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"512MiB", "1.5GiB", "512", "512m", "0.1B", "9999999TiB", " 7 kb "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := bytesize.Parse(s)
		if err != nil {
			if !errors.Is(err, bytesize.ErrAmbiguous) && !errors.Is(err, bytesize.ErrInvalid) {
				t.Fatalf("ParseBytes(%q): %v matches no sentinel", s, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseBytes(%q) = %d", s, n)
		}
		back, err := bytesize.Parse(bytesize.Format(n))
		if err != nil || back != n {
			t.Fatalf("FormatBytes(%d) = %q parses to %d, %v", n, bytesize.Format(n), back, err)
		}
	})
}

func TestAutoFlag(t *testing.T) {
	for _, a := range []bytesize.Auto{0, 1, 1023, 4 << 10, 3 << 20, 5 << 30, 1<<40 + 1<<10} {
		var back bytesize.Auto = 7
		if err := back.Set(a.String()); err != nil || back != a {
			t.Errorf("Set(%q) = %d, %v; want %d", a.String(), back, err, a)
		}
	}
	for a, want := range map[bytesize.Auto]string{512: "512B", 3 << 20: "3MiB", 12571142144: "11.7GiB", 1536: "1.5KiB"} {
		if got := a.Approx(); got != want {
			t.Errorf("Auto(%d).Approx() = %q, want %q", int64(a), got, want)
		}
	}
	for _, in := range []string{"0MiB", "512", "-1MiB", ""} {
		var a bytesize.Auto
		if err := a.Set(in); err == nil {
			t.Errorf("Set(%q) accepted %d; only auto means derive, and a bare number is refused", in, a)
		}
	}
}
