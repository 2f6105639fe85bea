package verify

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"
)

func TestAlgorithmString(t *testing.T) {
	for _, tt := range []struct {
		a    Algorithm
		want string
	}{
		{Argon2id, "argon2id"}, {Argon2i, "argon2i"}, {Bcrypt, "bcrypt"},
		{PBKDF2SHA1, "pbkdf2-sha1"}, {PBKDF2SHA256, "pbkdf2-sha256"}, {PBKDF2SHA512, "pbkdf2-sha512"},
		{Scrypt, "scrypt"}, {SHA256Crypt, "sha256-crypt"}, {SHA512Crypt, "sha512-crypt"},
		{0, "unknown"}, {42, "unknown"},
	} {
		if got := tt.a.String(); got != tt.want {
			t.Errorf("Algorithm(%d).String() = %q, want %q", uint8(tt.a), got, tt.want)
		}
	}
}

func TestHashPasswordVerifies(t *testing.T) {
	v := testVerifier(t)
	for _, pw := range [][]byte{[]byte("correct horse"), {}, bytes.Repeat([]byte{0xff, 0}, 100)} {
		h, err := v.HashPassword(pw, nil)
		if err != nil {
			t.Fatalf("HashPassword: %v", err)
		}
		want := &Hash{Algorithm: Argon2id, Version: 19, Params: testPolicy().Params, Salt: h.Salt, Key: h.Key}
		if diff := cmp.Diff(want, h, cmp.AllowUnexported(Hash{})); diff != "" {
			t.Errorf("HashPassword (-want +got):\n%s", diff)
		}
		if len(h.Salt) != 16 || len(h.Key) != 32 {
			t.Errorf("salt, key lengths = %d, %d; want 16, 32", len(h.Salt), len(h.Key))
		}
		// Through the encoding, as a caller would store it.
		parsed, err := v.Parse(h.String())
		if err != nil {
			t.Fatalf("Parse(HashPassword): %v", err)
		}
		if diff := cmp.Diff(h, parsed, cmp.AllowUnexported(Hash{})); diff != "" {
			t.Errorf("Parse(h.String()) (-want +got):\n%s", diff)
		}
		match, rehash, err := v.Verify(parsed, pw)
		if err != nil || !match || rehash {
			t.Errorf("Verify(right password) = %v, %v, %v; want true, false, nil", match, rehash, err)
		}
		match, _, err = v.Verify(parsed, append(pw[:len(pw):len(pw)], 'x'))
		if err != nil || match {
			t.Errorf("Verify(wrong password) = %v, %v; want false, nil", match, err)
		}
	}
}

func TestHashPasswordFreshSalt(t *testing.T) {
	v := testVerifier(t)
	h1, err1 := v.HashPassword([]byte("pw"), nil)
	h2, err2 := v.HashPassword([]byte("pw"), nil)
	if err1 != nil || err2 != nil {
		t.Fatalf("HashPassword: %v, %v", err1, err2)
	}
	if bytes.Equal(h1.Salt, h2.Salt) || bytes.Equal(h1.Key, h2.Key) {
		t.Errorf("two hashes of one password share salt %x or key %x", h1.Salt, h1.Key)
	}
}

type failingReader struct{}

var errEntropy = errors.New("entropy exhausted")

func (failingReader) Read([]byte) (int, error) { return 0, errEntropy }

func TestHashPasswordRandErrors(t *testing.T) {
	v := testVerifier(t)
	for _, tt := range []struct {
		name string
		r    io.Reader
		want error
	}{
		{"failing", failingReader{}, errEntropy},
		{"short", strings.NewReader("only ten b"), io.ErrUnexpectedEOF},
		{"empty", strings.NewReader(""), io.EOF},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, err := v.HashPassword([]byte("pw"), tt.r)
			if !errors.Is(err, tt.want) {
				t.Errorf("HashPassword = %v, %v; want error %v", h, err, tt.want)
			}
		})
	}
}

