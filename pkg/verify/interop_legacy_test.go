package verify

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// Legacy hashes are produced inside the tests by foreign implementations that
// CI installs from Debian (python3-passlib, whois for mkpasswd, openssl), so a
// missing tool is a failure, not a skip.

// debianPython is Debian's interpreter, for which python3-passlib is
// packaged; a python3 earlier in PATH (pyenv) would not have it.
const debianPython = "/usr/bin/python3"

func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is required for the legacy interop tests: apt-get install %s (%v)", name, pkg, err)
	}
	return path
}

// passlibScript hashes sys.argv[2] (as bytes) with the passlib handler and
// settings in sys.argv[1], e.g. "pbkdf2_sha256.using(rounds=1000)".
const passlibScript = `import os, sys
import passlib.hash
handler = eval("passlib.hash." + sys.argv[1])
print(handler.hash(os.fsencode(sys.argv[2])))`

// foreign is one hash written by a foreign implementation.
type foreign struct {
	name     string
	tool     string   // "passlib", "mkpasswd" or "openssl"
	args     []string // passlib: the handler expression; others: the arguments before the password
	password []byte
	want     Algorithm
}

func (f foreign) run(t *testing.T) string {
	t.Helper()
	var cmd *exec.Cmd
	switch f.tool {
	case "passlib":
		requireTool(t, debianPython, "python3")
		cmd = exec.Command(debianPython, "-c", passlibScript, f.args[0], string(f.password))
	case "mkpasswd":
		// -s reads the password from stdin.
		cmd = exec.Command(requireTool(t, "mkpasswd", "whois"), append(f.args, "-s")...)
		cmd.Stdin = bytes.NewReader(f.password)
	case "openssl":
		cmd = exec.Command(requireTool(t, "openssl", "openssl"), append(append([]string{"passwd"}, f.args...), "-stdin")...)
		cmd.Stdin = bytes.NewReader(append(bytes.Clone(f.password), '\n'))
	default:
		t.Fatalf("unknown tool %q", f.tool)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if f.tool == "passlib" && strings.Contains(stderr.String(), "No module named 'passlib'") {
			t.Fatalf("passlib is required for the legacy interop tests: apt-get install python3-passlib")
		}
		t.Fatalf("%s %v: %v: %s", f.tool, f.args, err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

func foreignHashes() []foreign {
	pw := []byte("pw")
	uni := []byte("pässwörd with spaces")
	long := bytes.Repeat([]byte("long password "), 16) // 224 bytes, over SHA-256's and SHA-512's block sizes
	return []foreign{
		{"passlib pbkdf2_sha1", "passlib", []string{"pbkdf2_sha1.using(rounds=1000)"}, pw, PBKDF2SHA1},
		{"passlib pbkdf2_sha256", "passlib", []string{"pbkdf2_sha256.using(rounds=1000)"}, pw, PBKDF2SHA256},
		{"passlib pbkdf2_sha256 unicode", "passlib", []string{"pbkdf2_sha256.using(rounds=1001, salt_size=1)"}, uni, PBKDF2SHA256},
		{"passlib pbkdf2_sha256 long", "passlib", []string{"pbkdf2_sha256.using(rounds=10, salt_size=64)"}, long, PBKDF2SHA256},
		{"passlib pbkdf2_sha512", "passlib", []string{"pbkdf2_sha512.using(rounds=1000)"}, pw, PBKDF2SHA512},
		{"passlib pbkdf2_sha512 unicode", "passlib", []string{"pbkdf2_sha512.using(rounds=3, salt_size=5)"}, uni, PBKDF2SHA512},
		{"passlib scrypt", "passlib", []string{"scrypt.using(rounds=4)"}, pw, Scrypt},
		{"passlib scrypt r=4 p=3", "passlib", []string{"scrypt.using(rounds=5, block_size=4, parallelism=3, salt_size=7)"}, uni, Scrypt},
		{"passlib scrypt long", "passlib", []string{"scrypt.using(rounds=1, block_size=1)"}, long, Scrypt},
		{"passlib sha256_crypt", "passlib", []string{"sha256_crypt.using(rounds=1000)"}, pw, SHA256Crypt},
		{"passlib sha256_crypt unicode", "passlib", []string{"sha256_crypt.using(rounds=1234, salt_size=3)"}, uni, SHA256Crypt},
		{"passlib sha512_crypt", "passlib", []string{"sha512_crypt.using(rounds=1000)"}, pw, SHA512Crypt},
		{"passlib sha512_crypt long", "passlib", []string{"sha512_crypt.using(rounds=1000)"}, long, SHA512Crypt},
		{"passlib sha512_crypt 5000", "passlib", []string{"sha512_crypt.using(rounds=5000)"}, uni, SHA512Crypt},
		{"passlib django_pbkdf2_sha256", "passlib", []string{"django_pbkdf2_sha256.using(rounds=1000)"}, pw, PBKDF2SHA256},
		{"passlib django_pbkdf2_sha256 unicode", "passlib", []string{"django_pbkdf2_sha256.using(rounds=999, salt_size=30)"}, uni, PBKDF2SHA256},
		{"passlib django_pbkdf2_sha1", "passlib", []string{"django_pbkdf2_sha1.using(rounds=1000)"}, pw, PBKDF2SHA1},
		{"mkpasswd sha-512", "mkpasswd", []string{"-m", "sha-512", "-R", "5000"}, pw, SHA512Crypt},
		{"mkpasswd sha-512 rounds", "mkpasswd", []string{"-m", "sha-512", "-R", "1500"}, uni, SHA512Crypt},
		{"mkpasswd sha-256", "mkpasswd", []string{"-m", "sha-256"}, pw, SHA256Crypt},
		{"mkpasswd sha-256 rounds", "mkpasswd", []string{"-m", "sha-256", "-R", "2000", "-S", "0123456789abcdef"}, long, SHA256Crypt},
		{"openssl -5", "openssl", []string{"-5", "-salt", "saltsalt"}, pw, SHA256Crypt},
		{"openssl -5 short salt", "openssl", []string{"-5", "-salt", "x"}, uni, SHA256Crypt},
		{"openssl -6", "openssl", []string{"-6", "-salt", "saltsaltsaltsalt"}, pw, SHA512Crypt},
		{"openssl -6 long", "openssl", []string{"-6", "-salt", "a.b/c"}, long, SHA512Crypt},
	}
}

// TestLegacyForeignHashesVerify checks that legacy hashes written by passlib,
// glibc (mkpasswd) and OpenSSL parse, re-encode byte for byte, verify with the
// right password, do not with wrong ones, and always need a rehash.
func TestLegacyForeignHashesVerify(t *testing.T) {
	v := testVerifier(t)
	for _, f := range foreignHashes() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			encoded := f.run(t)
			h, err := v.Parse(encoded)
			if err != nil {
				t.Fatalf("Parse(%q): %v", encoded, err)
			}
			if h.Algorithm != f.want {
				t.Errorf("Algorithm = %v, want %v", h.Algorithm, f.want)
			}
			if got := h.String(); got != encoded {
				t.Errorf("String() = %q, want the tool's %q", got, encoded)
			}
			match, rehash, err := v.Verify(h, f.password)
			if err != nil || !match || !rehash {
				t.Errorf("Verify(right password) = %v, %v, %v; want true, true, nil (hash %q)", match, rehash, err, encoded)
			}
			flipped := bytes.Clone(f.password)
			flipped[len(flipped)-1] ^= 1
			for _, wrong := range [][]byte{append(bytes.Clone(f.password), 'x'), f.password[1:], flipped, nil} {
				if match, rehash, err := v.Verify(h, wrong); err != nil || match || !rehash {
					t.Errorf("Verify(wrong password %.8q) = %v, %v, %v; want false, true, nil", wrong, match, rehash, err)
				}
			}
		})
	}
}

