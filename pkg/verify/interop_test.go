package verify

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// argon2CLI returns the path of the reference implementation's CLI. CI
// installs it, so its absence is a failure, not a skip.
func argon2CLI(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("argon2")
	if err != nil {
		t.Fatalf("the reference argon2 CLI is required: apt-get install argon2 (%v)", err)
	}
	return path
}

type cliRun struct {
	salt        string // the CLI takes the salt as an argument
	typ         string // "id" or "i"
	t, kib, p   int
	log2Mem     int // when set, -m log2Mem instead of -k kib
	keyLen      int
	password    []byte
	resultFlags string // "-e" (encoded) or "-r" (raw, printed as hex)
}

func (r cliRun) args() []string {
	args := []string{r.salt, "-" + r.typ, "-t", strconv.Itoa(r.t), "-p", strconv.Itoa(r.p), "-l", strconv.Itoa(r.keyLen)}
	if r.log2Mem != 0 {
		args = append(args, "-m", strconv.Itoa(r.log2Mem))
	} else {
		args = append(args, "-k", strconv.Itoa(r.kib))
	}
	return append(args, r.resultFlags)
}

// run runs the CLI with the password on stdin and returns its trimmed output.
func (r cliRun) run(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(argon2CLI(t), r.args()...)
	cmd.Stdin = bytes.NewReader(r.password)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("argon2 %s: %v: %s", strings.Join(r.args(), " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// TestReferenceCLIHashesVerify checks that hashes written by the reference
// implementation parse, re-encode byte for byte, and verify.
func TestReferenceCLIHashesVerify(t *testing.T) {
	argon2CLI(t)
	v := testVerifier(t)
	runs := []cliRun{
		{salt: "somesalt", t: 1, kib: 8, p: 1, keyLen: 16, password: []byte("pw")},
		{salt: "somesalt123", t: 2, kib: 64, p: 2, keyLen: 32, password: []byte("pw")},
		{salt: "0123456789abcdef", t: 3, kib: 70, p: 2, keyLen: 24, password: []byte("not a multiple of 4p blocks")},
		{salt: "saltsaltsaltsaltsaltsaltsaltsalt", t: 1, kib: 256, p: 4, keyLen: 64, password: []byte("pässwörd \x00 with NUL")},
		{salt: "log2memory", t: 2, log2Mem: 10, p: 1, keyLen: 32, password: []byte("-m 10 is 1024 KiB")},
		{salt: "manythreads", t: 1, kib: 128, p: 16, keyLen: 128, password: bytes.Repeat([]byte("long "), 24)}, // the CLI reads at most 127 bytes,
	}
	for _, typ := range []string{"id", "i"} {
		for _, r := range runs {
			r.typ, r.resultFlags = typ, "-e"
			t.Run(strings.Join(r.args(), " "), func(t *testing.T) {
				t.Parallel()
				encoded := r.run(t)
				h, err := v.Parse(encoded)
				if err != nil {
					t.Fatalf("Parse(%q): %v", encoded, err)
				}
				if got := h.String(); got != encoded {
					t.Errorf("String() = %q, want the CLI's %q", got, encoded)
				}
				if match, _, err := v.Verify(h, r.password); err != nil || !match {
					t.Errorf("Verify(right password) = %v, %v; want true, nil", match, err)
				}
				for _, wrong := range [][]byte{append(bytes.Clone(r.password), 'x'), r.password[1:], nil} {
					if match, _, err := v.Verify(h, wrong); err != nil || match {
						t.Errorf("Verify(wrong password %.8q) = %v, %v; want false, nil", wrong, match, err)
					}
				}
			})
		}
	}
}

// stepReader yields 0x41, 0x42, ... so that the salt is printable and can be
// passed to the CLI as an argument.
type stepReader struct{ next byte }

func (r *stepReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'A' + r.next%26
		r.next++
	}
	return len(p), nil
}

// TestHashPasswordMatchesReferenceCLI checks that the key Levee derives is
// byte for byte the reference implementation's, for the same parameters.
func TestHashPasswordMatchesReferenceCLI(t *testing.T) {
	argon2CLI(t)
	for _, p := range []Policy{
		{Params: Params{Memory: 64, Iterations: 2, Parallelism: 2}, SaltLen: 16, KeyLen: 32},
		{Params: Params{Memory: 100, Iterations: 1, Parallelism: 3}, SaltLen: 8, KeyLen: 16},
		{Params: Params{Memory: 512, Iterations: 4, Parallelism: 1}, SaltLen: 64, KeyLen: 128},
	} {
		t.Run(fmt.Sprintf("m=%d,t=%d,p=%d", p.Params.Memory, p.Params.Iterations, p.Params.Parallelism), func(t *testing.T) {
			t.Parallel()
			v := newVerifier(t, p, DefaultLimits())
			password := []byte("levee \xff password")
			h, err := v.HashPassword(password, &stepReader{})
			if err != nil {
				t.Fatalf("HashPassword: %v", err)
			}
			r := cliRun{
				salt: string(h.Salt), typ: "id",
				t: int(p.Params.Iterations), kib: int(p.Params.Memory), p: int(p.Params.Parallelism),
				keyLen: p.KeyLen, password: password,
			}
			r.resultFlags = "-r"
			if got, want := hex.EncodeToString(h.Key), r.run(t); got != want {
				t.Errorf("key = %s, want the CLI's %s", got, want)
			}
			r.resultFlags = "-e"
			if got, want := h.String(), r.run(t); got != want {
				t.Errorf("String() = %q, want the CLI's %q", got, want)
			}
		})
	}
}

// TestNodeOrderVectors verifies committed vectors whose parameters are in the
// order node-argon2 writes them (m, p, t); see the file's header.
func TestNodeOrderVectors(t *testing.T) {
	v := testVerifier(t)
	f, err := os.Open("testdata/node-order-vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pwHex, encoded, ok := strings.Cut(line, " ")
		password, err := hex.DecodeString(pwHex)
		if !ok || err != nil {
			t.Fatalf("malformed vector line %q", line)
		}
		n++
		t.Run(encoded[:strings.LastIndexByte(encoded, '$')], func(t *testing.T) {
			h, err := v.Parse(encoded)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			canonical := canonicalOrder(t, encoded)
			if diff := cmp.Diff(canonical, h.String()); diff != "" {
				t.Errorf("String() (-want +got):\n%s", diff)
			}
			if match, _, err := v.Verify(h, password); err != nil || !match {
				t.Errorf("Verify(right password) = %v, %v; want true, nil", match, err)
			}
			if match, _, err := v.Verify(h, append(password, '!')); err != nil || match {
				t.Errorf("Verify(wrong password) = %v, %v; want false, nil", match, err)
			}
		})
	}
	if n < 5 {
		t.Fatalf("read %d vectors, want at least 5", n)
	}
}

// canonicalOrder rewrites "m=A,p=B,t=C" as "m=A,t=C,p=B".
func canonicalOrder(t *testing.T, encoded string) string {
	t.Helper()
	f := strings.Split(encoded, "$")
	var m, p, tt string
	if _, err := fmt.Sscanf(strings.ReplaceAll(f[3], ",", " "), "m=%s p=%s t=%s", &m, &p, &tt); err != nil {
		t.Fatalf("vector %q is not in m,p,t order: %v", encoded, err)
	}
	f[3] = "m=" + m + ",t=" + tt + ",p=" + p
	return strings.Join(f, "$")
}