func TestPasswordTooLong(t *testing.T) {
	v := testVerifier(t)
	h, err := v.HashPassword([]byte("pw"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ok := bytes.Repeat([]byte("p"), 4096)
	long := append(bytes.Repeat([]byte("secret!"), 585), 'x', 'y') // 4097 bytes
	if err := v.CheckPassword(ok); err != nil {
		t.Errorf("CheckPassword(4096 bytes) = %v, want nil", err)
	}
	if _, err := v.HashPassword(ok, nil); err != nil {
		t.Errorf("HashPassword(4096 bytes) = %v, want nil", err)
	}
	for name, err := range map[string]error{
		"CheckPassword": v.CheckPassword(long),
		"HashPassword":  second(v.HashPassword(long, nil)),
		"Verify":        third(v.Verify(h, long)),
	} {
		if !errors.Is(err, ErrPasswordTooLong) {
			t.Errorf("%s(4097 bytes) = %v, want ErrPasswordTooLong", name, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "secret!") || !strings.Contains(msg, "4097 bytes exceeds limit 4096") {
			t.Errorf("%s error = %q, want lengths only", name, msg)
		}
	}
}

func second[A, B any](_ A, b B) B        { return b }
func third[A, B, C any](_ A, _ B, c C) C { return c }

func TestVerifyBcrypt(t *testing.T) {
	v := testVerifier(t)
	pw := []byte("bcrypt password")
	gen, err := bcrypt.GenerateFromPassword(pw, bcrypt.MinCost) // writes $2a$
	if err != nil {
		t.Fatal(err)
	}
	tail := string(gen[3:])
	tests := []struct {
		name, hash string
		pw         []byte
	}{
		{"2a", "$2a" + tail, pw},
		{"2b", "$2b" + tail, pw},
		// $2y$ is PHP's name for the same algorithm as $2b$.
		{"2y", "$2y" + tail, pw},
		{"php 2y", phpBcrypt, []byte("rasmuslerdorf")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := v.Parse(tt.hash)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if h.Algorithm != Bcrypt || h.String() != tt.hash {
				t.Errorf("Parse = %v %q, want bcrypt %q", h.Algorithm, h, tt.hash)
			}
			match, rehash, err := v.Verify(h, tt.pw)
			if err != nil || !match || !rehash {
				t.Errorf("Verify(right) = %v, %v, %v; want true, true, nil", match, rehash, err)
			}
			match, rehash, err = v.Verify(h, []byte("wrong"))
			if err != nil || match || !rehash {
				t.Errorf("Verify(wrong) = %v, %v, %v; want false, true, nil", match, rehash, err)
			}
		})
	}
}

// bcrypt uses the first 72 bytes of a password; the systems that wrote these
// hashes ignored the rest, so Verify does too, explicitly.
func TestVerifyBcryptTruncatesAt72(t *testing.T) {
	v := testVerifier(t)
	pw72 := bytes.Repeat([]byte("0123456789ab"), 6)
	gen, err := bcrypt.GenerateFromPassword(pw72, bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	h, err := v.Parse(string(gen))
	if err != nil {
		t.Fatal(err)
	}
	with := func(b ...byte) []byte { return append(pw72[:72:72], b...) }
	differ := bytes.Clone(pw72)
	differ[71] ^= 1
	for _, tt := range []struct {
		name string
		pw   []byte
		want bool
	}{
		{"exactly 72", pw72, true},
		{"73 bytes, same first 72", with('x'), true},
		{"4096 bytes, same first 72", with(bytes.Repeat([]byte("y"), 4096-72)...), true},
		{"71 bytes", pw72[:71], false},
		{"differs at byte 72", differ, false},
		{"differs at byte 72, long", append(differ, 'x'), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			match, _, err := v.Verify(h, tt.pw)
			if err != nil || match != tt.want {
				t.Errorf("Verify(%d bytes) = %v, %v; want %v, nil", len(tt.pw), match, err, tt.want)
			}
		})
	}
}

func TestNeedsRehash(t *testing.T) {
	v := newVerifier(t, Policy{Params: Params{Memory: 1024, Iterations: 3, Parallelism: 2}, SaltLen: 16, KeyLen: 32}, DefaultLimits())
	base := func(edit func(*Hash)) *Hash {
		h := &Hash{
			Algorithm: Argon2id, Version: 19,
			Params: Params{Memory: 1024, Iterations: 3, Parallelism: 2},
			Salt:   make([]byte, 16), Key: make([]byte, 32),
		}
		if edit != nil {
			edit(h)
		}
		return h
	}
	bc, err := v.Parse(phpBcrypt)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		h    *Hash
		want bool
	}{
		{"equal to policy", base(nil), false},
		{"more memory", base(func(h *Hash) { h.Params.Memory = 4096 }), false},
		{"more iterations", base(func(h *Hash) { h.Params.Iterations = 4 }), false},
		{"longer key", base(func(h *Hash) { h.Key = make([]byte, 64) }), false},
		{"longer salt", base(func(h *Hash) { h.Salt = make([]byte, 32) }), false},
		{"stronger everywhere", base(func(h *Hash) { h.Params = Params{Memory: 8192, Iterations: 5, Parallelism: 4} }), false},
		{"less parallelism", base(func(h *Hash) { h.Params.Parallelism = 1 }), false},
		{"more parallelism", base(func(h *Hash) { h.Params.Parallelism = 8 }), false},
		{"less memory", base(func(h *Hash) { h.Params.Memory = 1023 }), true},
		{"fewer iterations", base(func(h *Hash) { h.Params.Iterations = 2 }), true},
		{"argon2i", base(func(h *Hash) { h.Algorithm = Argon2i }), true},
		{"argon2i stronger", base(func(h *Hash) { h.Algorithm = Argon2i; h.Params.Memory = 8192 }), true},
		{"shorter key", base(func(h *Hash) { h.Key = make([]byte, 16) }), true},
		{"shorter salt", base(func(h *Hash) { h.Salt = make([]byte, 8) }), true},
		{"stronger memory, fewer iterations", base(func(h *Hash) { h.Params.Memory = 8192; h.Params.Iterations = 1 }), true},
		{"bcrypt", bc, true},
		{"nil", nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := v.NeedsRehash(tt.h); got != tt.want {
				t.Errorf("NeedsRehash = %v, want %v", got, tt.want)
			}
		})
	}
}