// TestShaCryptPasswordCap checks that a SHA-crypt check refuses a password
// longer than MaxShaCryptPasswordLen, whose cost would exceed its estimate,
// while the other legacy formats take any password up to MaxPasswordLen.
func TestShaCryptPasswordCap(t *testing.T) {
	v := testVerifier(t)
	h, err := v.Parse(opensslSHA512)
	if err != nil {
		t.Fatal(err)
	}
	long := bytes.Repeat([]byte("secret!"), 37) // 259 bytes
	_, _, err = v.Verify(h, long)
	if !errors.Is(err, ErrPasswordTooLong) || strings.Contains(err.Error(), "secret!") || !strings.Contains(err.Error(), "259 bytes exceeds the sha512-crypt limit 256") {
		t.Errorf("Verify(259 bytes) = %v, want ErrPasswordTooLong stating lengths only", err)
	}
	if match, _, err := v.Verify(h, long[:256]); err != nil || match {
		t.Errorf("Verify(256 bytes) = %v, %v; want false, nil", match, err)
	}
}

// opensslSHA512 is `openssl passwd -6 -salt saltsalt pw`, for tests that
// need a SHA-crypt hash without running the tool.
const opensslSHA512 = "$6$saltsalt$pauPrmdmG4BTE9h2HPmywiw152IFch6BJCEsaY6D.PLTfpV8sqvXwWdyfsgVgozkYH9B80bAip/08R2BPH2xk/"

