package verify

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const stdAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

// phpBcrypt is the $2y$ example from PHP's password_verify documentation; its
// password is "rasmuslerdorf".
const phpBcrypt = "$2y$10$.vGA1O9wmRjrwAVXD98HNOgsNpDczlqm3Jq7KnEd1rVAGv3Fykk1a"

// setLowBit sets the lowest bit of the last character of a base64 string,
// which is a padding bit when the length is not a multiple of 4.
func setLowBit(s string) string {
	i := strings.IndexByte(stdAlphabet, s[len(s)-1])
	return s[:len(s)-1] + string(stdAlphabet[i|1])
}

func TestParseRoundTrip(t *testing.T) {
	v := testVerifier(t)
	for _, s := range []string{
		argon2Hash("argon2id", "m=65536,t=3,p=4", enc(16), enc(32)),
		argon2Hash("argon2i", "m=8,t=1,p=1", enc(8), enc(16)),
		argon2Hash("argon2id", "m=262144,t=8,p=16", enc(64), enc(128)),
		argon2Hash("argon2id", "m=4096,t=3,p=1", enc(17), enc(33)),                                // 4k+3 characters
		argon2Hash("argon2id", "m=4096,t=3,p=1", enc(18), enc(30)),                                // multiple of 4
		"$argon2id$v=19$m=64,t=2,p=2$c29tZXNhbHQxMjM$POUhTHepRqkdbu6jemkHGiG/1TdPfRLeyYL2J4gj9A4", // reference CLI
		phpBcrypt,
		"$2a$10$.vGA1O9wmRjrwAVXD98HNOgsNpDczlqm3Jq7KnEd1rVAGv3Fykk1a",
		"$2b$04$.vGA1O9wmRjrwAVXD98HNOgsNpDczlqm3Jq7KnEd1rVAGv3Fykk1a",
	} {
		t.Run(s[:12], func(t *testing.T) {
			h, err := v.Parse(s)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := h.String(); got != s {
				t.Errorf("String() = %q, want %q", got, s)
			}
		})
	}
}

func TestParseAnyParameterOrder(t *testing.T) {
	v := testVerifier(t)
	salt, key := enc(16), enc(32)
	want := argon2Hash("argon2id", "m=65536,t=3,p=4", salt, key)
	for _, params := range []string{"m=65536,t=3,p=4", "m=65536,p=4,t=3", "t=3,m=65536,p=4", "t=3,p=4,m=65536", "p=4,m=65536,t=3", "p=4,t=3,m=65536"} {
		t.Run(params, func(t *testing.T) {
			h, err := v.Parse(argon2Hash("argon2id", params, salt, key))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := h.String(); got != want {
				t.Errorf("String() = %q, want canonical %q", got, want)
			}
		})
	}
}