// A Hash built by hand must not get past the limits that Parse enforces.
func TestVerifyRejectsHashOutsideLimits(t *testing.T) {
	v := testVerifier(t)
	good := func(edit func(*Hash)) *Hash {
		h := &Hash{Algorithm: Argon2id, Version: 19, Params: Params{Memory: 64, Iterations: 1, Parallelism: 1}, Salt: make([]byte, 16), Key: make([]byte, 32)}
		edit(h)
		return h
	}
	for _, tt := range []struct {
		name string
		h    *Hash
		want string
	}{
		{"nil", nil, "nil hash"},
		{"zero", &Hash{}, "unsupported algorithm"},
		{"4 GiB", good(func(h *Hash) { h.Params.Memory = 4 << 20 }), "memory m=4194304 KiB exceeds limit 262144 KiB"},
		{"2^32-1 iterations", good(func(h *Hash) { h.Params.Iterations = 1<<32 - 1 }), "iterations t=4294967295 exceeds limit 8"},
		{"255 threads", good(func(h *Hash) { h.Params.Parallelism = 255 }), "parallelism p=255 exceeds limit 16"},
		{"t=0", good(func(h *Hash) { h.Params.Iterations = 0 }), "iterations t=0 is below minimum 1"},
		{"m < 8p", good(func(h *Hash) { h.Params.Parallelism = 16 }), "memory m=64 KiB is below minimum 8*p=128 KiB"},
		{"v=16", good(func(h *Hash) { h.Version = 16 }), "unsupported version v=16"},
		{"short key", good(func(h *Hash) { h.Key = h.Key[:4] }), "key: 4 bytes is below minimum 16"},
		{"no salt", good(func(h *Hash) { h.Salt = nil }), "salt: 0 bytes is below minimum 8"},
		{"policy hash", v.PolicyHash(), "salt: 0 bytes is below minimum 8"},
		{"bcrypt by hand", &Hash{Algorithm: Bcrypt, Cost: 4}, "without its encoding"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			match, _, err := v.Verify(tt.h, []byte("pw"))
			if match || !errors.Is(err, ErrInvalidHash) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Verify = %v, %v; want false and ErrInvalidHash containing %q", match, err, tt.want)
			}
		})
	}
}