// TestLegacyHandBuiltHashChecked checks that Verify enforces the legacy caps
// on a Hash built or modified by hand, as it does for argon2.
func TestLegacyHandBuiltHashChecked(t *testing.T) {
	v := testVerifier(t)
	key32, key64 := make([]byte, 32), make([]byte, 64)
	for _, tt := range []struct {
		name string
		h    *Hash
		want string
	}{
		{"pbkdf2 2^32-1 iterations", &Hash{Algorithm: PBKDF2SHA256, Rounds: 1<<32 - 1, Key: key32}, "pbkdf2-sha256: iterations 4294967295 outside 1..1300000"},
		{"pbkdf2 0 iterations", &Hash{Algorithm: PBKDF2SHA1, Key: key32[:20]}, "pbkdf2-sha1: iterations 0 outside"},
		{"pbkdf2 short key", &Hash{Algorithm: PBKDF2SHA512, Rounds: 1, Key: key32}, "pbkdf2-sha512: key: 32 bytes is below minimum 64"},
		{"pbkdf2 huge salt", &Hash{Algorithm: PBKDF2SHA256, Rounds: 1, Salt: make([]byte, 1<<20), Key: key32}, "salt: 1048576 bytes exceeds limit 64"},
		{"scrypt ln=40", &Hash{Algorithm: Scrypt, Scrypt: ScryptParams{LogN: 40, R: 8, P: 1}, Key: key32}, "scrypt: parameter ln=40 exceeds limit 18"},
		{"scrypt r=2^31", &Hash{Algorithm: Scrypt, Scrypt: ScryptParams{LogN: 1, R: 1 << 31, P: 1}, Key: key32}, "scrypt: parameter r=2147483648 exceeds limit 32"},
		{"scrypt zero", &Hash{Algorithm: Scrypt, Key: key32}, "scrypt: ln, r and p must each be at least 1"},
		{"scrypt memory", &Hash{Algorithm: Scrypt, Scrypt: ScryptParams{LogN: 18, R: 32, P: 1}, Key: key32}, "scrypt: memory 128*r*N = 1048576 KiB exceeds limit 262144 KiB"},
		{"sha-crypt 2^32-1 rounds", &Hash{Algorithm: SHA512Crypt, Rounds: 1<<32 - 1, Key: key64}, "sha512-crypt: rounds 4294967295 outside 1000..700000"},
		{"sha-crypt long salt", &Hash{Algorithm: SHA256Crypt, Rounds: 5000, Salt: make([]byte, 17), Key: key32}, "sha256-crypt: salt: 17 bytes exceeds limit 16"},
		{"sha-crypt short key", &Hash{Algorithm: SHA256Crypt, Rounds: 5000, Key: key32[:31]}, "sha256-crypt: key: 31 bytes is below minimum 32"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := v.Verify(tt.h, []byte("pw"))
			if !errors.Is(err, ErrInvalidHash) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Verify = %v, want ErrInvalidHash containing %q", err, tt.want)
			}
		})
	}
}

// ab returns the ab64 encoding of n bytes of a fixed pattern.
func ab(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	return ab64.EncodeToString(b)
}

