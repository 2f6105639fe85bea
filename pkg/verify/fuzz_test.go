package verify

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse checks Parse on arbitrary input: it never panics; every error is
// an ErrInvalidHash that does not echo the input; and whatever parses is within
// the limits and re-encodes to a string that parses to the same Hash (for
// bcrypt and the legacy formats, to the input itself). The seed corpus is in
// testdata/fuzz/FuzzParse, with valid and hostile examples of every format.
func FuzzParse(f *testing.F) {
	v := newVerifier(f, DefaultPolicy(), DefaultLimits())
	l := v.Limits()
	f.Fuzz(func(t *testing.T, s string) {
		h, err := v.Parse(s)
		if err != nil {
			if h != nil {
				t.Fatalf("Parse returned both %v and %v", h, err)
			}
			if !errors.Is(err, ErrInvalidHash) {
				t.Fatalf("error %v does not match ErrInvalidHash", err)
			}
			msg := err.Error()
			// "%!" is fmt's mark of a bad verb, unless the excerpt quoted it.
			if !strings.HasPrefix(msg, "parse hash: ") || strings.Contains(msg, "%!") && !strings.Contains(s, "%!") {
				t.Fatalf("badly formed error %q", msg)
			}
			if len(s) > 2*maxExcerptLen && strings.Contains(msg, s) {
				t.Fatalf("error %q contains the whole input", msg)
			}
			return
		}

		switch h.Algorithm {
		case Argon2id, Argon2i:
			p := h.Params
			if h.Version != 19 || p.Memory > l.MaxMemoryKiB || p.Iterations > l.MaxIterations || p.Parallelism > l.MaxParallelism ||
				p.Iterations < 1 || p.Parallelism < 1 || uint64(p.Memory) < 8*uint64(p.Parallelism) ||
				len(h.Salt) < l.MinSaltLen || len(h.Salt) > l.MaxSaltLen || len(h.Key) < l.MinKeyLen || len(h.Key) > l.MaxKeyLen {
				t.Fatalf("parsed hash outside the limits: %+v", h)
			}
			if h.Cost != 0 || h.bcrypt != "" {
				t.Fatalf("argon2 hash with bcrypt fields: %+v", h)
			}
			if h.KeyID != "" && !validPepperID(h.KeyID) {
				t.Fatalf("parsed keyid %q is not a key id", h.KeyID)
			}
		case Bcrypt:
			if h.Cost < 4 || h.Cost > l.MaxBcryptCost || h.Salt != nil || h.Key != nil {
				t.Fatalf("parsed bcrypt hash outside the limits: %+v", h)
			}
			if h.String() != s {
				t.Fatalf("bcrypt String() = %q, want the input %q", h.String(), s)
			}
		case PBKDF2SHA1, PBKDF2SHA256, PBKDF2SHA512, Scrypt, SHA256Crypt, SHA512Crypt:
			if err := v.checkHash(h); err != nil {
				t.Fatalf("parsed legacy hash outside the limits: %v: %+v", err, h)
			}
			if h.Params != (Params{}) || h.Cost != 0 || h.bcrypt != "" || h.Version != 0 {
				t.Fatalf("legacy hash with argon2 or bcrypt fields: %+v", h)
			}
			if h.String() != s {
				t.Fatalf("legacy String() = %q, want the input %q", h.String(), s)
			}
		default:
			t.Fatalf("parsed hash of algorithm %v", h.Algorithm)
		}
		// The memory cap is on scrypt's V array, 128·r·N; MemoryBytes adds
		// its B and XY buffers.
		slack := int64(128) * int64(h.Scrypt.R) * (int64(h.Scrypt.P) + 2)
		if h.MemoryBytes() > int64(l.MaxMemoryKiB)*1024+slack {
			t.Fatalf("MemoryBytes() = %d over the limit", h.MemoryBytes())
		}

		// The canonical form reorders the parameters only: same length,
		// and a fixed point.
		enc := h.String()
		if len(enc) != len(s) {
			t.Fatalf("String() = %q has length %d, input %q has %d", enc, len(enc), s, len(s))
		}
		again, err := v.Parse(enc)
		if err != nil {
			t.Fatalf("Parse(String()) of %q: %v", enc, err)
		}
		if diff := cmp.Diff(h, again, cmp.AllowUnexported(Hash{})); diff != "" {
			t.Fatalf("Parse(String()) differs (-first +second):\n%s", diff)
		}
		if again.String() != enc {
			t.Fatalf("String() not a fixed point: %q then %q", enc, again.String())
		}
	})
}

// TestFuzzSeedsValid keeps the seed corpus honest: seeds named valid-* must
// parse, so that the fuzzer starts from inputs that reach the whole parser.
func TestFuzzSeedsValid(t *testing.T) {
	v := newVerifier(t, DefaultPolicy(), DefaultLimits())
	paths, err := filepath.Glob("testdata/fuzz/FuzzParse/valid-*")
	if err != nil || len(paths) < 5 {
		t.Fatalf("found %d valid seeds (%v), want at least 5", len(paths), err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			header, arg, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
			quoted, ok := strings.CutPrefix(arg, "string(")
			quoted, ok2 := strings.CutSuffix(quoted, ")")
			s, err := strconv.Unquote(quoted)
			if header != "go test fuzz v1" || !ok || !ok2 || err != nil {
				t.Fatalf("malformed corpus file %s", path)
			}
			if _, err := v.Parse(s); err != nil {
				t.Errorf("Parse: %v", err)
			}
		})
	}
}