func TestWorkAndMemoryBytes(t *testing.T) {
	v := newVerifier(t, DefaultPolicy(), DefaultLimits())
	bc, err := v.Parse(phpBcrypt)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		h         *Hash
		work      float64
		memory    int64
		algorithm string
	}{
		{"policy", v.PolicyHash(), 65536 * 3, 64 << 20, "argon2id"},
		{"argon2i", &Hash{Algorithm: Argon2i, Params: Params{Memory: 96, Iterations: 4, Parallelism: 3}}, 96 * 4, 96 << 10, "argon2i"},
		{"argon2 at limits", &Hash{Algorithm: Argon2id, Params: Params{Memory: 1<<32 - 1, Iterations: 1<<32 - 1}}, float64(1<<32-1) * float64(1<<32-1), (1<<32 - 1) << 10, "argon2id"},
		{"bcrypt cost 10", bc, 1024, 4 << 10, "bcrypt"},
		{"bcrypt cost 31", &Hash{Algorithm: Bcrypt, Cost: 31}, 1 << 31, 4 << 10, "bcrypt"},
		{"pbkdf2-sha256", &Hash{Algorithm: PBKDF2SHA256, Rounds: 29000}, 29000, 4 << 10, "pbkdf2-sha256"},
		{"pbkdf2-sha1", &Hash{Algorithm: PBKDF2SHA1, Rounds: 131000}, 131000, 4 << 10, "pbkdf2-sha1"},
		{"pbkdf2-sha512", &Hash{Algorithm: PBKDF2SHA512, Rounds: 25000}, 25000, 4 << 10, "pbkdf2-sha512"},
		{"scrypt passlib default", &Hash{Algorithm: Scrypt, Scrypt: ScryptParams{LogN: 16, R: 8, P: 1}}, 1 << 19, 128 * 8 * (1<<16 + 3), "scrypt"},
		{"scrypt p=5", &Hash{Algorithm: Scrypt, Scrypt: ScryptParams{LogN: 14, R: 8, P: 5}}, 5 << 17, 128 * 8 * (1<<14 + 7), "scrypt"},
		{"scrypt saturates", &Hash{Algorithm: Scrypt, Scrypt: ScryptParams{LogN: 63, R: 1 << 31, P: 1}}, math.Ldexp(1<<31, 63), math.MaxInt64, "scrypt"},
		{"sha256-crypt", &Hash{Algorithm: SHA256Crypt, Rounds: 5000}, 5000, 4 << 10, "sha256-crypt"},
		{"sha512-crypt", &Hash{Algorithm: SHA512Crypt, Rounds: 656000}, 656000, 4 << 10, "sha512-crypt"},
		{"unknown", &Hash{}, 0, 0, "unknown"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.h.Work(); got != tt.work {
				t.Errorf("Work() = %v, want %v", got, tt.work)
			}
			if got := tt.h.MemoryBytes(); got != tt.memory {
				t.Errorf("MemoryBytes() = %v, want %v", got, tt.memory)
			}
			if got := tt.h.Algorithm.String(); got != tt.algorithm {
				t.Errorf("Algorithm = %q, want %q", got, tt.algorithm)
			}
		})
	}
	if s := (&Hash{}).String(); s != "" {
		t.Errorf("zero Hash String() = %q, want empty", s)
	}
}