// legacyHostileTests are legacy hashes that Parse must reject; hostileTests
// includes them.
func legacyHostileTests() []struct{ name, in, want string } {
	salt, ck32, ck20 := ab(16), ab(32), ab(20)
	p256 := func(rounds, salt, ck string) string { return "$pbkdf2-sha256$" + rounds + "$" + salt + "$" + ck }
	dj := "pbkdf2_sha256$1000$K9L3dn0oAHOT$EDGEpaDsm3wXkcq07lXUhA3LMXFevm0I63GMdKhC/Xo="
	sc := func(params string) string { return "$scrypt$" + params + "$" + enc(16) + "$" + enc(32) }
	s6 := opensslSHA512
	s6ck := s6[strings.LastIndexByte(s6, '$')+1:]
	s5ck := "/LKlXd6vuvdFX3oWbf2vGk3DgflzzsvOtMZsiOxqqY5" // openssl passwd -5 -salt abc pw
	return []struct{ name, in, want string }{
		// PBKDF2, passlib.
		{"pbkdf2 2^40 rounds", p256("1099511627776", salt, ck32), "pbkdf2-sha256: iterations 1099511627776 exceeds limit 1300000"},
		{"pbkdf2 2^64 rounds", p256("18446744073709551616", salt, ck32), "pbkdf2-sha256: iterations 18446744073709551616 exceeds limit 1300000"},
		{"pbkdf2 over cap", "$pbkdf2$1300001$" + salt + "$" + ck20, "pbkdf2-sha1: iterations 1300001 exceeds limit 1300000"},
		{"pbkdf2 0 rounds", p256("0", salt, ck32), "pbkdf2-sha256: iterations 0 is below minimum 1"},
		{"pbkdf2 leading zero", p256("029000", salt, ck32), `pbkdf2-sha256: iterations "029000": leading zero not allowed`},
		{"pbkdf2 signed rounds", p256("-1", salt, ck32), `pbkdf2-sha256: iterations "-1": sign not allowed`},
		{"pbkdf2 empty rounds", p256("", salt, ck32), `pbkdf2-sha256: iterations "": empty value`},
		{"pbkdf2 huge salt", p256("1000", ab(65), ck32), "pbkdf2-sha256: salt: 65 bytes exceeds limit 64"},
		{"pbkdf2 plus in salt", p256("1000", "ab+d"+salt[4:], ck32), "pbkdf2-sha256: salt: illegal base64 character at offset 2"},
		{"pbkdf2 padded checksum", p256("1000", salt, ck32+"="), "pbkdf2-sha256: checksum: illegal base64 (padding not allowed)"},
		{"pbkdf2 short checksum", p256("1000", salt, ck20), "pbkdf2-sha256: checksum: 20 bytes is below minimum 32"},
		{"pbkdf2-sha512 sha256 checksum", "$pbkdf2-sha512$1000$" + salt + "$" + ck32, "pbkdf2-sha512: checksum: 32 bytes is below minimum 64"},
		{"pbkdf2 long checksum", "$pbkdf2$1000$" + salt + "$" + ck32, "pbkdf2-sha1: checksum: 32 bytes exceeds limit 20"},
		{"pbkdf2 non-canonical", p256("1000", salt, ck32[:42]+"B"), "pbkdf2-sha256: checksum: illegal base64 (non-canonical trailing bits)"},
		{"pbkdf2 impossible length", p256("1000", "AAAAA", ck32), "pbkdf2-sha256: salt: illegal base64 (impossible length 5)"},
		{"pbkdf2 missing fields", "$pbkdf2-sha256$1000$" + salt, "pbkdf2-sha256: missing fields: want $pbkdf2-sha256$<rounds>$<salt>$<checksum>"},
		{"pbkdf2 name only", "$pbkdf2-sha512$", "pbkdf2-sha512: missing fields"},
		{"pbkdf2 trailing field", p256("1000", salt, ck32) + "$x", "pbkdf2-sha256: extra fields"},
		{"pbkdf2 trailing garbage", p256("1000", salt, ck32) + "xyz", "pbkdf2-sha256: checksum: 34 bytes exceeds limit 32"},
		{"pbkdf2 newline", p256("1000", salt, ck32) + "\n", "pbkdf2-sha256: checksum: illegal base64 character at offset 43"},
		// PBKDF2, Django.
		{"django 2^40 iterations", "pbkdf2_sha256$1099511627776$salt$" + dj[len(dj)-44:], "pbkdf2-sha256: iterations 1099511627776 exceeds limit 1300000"},
		{"django empty salt", "pbkdf2_sha256$1000$$" + dj[len(dj)-44:], "pbkdf2-sha256: salt: 0 bytes is below minimum 1"},
		{"django huge salt", "pbkdf2_sha256$1000$" + strings.Repeat("s", 65) + "$" + dj[len(dj)-44:], "pbkdf2-sha256: salt: 65 bytes exceeds limit 64"},
		{"django salt with space", "pbkdf2_sha256$1000$a salt$" + dj[len(dj)-44:], "pbkdf2-sha256: salt: illegal character at offset 1"},
		{"django unpadded", strings.TrimSuffix(dj, "="), "pbkdf2-sha256: hash: 43 characters, want 44"},
		{"django ab64 hash", dj[:len(dj)-44] + ".." + ck32[2:] + "=", "pbkdf2-sha256: hash: illegal base64 character at offset 0"},
		{"django bad padding", dj[:len(dj)-1] + "A", "pbkdf2-sha256: hash: illegal base64 padding"},
		{"django sha1 sha256 hash", "pbkdf2_sha1" + dj[len("pbkdf2_sha256"):], "pbkdf2-sha1: hash: 44 characters, want 28"},
		{"django missing fields", "pbkdf2_sha256$1000$salt", "pbkdf2-sha256: missing fields: want pbkdf2_sha256$<iterations>$<salt>$<hash>"},
		{"django trailing field", dj + "$", "pbkdf2-sha256: extra fields"},
		{"django sha512", "pbkdf2_sha512$1000$salt$x", `missing leading "$"`},
		// scrypt.
		{"scrypt ln=40", sc("ln=40,r=8,p=1"), "scrypt: parameter ln=40 exceeds limit 18"},
		{"scrypt ln=2^64", sc("ln=18446744073709551616,r=8,p=1"), "scrypt: parameter ln=18446744073709551616 exceeds limit 18"},
		{"scrypt r=2^31", sc("ln=16,r=2147483648,p=1"), "scrypt: parameter r=2147483648 exceeds limit 32"},
		{"scrypt p=2^32", sc("ln=16,r=8,p=4294967296"), "scrypt: parameter p=4294967296 exceeds limit 16"},
		{"scrypt ln=0", sc("ln=0,r=8,p=1"), "scrypt: parameter ln=0 is below minimum 1"},
		{"scrypt r=0", sc("ln=16,r=0,p=1"), "scrypt: parameter r=0 is below minimum 1"},
		{"scrypt 1 GiB", sc("ln=18,r=32,p=1"), "scrypt: memory 128*r*N = 1048576 KiB exceeds limit 262144 KiB"},
		{"scrypt 512 MiB", sc("ln=18,r=16,p=1"), "scrypt: memory 128*r*N = 524288 KiB exceeds limit 262144 KiB"},
		{"scrypt work", sc("ln=18,r=8,p=16"), "scrypt: work N*r*p = 33554432 exceeds limit 1048576"},
		{"scrypt order", sc("r=8,ln=16,p=1"), `scrypt: malformed parameter "r=8" (want ln=)`},
		{"scrypt missing p", sc("ln=16,r=8"), `scrypt: malformed parameters "ln=16,r=8" (want ln=,r=,p=)`},
		{"scrypt extra parameter", sc("ln=16,r=8,p=1,x=1"), `scrypt: malformed parameters "ln=16,r=8,p=1,x=1"`},
		{"scrypt leading zero", sc("ln=016,r=8,p=1"), `scrypt: parameter "ln=016": leading zero not allowed`},
		{"scrypt short key", "$scrypt$ln=4,r=8,p=1$" + salt + "$" + enc(8), "scrypt: checksum: 8 bytes is below minimum 16"},
		{"scrypt ab64", "$scrypt$ln=4,r=8,p=1$" + salt + "$" + ".." + enc(32)[2:], "scrypt: checksum: illegal base64 character at offset 0"},
		{"scrypt huge salt", "$scrypt$ln=4,r=8,p=1$" + strings.Repeat("A", 400) + "$" + ck32, "scrypt: salt: 300 bytes exceeds limit 64"},
		{"scrypt missing fields", "$scrypt$ln=4,r=8,p=1$" + salt, "scrypt: missing fields"},
		{"scrypt trailing field", sc("ln=4,r=8,p=1") + "$", "scrypt: extra fields"},
		// SHA-crypt.
		{"sha-crypt 2^40 rounds", "$6$rounds=1099511627776$saltsalt$" + s6ck, "sha512-crypt: rounds 1099511627776 exceeds limit 700000"},
		{"sha-crypt glibc max rounds", "$5$rounds=999999999$abc$" + s5ck, "sha256-crypt: rounds 999999999 exceeds limit 700000"},
		{"sha-crypt 999 rounds", "$6$rounds=999$saltsalt$" + s6ck, "sha512-crypt: rounds 999 is below minimum 1000"},
		{"sha-crypt rounds word", "$6$rounds=many$saltsalt$" + s6ck, `sha512-crypt: rounds "many": not a decimal number`},
		{"sha-crypt rounds only", "$6$rounds=5000", "sha512-crypt: missing fields: want $6$[rounds=<n>$]<salt>$<checksum>"},
		{"sha-crypt setting only", "$6$saltsalt", "sha512-crypt: missing fields: want $6$[rounds=<n>$]<salt>$<checksum>"},
		{"sha-crypt trailing field", s6 + "$x", "sha512-crypt: extra fields"},
		{"sha-crypt trailing garbage", s6 + "x", "sha512-crypt: checksum: 87 characters, want 86"},
		{"sha-crypt sha256 checksum", "$6$abc$" + s5ck, "sha512-crypt: checksum: 43 characters, want 86"},
		{"sha-crypt 17-byte salt", "$6$saltsaltsaltsalt1$" + s6ck, "sha512-crypt: salt: 17 bytes exceeds limit 16"},
		{"sha-crypt huge salt", "$5$" + strings.Repeat("s", 400) + "$" + s5ck, "sha256-crypt: salt: 400 bytes exceeds limit 16"},
		{"sha-crypt salt with newline", "$5$ab\nc$" + s5ck, "sha256-crypt: salt: illegal character at offset 2"},
		{"sha-crypt plus in checksum", "$5$abc$+" + s5ck[1:], "sha256-crypt: checksum: illegal character at offset 0"},
		{"sha-crypt non-canonical 256", "$5$abc$" + s5ck[:42] + "z", "sha256-crypt: checksum: non-canonical trailing bits"},
		{"sha-crypt non-canonical 512", "$6$saltsalt$" + s6ck[:85] + "z", "sha512-crypt: checksum: non-canonical trailing bits"},
	}
}

