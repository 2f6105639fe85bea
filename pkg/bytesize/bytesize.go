// Package bytesize reads and writes sizes in bytes with explicit units, so
// that a memory setting cannot be misread by a factor of 1024 (or 1.048576):
// KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB powers of 1000, and a bare
// number or a lone K/M/G/T is refused rather than guessed.
package bytesize

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// ErrAmbiguous is matched by Parse errors for a size whose unit is
// missing or could be read two ways (512, 512M, 512m).
var ErrAmbiguous = errors.New("ambiguous size")

// ErrInvalid is matched by every other Parse error.
var ErrInvalid = errors.New("invalid size")

// units maps each accepted unit, lower-cased, to its multiplier. Kubernetes'
// Ki, Mi, Gi and Ti are binary, as their i says.
var units = map[string]int64{
	"b":   1,
	"kib": 1 << 10, "ki": 1 << 10,
	"mib": 1 << 20, "mi": 1 << 20,
	"gib": 1 << 30, "gi": 1 << 30,
	"tib": 1 << 40, "ti": 1 << 40,
	"kb": 1e3,
	"mb": 1e6,
	"gb": 1e9,
	"tb": 1e12,
}

// Parse parses a size with an explicit unit into bytes: B; KiB, MiB,
// GiB, TiB (powers of 1024, also written Ki, Mi, Gi, Ti); KB, MB, GB, TB
// (powers of 1000). Units are case-insensitive and may follow a space; the
// number is decimal digits with an optional fraction ("1.5GiB"), and the
// result must be a whole number of bytes that fits an int64.
//
// A bare number, or a single-letter unit (K, M, G, T), is refused with an
// error matching ErrAmbiguous: Docker reads 512m as MiB, Kubernetes reads
// 512M as MB, and a bare 47104 has meant bytes, KiB and MB to different
// tools. Every other error matches ErrInvalid.
func Parse(s string) (int64, error) {
	in := s
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	if num == "" || strings.Count(num, ".") > 1 || num[0] == '.' || num[len(num)-1] == '.' {
		return 0, fmt.Errorf("%w %q: want a number and a unit, like 512MiB", ErrInvalid, cut(in))
	}
	if unit == "" {
		return 0, fmt.Errorf("%w %q: no unit; write %sMiB (×1024) or %sMB (×1000): a bare number has meant bytes, KiB and MB to different tools",
			ErrAmbiguous, cut(in), num, num)
	}
	if len(unit) == 1 && strings.Contains("kmgt", unit) {
		u := strings.ToUpper(unit)
		return 0, fmt.Errorf("%w %q: %s alone is MiB-style to Docker and MB-style to Kubernetes; write %s%siB (×1024) or %s%sB (×1000)",
			ErrAmbiguous, cut(in), s[i:], num, u, num, u)
	}
	mult, ok := units[unit]
	if !ok {
		return 0, fmt.Errorf("%w %q: unknown unit %q; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB", ErrInvalid, cut(in), cut(s[i:]))
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("%w %q: bad number", ErrInvalid, cut(in))
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("%w %q: not a whole number of bytes", ErrInvalid, cut(in))
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("%w %q: too large", ErrInvalid, cut(in))
	}
	return r.Num().Int64(), nil
}

// cut bounds what an error message repeats of its input.
func cut(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// Size is a size in bytes; *Size is a flag.Value parsed with Parse, so a
// flag of this type refuses bare numbers too.
type Size int64

// Set parses s with Parse.
func (b *Size) Set(s string) error {
	n, err := Parse(s)
	if err != nil {
		return err
	}
	*b = Size(n)
	return nil
}

// String formats b exactly (see Format).
func (b *Size) String() string {
	if b == nil {
		return "0B"
	}
	return Format(int64(*b))
}

// Approx writes b for people: in the largest 1024-based unit it reaches,
// with one decimal when that is not exact ("11.7GiB").
func (b Size) Approx() string {
	for _, u := range []struct {
		name string
		size Size
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b >= u.size {
			if b%u.size == 0 {
				return strconv.FormatInt(int64(b/u.size), 10) + u.name
			}
			return strconv.FormatFloat(float64(b)/float64(u.size), 'f', 1, 64) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// Auto is a Size for a setting that is derived when not given: zero
// stands for "derive it". *Auto is a flag.Value that takes "auto" for zero
// and a positive size with a unit otherwise (an explicit zero is refused:
// only "auto" means derive).
type Auto int64

// String writes a exactly, so that it parses back to the same value; zero
// is "auto".
func (a Auto) String() string {
	if a == 0 {
		return "auto"
	}
	return Format(int64(a))
}

// Approx writes a for people ("11.7GiB").
func (a Auto) Approx() string { return Size(a).Approx() }

// Set implements flag.Value: a size with a unit, or "auto" for zero.
func (a *Auto) Set(s string) error {
	if strings.TrimSpace(s) == "auto" {
		*a = 0
		return nil
	}
	n, err := Parse(s)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("size %q: must be positive (or auto)", s)
	}
	*a = Auto(n)
	return nil
}

// Format formats n in the largest binary unit that divides it exactly
// (4GiB, 47104KiB, 1000B), so that the result parses back to n.
func Format(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}