func TestDefaults(t *testing.T) {
	wantLimits := Limits{
		MaxEncodedLen: 512, MaxPasswordLen: 4096, MaxMemoryKiB: 262144, MaxIterations: 8, MaxParallelism: 16,
		MinSaltLen: 8, MaxSaltLen: 64, MinKeyLen: 16, MaxKeyLen: 128, MaxBcryptCost: 13,
		MaxPBKDF2Iterations: 1_300_000, MaxScryptLogN: 18, MaxScryptR: 32, MaxScryptP: 16, MaxScryptWork: 1 << 20,
		MaxShaCryptRounds: 700_000, MaxShaCryptPasswordLen: 256,
	}
	if diff := cmp.Diff(wantLimits, DefaultLimits()); diff != "" {
		t.Errorf("DefaultLimits (-want +got):\n%s", diff)
	}
	wantPolicy := Policy{Params: Params{Memory: 65536, Iterations: 3, Parallelism: 4}, SaltLen: 16, KeyLen: 32}
	if diff := cmp.Diff(wantPolicy, DefaultPolicy()); diff != "" {
		t.Errorf("DefaultPolicy (-want +got):\n%s", diff)
	}
	v, err := New(DefaultPolicy(), DefaultLimits())
	if err != nil {
		t.Fatalf("New(defaults): %v", err)
	}
	if diff := cmp.Diff(wantPolicy, v.Policy()); diff != "" {
		t.Errorf("Policy() (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantLimits, v.Limits()); diff != "" {
		t.Errorf("Limits() (-want +got):\n%s", diff)
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*Limits)
		want string
	}{
		{"MaxEncodedLen", func(l *Limits) { l.MaxEncodedLen = 0 }, "MaxEncodedLen 0 is below 1"},
		{"MaxPasswordLen", func(l *Limits) { l.MaxPasswordLen = -1 }, "MaxPasswordLen -1 is below 1"},
		{"MaxMemoryKiB", func(l *Limits) { l.MaxMemoryKiB = 7 }, "MaxMemoryKiB 7 is below 8"},
		{"MaxIterations", func(l *Limits) { l.MaxIterations = 0 }, "MaxIterations 0 is below 1"},
		{"MaxParallelism", func(l *Limits) { l.MaxParallelism = 0 }, "MaxParallelism 0 is below 1"},
		{"MinSaltLen", func(l *Limits) { l.MinSaltLen = 7 }, "MinSaltLen 7 is below 8"},
		{"MaxSaltLen", func(l *Limits) { l.MaxSaltLen = 7 }, "MaxSaltLen 7 is below MinSaltLen 8"},
		{"MinKeyLen", func(l *Limits) { l.MinKeyLen = 4 }, "MinKeyLen 4 is below 16"},
		{"MaxKeyLen", func(l *Limits) { l.MaxKeyLen = 15 }, "MaxKeyLen 15 is below MinKeyLen 16"},
		{"MaxBcryptCost low", func(l *Limits) { l.MaxBcryptCost = 3 }, "MaxBcryptCost 3 is outside 4..31"},
		{"MaxBcryptCost high", func(l *Limits) { l.MaxBcryptCost = 32 }, "MaxBcryptCost 32 is outside 4..31"},
		{"MaxPBKDF2Iterations", func(l *Limits) { l.MaxPBKDF2Iterations = 0 }, "MaxPBKDF2Iterations 0 is below 1"},
		{"MaxScryptLogN low", func(l *Limits) { l.MaxScryptLogN = 0 }, "MaxScryptLogN 0 is outside 1..40"},
		{"MaxScryptLogN high", func(l *Limits) { l.MaxScryptLogN = 41 }, "MaxScryptLogN 41 is outside 1..40"},
		{"MaxScryptR", func(l *Limits) { l.MaxScryptR = 1<<16 + 1 }, "MaxScryptR 65537 is outside 1..65536"},
		{"MaxScryptP", func(l *Limits) { l.MaxScryptP = 0 }, "MaxScryptP 0 is outside 1..4096"},
		{"MaxScryptWork", func(l *Limits) { l.MaxScryptWork = 1 }, "MaxScryptWork 1 is below 2"},
		{"MaxShaCryptRounds low", func(l *Limits) { l.MaxShaCryptRounds = 999 }, "MaxShaCryptRounds 999 is outside 1000..999999999"},
		{"MaxShaCryptRounds high", func(l *Limits) { l.MaxShaCryptRounds = 1e9 }, "MaxShaCryptRounds 1000000000 is outside 1000..999999999"},
		{"MaxShaCryptPasswordLen", func(l *Limits) { l.MaxShaCryptPasswordLen = 0 }, "MaxShaCryptPasswordLen 0 is below 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := DefaultLimits()
			tt.edit(&l)
			err := l.Validate()
			if !errors.Is(err, ErrInvalidLimits) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want ErrInvalidLimits containing %q", err, tt.want)
			}
			if _, err := New(DefaultPolicy(), l); !errors.Is(err, ErrInvalidLimits) {
				t.Errorf("New = %v, want ErrInvalidLimits", err)
			}
		})
	}
	if err := DefaultLimits().Validate(); err != nil {
		t.Errorf("DefaultLimits().Validate() = %v", err)
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*Policy, *Limits)
		want string
	}{
		{"parallelism 0", func(p *Policy, _ *Limits) { p.Params.Parallelism = 0 }, "Params.Parallelism 0 is below 1"},
		{"parallelism over limit", func(p *Policy, _ *Limits) { p.Params.Parallelism = 17 }, "Params.Parallelism 17 exceeds Limits.MaxParallelism 16"},
		{"iterations 0", func(p *Policy, _ *Limits) { p.Params.Iterations = 0 }, "Params.Iterations 0 is below 1"},
		{"iterations over limit", func(p *Policy, _ *Limits) { p.Params.Iterations = 17 }, "Params.Iterations 17 exceeds Limits.MaxIterations 8"},
		{"memory below 8p", func(p *Policy, _ *Limits) { p.Params.Memory = 31 }, "Params.Memory 31 KiB is below 8*Parallelism = 32 KiB"},
		{"memory over limit", func(p *Policy, _ *Limits) { p.Params.Memory = 1 << 20 }, "Params.Memory 1048576 KiB exceeds Limits.MaxMemoryKiB 262144"},
		{"salt short", func(p *Policy, _ *Limits) { p.SaltLen = 4 }, "SaltLen 4 is below Limits.MinSaltLen 8"},
		{"salt long", func(p *Policy, _ *Limits) { p.SaltLen = 65 }, "SaltLen 65 exceeds Limits.MaxSaltLen 64"},
		{"key short", func(p *Policy, _ *Limits) { p.KeyLen = 8 }, "KeyLen 8 is below Limits.MinKeyLen 16"},
		{"key long", func(p *Policy, _ *Limits) { p.KeyLen = 129 }, "KeyLen 129 exceeds Limits.MaxKeyLen 128"},
		{"encoding over limit", func(_ *Policy, l *Limits) { l.MaxEncodedLen = 96 }, "encoded hashes would be 97 bytes, over Limits.MaxEncodedLen 96"},
		{"invalid limits", func(_ *Policy, l *Limits) { l.MaxIterations = 0 }, "MaxIterations 0 is below 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, l := DefaultPolicy(), DefaultLimits()
			tt.edit(&p, &l)
			err := p.Validate(l)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v, want error containing %q", err, tt.want)
			}
			if !errors.Is(err, ErrInvalidPolicy) && !errors.Is(err, ErrInvalidLimits) {
				t.Errorf("Validate = %v, want ErrInvalidPolicy or ErrInvalidLimits", err)
			}
			if _, err := New(p, l); err == nil {
				t.Errorf("New accepted the policy")
			}
		})
	}
	l := DefaultLimits()
	l.MaxEncodedLen = 97
	if err := DefaultPolicy().Validate(l); err != nil {
		t.Errorf("Validate with exactly enough MaxEncodedLen = %v", err)
	}
}

// Run under -race: a Verifier is shared by concurrent requests.
func TestConcurrentUse(t *testing.T) {
	v := testVerifier(t)
	stored, err := v.HashPassword([]byte("shared"), nil)
	if err != nil {
		t.Fatal(err)
	}
	encoded := stored.String()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			h, err := v.Parse(encoded)
			if err != nil {
				errs <- err
				return
			}
			pw := []byte("shared")
			if i%2 == 1 {
				pw = []byte("other")
			}
			if match, _, err := v.Verify(h, pw); err != nil || match != (i%2 == 0) {
				errs <- errors.New("wrong verdict")
			}
			if _, err := v.HashPassword(pw, nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