// legacyHostileAllocTests are legacy hashes that ask for far more than the
// limits allow; hostileAllocTests includes them.
func legacyHostileAllocTests() []struct{ name, in string } {
	salt, ck32 := ab(16), ab(32)
	return []struct{ name, in string }{
		{"pbkdf2 2^40 rounds", "$pbkdf2-sha256$1099511627776$" + salt + "$" + ck32},
		{"pbkdf2 huge salt", "$pbkdf2-sha512$1000$" + strings.Repeat("A", 400) + "$" + ck32},
		{"django 2^40 rounds", "pbkdf2_sha256$1099511627776$salt$EDGEpaDsm3wXkcq07lXUhA3LMXFevm0I63GMdKhC/Xo="},
		{"scrypt ln=40", "$scrypt$ln=40,r=8,p=1$" + salt + "$" + ck32},
		{"scrypt r=2^31", "$scrypt$ln=16,r=2147483648,p=1$" + salt + "$" + ck32},
		{"scrypt 1 GiB", "$scrypt$ln=18,r=32,p=1$" + salt + "$" + ck32},
		{"scrypt megabyte input", "$scrypt$ln=16,r=8,p=1$" + strings.Repeat("A", 1<<20)},
		{"sha-crypt 2^40 rounds", "$6$rounds=1099511627776$saltsalt$" + opensslSHA512[len(opensslSHA512)-86:]},
		{"sha-crypt huge salt", "$5$" + strings.Repeat("s", 400) + "$x"},
	}
}