func TestParseFields(t *testing.T) {
	v := testVerifier(t)
	tests := []struct {
		in   string
		want *Hash
	}{
		{
			in: "$argon2i$v=19$m=96,p=3,t=4$YWJjZGVmZ2g$bWFnaWMgdGFnIG9mIHNpeHRlZW4",
			want: &Hash{
				Algorithm: Argon2i, Version: 19,
				Params: Params{Memory: 96, Iterations: 4, Parallelism: 3},
				Salt:   []byte("abcdefgh"), Key: []byte("magic tag of sixteen"),
			},
		},
		{
			in:   phpBcrypt,
			want: &Hash{Algorithm: Bcrypt, Cost: 10, bcrypt: phpBcrypt},
		},
	}
	for _, tt := range tests {
		t.Run(tt.in[:10], func(t *testing.T) {
			got, err := v.Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(Hash{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Parse mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// hostileTests are stored hashes that Parse must reject, each with words its
// error message must contain.
func hostileTests() []struct{ name, in, want string } {
	salt, key := enc(16), enc(32)
	a := func(params string) string { return argon2Hash("argon2id", params, salt, key) }
	const p = "m=65536,t=3,p=4"
	const bc = "$2b$10$.vGA1O9wmRjrwAVXD98HNOgsNpDczlqm3Jq7KnEd1rVAGv3Fykk1a"
	return append([]struct{ name, in, want string }{
		{"empty", "", "empty hash"},
		{"too long", a(p) + strings.Repeat("A", 600), "encoded length 697 exceeds limit 512 bytes"},
		{"megabyte", strings.Repeat("$", 1<<20), "encoded length 1048576 exceeds limit 512"},
		{"no leading dollar", a(p)[1:], `missing leading "$"`},
		{"bare hex digest", "5baa61e4c9b93f3f0682250b6cf8331b7ee68fd8", `missing leading "$"`},
		{"lone dollar", "$", `unsupported algorithm ""`},
		{"wrong algorithm", "$y$j9T$" + salt + "$" + key, `unsupported algorithm "y"`},
		{"md5-crypt", "$1$saltsalt$" + key, `unsupported algorithm "1"`},
		{"argon2d", argon2Hash("argon2d", p, salt, key), `unsupported algorithm "argon2d"`},
		{"uppercase", argon2Hash("Argon2id", p, salt, key), `unsupported algorithm "Argon2id"`},
		{"bcrypt 2x", "$2x" + bc[3:], `unsupported algorithm "2x"`},
		{"bcrypt 2", "$2$10$" + bc[7:], `unsupported algorithm "2"`},
		{"long algorithm excerpt", "$" + strings.Repeat("a", 100) + "$x", `unsupported algorithm "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa..."`},
		{"algorithm only", "$argon2id", "missing fields"},
		{"algorithm and dollar", "$argon2id$", "missing fields"},
		{"missing key", "$argon2id$v=19$" + p + "$" + salt, "missing fields"},
		{"extra field", a(p) + "$extra", "extra fields"},
		{"trailing dollar", a(p) + "$", "extra fields"},
		{"v=16", "$argon2id$v=16$" + p + "$" + salt + "$" + key, "unsupported version v=16 (only v=19)"},
		{"v=20", "$argon2id$v=20$" + p + "$" + salt + "$" + key, "unsupported version v=20 (only v=19)"},
		{"v huge", "$argon2id$v=99999999999999$" + p + "$" + salt + "$" + key, "unsupported version v=99999999999999"},
		{"v leading zero", "$argon2id$v=019$" + p + "$" + salt + "$" + key, `version "v=019": leading zero not allowed`},
		{"v not a number", "$argon2id$v=x$" + p + "$" + salt + "$" + key, `version "v=x": not a decimal number`},
		{"v empty", "$argon2id$v=$" + p + "$" + salt + "$" + key, `version "v=": empty value`},
		{"missing v", "$argon2id$" + p + "$" + salt + "$" + key, "missing version field v=19"},
		{"malformed v", "$argon2id$x=19$" + p + "$" + salt + "$" + key, `malformed version field "x=19"`},
		{"duplicate m", a("m=65536,m=65536,t=3,p=4"), `duplicate parameter "m"`},
		{"duplicate t", a("m=65536,t=3,p=4,t=3"), `duplicate parameter "t"`},
		{"unknown parameter", a("m=65536,t=3,p=4,x=1"), `unknown parameter "x"`},
		{"keyid not an id", a("m=65536,t=3,p=4,keyid=AAAA"), "keyid: not a key id"},
		{"data", a("m=65536,t=3,p=4,data=AAAA"), `parameter "data" is not supported`},
		{"missing m", a("t=3,p=4"), `missing parameter "m"`},
		{"missing t", a("m=65536,p=4"), `missing parameter "t"`},
		{"missing p", a("m=65536,t=3"), `missing parameter "p"`},
		{"no parameters", a(""), "missing parameters"},
		{"parameter without =", a("m65536,t=3,p=4"), `malformed parameter "m65536"`},
		{"trailing comma", a(p + ","), `malformed parameter ""`},
		{"spaces", a("m=65536, t=3, p=4"), `unknown parameter " t"`},
		{"t=0", a("m=65536,t=0,p=4"), "iterations t=0 is below minimum 1"},
		{"p=0", a("m=65536,t=3,p=0"), "parallelism p=0 is below minimum 1"},
		{"m=0", a("m=0,t=3,p=1"), "memory m=0 KiB is below minimum 8*p=8 KiB"},
		{"m too small for p", a("m=31,t=3,p=4"), "memory m=31 KiB is below minimum 8*p=32 KiB"},
		{"4 GiB memory", a("m=4194304,t=3,p=4"), "memory m=4194304 KiB exceeds limit 262144 KiB"},
		{"2^32 KiB memory", a("m=4294967296,t=3,p=4"), "memory m=4294967296 KiB exceeds limit 262144 KiB"},
		{"2^32 iterations", a("m=65536,t=4294967296,p=4"), "iterations t=4294967296 exceeds limit 8"},
		{"2^32-1 iterations", a("m=65536,t=4294967295,p=4"), "iterations t=4294967295 exceeds limit 8"},
		{"2^64 iterations", a("m=65536,t=18446744073709551616,p=4"), "iterations t=18446744073709551616 exceeds limit 8"},
		{"17 iterations", a("m=65536,t=17,p=4"), "iterations t=17 exceeds limit 8"},
		{"p=256", a("m=65536,t=3,p=256"), "parallelism p=256 exceeds limit 16"},
		{"p=17", a("m=65536,t=3,p=17"), "parallelism p=17 exceeds limit 16"},
		{"leading zero", a("m=65536,t=03,p=4"), `parameter "t=03": leading zero not allowed`},
		{"zero-padded zero", a("m=65536,t=00,p=4"), `parameter "t=00": leading zero not allowed`},
		{"plus sign", a("m=65536,t=+3,p=4"), `parameter "t=+3": sign not allowed`},
		{"minus sign", a("m=65536,t=-3,p=4"), `parameter "t=-3": sign not allowed`},
		{"empty value", a("m=65536,t=,p=4"), `parameter "t=": empty value`},
		{"hex value", a("m=65536,t=0x3,p=4"), `parameter "t=0x3": not a decimal number`},
		{"exponent", a("m=64e3,t=3,p=4"), `parameter "m=64e3": not a decimal number`},
		{"padded salt", argon2Hash("argon2id", p, salt+"==", key), "salt: illegal base64 (padding not allowed)"},
		{"padded key", argon2Hash("argon2id", p, salt, key+"="), "key: illegal base64 (padding not allowed)"},
		{"non-canonical salt", argon2Hash("argon2id", p, setLowBit(salt), key), "salt: illegal base64 (non-canonical trailing bits)"},
		{"non-canonical key", argon2Hash("argon2id", p, salt, setLowBit(enc(31))), "key: illegal base64 (non-canonical trailing bits)"},
		{"newline in salt", argon2Hash("argon2id", p, salt[:10]+"\n"+salt[10:], key), "salt: illegal base64 character at offset 10"},
		{"url alphabet", argon2Hash("argon2id", p, salt, "-_"+key[2:]), "key: illegal base64 character at offset 0"},
		{"impossible length", argon2Hash("argon2id", p, enc(15)+"A", key), "salt: illegal base64 (impossible length 21)"},
		{"empty salt", argon2Hash("argon2id", p, "", key), "salt: 0 bytes is below minimum 8"},
		{"salt too short", argon2Hash("argon2id", p, enc(7), key), "salt: 7 bytes is below minimum 8"},
		{"salt too long", argon2Hash("argon2id", p, enc(65), key), "salt: 65 bytes exceeds limit 64"},
		{"empty key", argon2Hash("argon2id", p, salt, ""), "key: 0 bytes is below minimum 16"},
		{"4-byte key", argon2Hash("argon2id", p, salt, enc(4)), "key: 4 bytes is below minimum 16"},
		{"key too short", argon2Hash("argon2id", p, salt, enc(15)), "key: 15 bytes is below minimum 16"},
		{"key too long", argon2Hash("argon2id", p, salt, enc(129)), "key: 129 bytes exceeds limit 128"},
		{"huge key", argon2Hash("argon2id", p, salt, strings.Repeat("A", 400)), "key: 300 bytes exceeds limit 128"},
		{"bcrypt cost 31", "$2b$31" + bc[6:], "bcrypt: cost 31 exceeds limit 13"},
		{"bcrypt cost 15", "$2a$15" + bc[6:], "bcrypt: cost 15 exceeds limit 13"},
		{"bcrypt cost 99", "$2y$99" + bc[6:], "bcrypt: cost 99 exceeds limit 13"},
		{"bcrypt cost 03", "$2b$03" + bc[6:], "bcrypt: cost 3 is below minimum 4"},
		{"bcrypt one-digit cost", "$2b$4$" + bc[7:] + "a", `bcrypt: malformed cost "4$."`},
		{"bcrypt signed cost", "$2b$+9" + bc[6:], `bcrypt: malformed cost "+9$"`},
		{"bcrypt short", bc[:59], "bcrypt: length 59, want 60"},
		{"bcrypt long", bc + "a", "bcrypt: length 61, want 60"},
		{"bcrypt prefix only", "$2b$", "bcrypt: length 4, want 60"},
		{"bcrypt illegal character", bc[:20] + "+" + bc[21:], "bcrypt: illegal character at offset 20"},
		{"bcrypt missing separator", "$2b$10." + bc[7:], `bcrypt: malformed cost "10."`},
		{"bcrypt non-canonical checksum", bc[:59] + "b", "bcrypt: non-canonical checksum"},
	}, append(legacyHostileTests(), pepperHostileTests()...)...)
}

func TestParseRejects(t *testing.T) {
	v := testVerifier(t)
	for _, tt := range hostileTests() {
		t.Run(tt.name, func(t *testing.T) {
			h, err := v.Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse = %v, want error containing %q", h, tt.want)
			}
			if !errors.Is(err, ErrInvalidHash) {
				t.Errorf("error %q does not match ErrInvalidHash", err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "parse hash: ") || !strings.Contains(msg, tt.want) {
				t.Errorf("error = %q, want \"parse hash: \" and %q", msg, tt.want)
			}
			if strings.Contains(msg, "%!") {
				t.Errorf("error %q is badly formatted", msg)
			}
			if len(tt.in) > maxExcerptLen && strings.Contains(msg, tt.in) {
				t.Errorf("error %q contains the whole hash", msg)
			}
		})
	}
}

func TestParseUnsupportedAlgorithm(t *testing.T) {
	v := testVerifier(t)
	for _, in := range []string{"$argon2d$v=19$m=64,t=1,p=1$" + enc(16) + "$" + enc(32), "$2x" + phpBcrypt[3:], "$1$saltsalt$x", "$7$CU..../....x$y"} {
		_, err := v.Parse(in)
		if !errors.Is(err, ErrUnsupportedAlgorithm) || !errors.Is(err, ErrInvalidHash) {
			t.Errorf("Parse(%.12q) = %v, want ErrUnsupportedAlgorithm and ErrInvalidHash", in, err)
		}
	}
	_, err := v.Parse(argon2Hash("argon2id", "m=65536,t=0,p=4", enc(16), enc(32)))
	if errors.Is(err, ErrUnsupportedAlgorithm) {
		t.Errorf("Parse(t=0) = %v, must not be ErrUnsupportedAlgorithm", err)
	}
}

// hostileAllocTests ask for far more than the limits allow; rejecting them
// must cost no more than the error value.
func hostileAllocTests() []struct{ name, in string } {
	salt, key := enc(16), enc(32)
	return append([]struct{ name, in string }{
		{"4 GiB memory", argon2Hash("argon2id", "m=4194304,t=3,p=4", salt, key)},
		{"2^32 iterations", argon2Hash("argon2id", "m=65536,t=4294967296,p=4", salt, key)},
		{"2^32-1 iterations", argon2Hash("argon2id", "m=65536,t=4294967295,p=4", salt, key)},
		{"255 threads", argon2Hash("argon2id", "m=65536,t=3,p=255", salt, key)},
		{"megabyte input", "$argon2id$v=19$m=65536,t=3,p=4$" + strings.Repeat("A", 1<<20)},
		{"huge key", argon2Hash("argon2id", "m=65536,t=3,p=4", salt, strings.Repeat("A", 400))},
		{"bcrypt cost 31", "$2b$31" + phpBcrypt[6:]},
	}, append(legacyHostileAllocTests(), pepperHostileAllocTests()...)...)
}

func TestParseHostileAllocations(t *testing.T) {
	v := testVerifier(t)
	const maxAllocs = 3 // the error value, with room to spare
	const runs = 500
	for _, tt := range hostileAllocTests() {
		t.Run(tt.name, func(t *testing.T) {
			var parseErr error
			allocs := testing.AllocsPerRun(runs, func() {
				_, parseErr = v.Parse(tt.in)
			})
			if !errors.Is(parseErr, ErrInvalidHash) {
				t.Fatalf("Parse error = %v, want ErrInvalidHash", parseErr)
			}
			if allocs > maxAllocs {
				t.Errorf("Parse allocated %v times per run, want at most %d", allocs, maxAllocs)
			}

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range runs {
				_, parseErr = v.Parse(tt.in)
			}
			runtime.ReadMemStats(&after)
			delta := after.TotalAlloc - before.TotalAlloc
			if delta >= 64<<10 {
				t.Errorf("%d rejections allocated %d bytes in total, want < 64 KiB", runs, delta)
			}
			t.Logf("%v allocations per rejection; %d bytes for %d rejections", allocs, delta, runs)
		})
	}
}
