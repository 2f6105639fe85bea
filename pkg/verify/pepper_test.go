package verify

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/argon2"
)

// pepperKey returns a 32-byte key of a pattern seeded by seed.
func pepperKey(seed byte) []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = seed + byte(i*13)
	}
	return k
}

var (
	keyA  = pepperKey(1)
	keyA2 = pepperKey(2) // another key under id "a"
	keyB  = pepperKey(3)
)

func newPeppers(t testing.TB, current string, keys ...Pepper) Peppers {
	t.Helper()
	p, err := NewPeppers(current, keys...)
	if err != nil {
		t.Fatalf("NewPeppers: %v", err)
	}
	return p
}

func pepperedVerifier(t testing.TB, current string, keys ...Pepper) *Verifier {
	t.Helper()
	v, err := NewWithPeppers(testPolicy(), DefaultLimits(), newPeppers(t, current, keys...))
	if err != nil {
		t.Fatalf("NewWithPeppers: %v", err)
	}
	return v
}

// keyidParam is the PHC keyid parameter for id.
func keyidParam(id string) string {
	return "keyid=" + base64.RawStdEncoding.EncodeToString([]byte(id))
}

// leaks reports whether s shows key in any common rendering.
func leaks(s string, key []byte) bool {
	for _, form := range []string{
		string(key), hex.EncodeToString(key), fmt.Sprint(key), fmt.Sprintf("%q", key),
		base64.StdEncoding.EncodeToString(key), base64.RawStdEncoding.EncodeToString(key),
		base64.URLEncoding.EncodeToString(key), base64.RawURLEncoding.EncodeToString(key),
	} {
		if strings.Contains(s, form) {
			return true
		}
	}
	return false
}

func TestPepperHashVerify(t *testing.T) {
	v := pepperedVerifier(t, "a", Pepper{ID: "a", Key: keyA})
	pw := []byte("correct horse")
	h, err := v.HashPassword(pw, nil)
	if err != nil {
		t.Fatalf("HashPassword: %v", err)
	}
	if h.KeyID != "a" {
		t.Errorf("KeyID = %q, want %q", h.KeyID, "a")
	}
	enc := h.String()
	if want := "$argon2id$v=19$m=64,t=2,p=2," + keyidParam("a") + "$"; !strings.HasPrefix(enc, want) {
		t.Errorf("String() = %q, want prefix %q", enc, want)
	}
	parsed, err := v.Parse(enc)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if diff := cmp.Diff(h, parsed, cmp.AllowUnexported(Hash{})); diff != "" {
		t.Errorf("Parse(h.String()) (-want +got):\n%s", diff)
	}
	match, rehash, err := v.Verify(parsed, pw)
	if err != nil || !match || rehash {
		t.Errorf("Verify(right password) = %v, %v, %v; want true, false, nil", match, rehash, err)
	}
	match, rehash, err = v.Verify(parsed, []byte("wrong horse"))
	if err != nil || match || rehash {
		t.Errorf("Verify(wrong password) = %v, %v, %v; want false, false, nil", match, rehash, err)
	}

	// The pepper is what the hash depends on: the same id with another key
	// is a clean mismatch (there is no way to tell a wrong key from a wrong
	// password), not an error.
	other := pepperedVerifier(t, "a", Pepper{ID: "a", Key: keyA2})
	match, rehash, err = other.Verify(parsed, pw)
	if err != nil || match || rehash {
		t.Errorf("Verify under another key with the same id = %v, %v, %v; want false, false, nil", match, rehash, err)
	}
}

// TestPepperConstruction pins the construction down, since no reference
// tool can check it: Argon2id over HMAC-SHA256(key, password), the rest of
// the hash as without pepper.
func TestPepperConstruction(t *testing.T) {
	v := pepperedVerifier(t, "k1", Pepper{ID: "k1", Key: keyA})
	pw := []byte("pässword")
	h, err := v.HashPassword(pw, nil)
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, keyA)
	mac.Write(pw)
	p := testPolicy().Params
	want := argon2.IDKey(mac.Sum(nil), h.Salt, p.Iterations, p.Memory, p.Parallelism, uint32(testPolicy().KeyLen))
	if !bytes.Equal(h.Key, want) {
		t.Errorf("key = %x, want Argon2id(HMAC-SHA256(key, password)) = %x", h.Key, want)
	}
	if bytes.Equal(h.Key, argon2.IDKey(pw, h.Salt, p.Iterations, p.Memory, p.Parallelism, uint32(testPolicy().KeyLen))) {
		t.Error("peppered key equals the unpeppered one")
	}
}

func TestPepperRotation(t *testing.T) {
	pa, pb := Pepper{ID: "a", Key: keyA}, Pepper{ID: "b", Key: keyB}
	before := pepperedVerifier(t, "a", pa)
	pw := []byte("pw")
	old, err := before.HashPassword(pw, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := testVerifier(t).HashPassword(pw, nil)
	if err != nil {
		t.Fatal(err)
	}

	after := pepperedVerifier(t, "b", pa, pb) // b current, a still loaded
	match, rehash, err := after.Verify(old, pw)
	if err != nil || !match || !rehash {
		t.Errorf("Verify(hash under old key a) = %v, %v, %v; want true, true, nil", match, rehash, err)
	}
	fresh, err := after.HashPassword(pw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fresh.KeyID != "b" {
		t.Errorf("new hash KeyID = %q, want the current %q", fresh.KeyID, "b")
	}
	match, rehash, err = after.Verify(fresh, pw)
	if err != nil || !match || rehash {
		t.Errorf("Verify(hash under current key b) = %v, %v, %v; want true, false, nil", match, rehash, err)
	}
	// A hash from before any pepper verifies with the password alone and
	// needs a rehash, to pick up the pepper.
	match, rehash, err = after.Verify(plain, pw)
	if err != nil || !match || !rehash {
		t.Errorf("Verify(unpeppered hash) = %v, %v, %v; want true, true, nil", match, rehash, err)
	}
	// The reverse: a verifier without pepper is the one it always was.
	match, rehash, err = testVerifier(t).Verify(plain, pw)
	if err != nil || !match || rehash {
		t.Errorf("unpeppered Verify(unpeppered hash) = %v, %v, %v; want true, false, nil", match, rehash, err)
	}
}

func TestPepperNeedsRehash(t *testing.T) {
	h := func(id string) *Hash {
		return &Hash{Algorithm: Argon2id, Version: 19, Params: testPolicy().Params, Salt: make([]byte, 16), Key: make([]byte, 32), KeyID: id}
	}
	none := testVerifier(t)
	rotated := pepperedVerifier(t, "b", Pepper{ID: "a", Key: keyA}, Pepper{ID: "b", Key: keyB})
	for _, tt := range []struct {
		name string
		v    *Verifier
		id   string
		want bool
	}{
		{"no pepper, unpeppered", none, "", false},
		{"no pepper, keyid", none, "a", true},
		{"current", rotated, "b", false},
		{"old key", rotated, "a", true},
		{"not loaded", rotated, "zz", true},
		{"unpeppered under a pepper", rotated, "", true},
	} {
		if got := tt.v.NeedsRehash(h(tt.id)); got != tt.want {
			t.Errorf("%s: NeedsRehash(keyid %q) = %v, want %v", tt.name, tt.id, got, tt.want)
		}
	}
}

func TestPepperUnknownKeyID(t *testing.T) {
	src := pepperedVerifier(t, "gone", Pepper{ID: "gone", Key: keyA})
	h, err := src.HashPassword([]byte("pw"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		v    *Verifier
		want string
	}{
		{"no pepper configured", testVerifier(t), `pepper key id "gone" not loaded (no pepper is configured)`},
		{"other keys", pepperedVerifier(t, "b", Pepper{ID: "b", Key: keyB}), `pepper key id "gone" not loaded`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Parse does not depend on the keys: the gateway parses without any.
			parsed, err := tt.v.Parse(h.String())
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			match, rehash, err := tt.v.Verify(parsed, []byte("pw"))
			if !errors.Is(err, ErrUnknownPepper) || errors.Is(err, ErrInvalidHash) {
				t.Fatalf("Verify error = %v, want ErrUnknownPepper and not ErrInvalidHash", err)
			}
			if match || !rehash {
				t.Errorf("Verify = %v, %v; want false, true", match, rehash)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q, want it to contain %q", err, tt.want)
			}
			if leaks(err.Error(), keyA) || leaks(err.Error(), keyB) {
				t.Errorf("error %q shows key material", err)
			}
		})
	}
}

func TestPepperParse(t *testing.T) {
	v := testVerifier(t)
	salt, key := enc(16), enc(32)
	long := strings.Repeat("Z", MaxPepperIDLen)
	for _, tt := range []struct {
		name, params, wantID, canonical string
	}{
		{"after p", "m=65536,t=3,p=4," + keyidParam("a"), "a", ""},
		{"date id", "m=65536,t=3,p=4," + keyidParam("2025-06"), "2025-06", ""},
		{"longest id", "m=65536,t=3,p=4," + keyidParam(long), long, ""},
		{"every character class", "m=65536,t=3,p=4," + keyidParam("Az09_-"), "Az09_-", ""},
		{"keyid first", keyidParam("k1") + ",m=65536,t=3,p=4", "k1", "m=65536,t=3,p=4," + keyidParam("k1")},
		{"keyid between", "m=65536," + keyidParam("k1") + ",t=3,p=4", "k1", "m=65536,t=3,p=4," + keyidParam("k1")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := argon2Hash("argon2id", tt.params, salt, key)
			h, err := v.Parse(in)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if h.KeyID != tt.wantID {
				t.Errorf("KeyID = %q, want %q", h.KeyID, tt.wantID)
			}
			want := in
			if tt.canonical != "" {
				want = argon2Hash("argon2id", tt.canonical, salt, key)
			}
			if got := h.String(); got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
			again, err := v.Parse(h.String())
			if err != nil {
				t.Fatalf("Parse(String()): %v", err)
			}
			if diff := cmp.Diff(h, again, cmp.AllowUnexported(Hash{})); diff != "" {
				t.Errorf("Parse(String()) (-first +second):\n%s", diff)
			}
		})
	}
	// argon2i carries a keyid too (and always needs a rehash).
	h, err := v.Parse(argon2Hash("argon2i", "m=64,t=1,p=1,"+keyidParam("a"), salt, key))
	if err != nil || h.KeyID != "a" {
		t.Errorf("Parse(argon2i with keyid) = %+v, %v; want KeyID a", h, err)
	}
}

// pepperHostileTests are keyid forms Parse rejects (run by TestParseRejects).
func pepperHostileTests() []struct{ name, in, want string } {
	salt, key := enc(16), enc(32)
	a := func(params string) string { return argon2Hash("argon2id", params, salt, key) }
	const p = "m=65536,t=3,p=4,"
	b := func(s string) string { return base64.RawStdEncoding.EncodeToString([]byte(s)) }
	return []struct{ name, in, want string }{
		{"keyid too long", a(p + keyidParam(strings.Repeat("a", MaxPepperIDLen+1))), "keyid: 33 bytes exceeds limit 32"},
		{"keyid far too long", a(p + "keyid=" + strings.Repeat("A", 400)), "keyid: 300 bytes exceeds limit 32"},
		{"keyid empty", a(p + "keyid="), "keyid: 0 bytes is below minimum 1"},
		{"keyid padded", a(p + "keyid=YQ=="), "keyid: illegal base64 (padding not allowed)"},
		{"keyid url alphabet", a(p + "keyid=a-b_"), "keyid: illegal base64 character at offset 1"},
		{"keyid bad character", a(p + "keyid=YQ!"), "keyid: illegal base64 character at offset 2"},
		{"keyid impossible length", a(p + "keyid=YWJjZ"), "keyid: illegal base64 (impossible length 5)"},
		{"keyid non-canonical", a(p + "keyid=YR"), "keyid: illegal base64 (non-canonical trailing bits)"},
		{"keyid space", a(p + "keyid=" + b("a b")), "keyid: not a key id"},
		{"keyid dot", a(p + "keyid=" + b("a.b")), "keyid: not a key id"},
		{"keyid NUL", a(p + "keyid=" + b("a\x00")), "keyid: not a key id"},
		{"keyid dollar", a(p + "keyid=" + b("$")), "keyid: not a key id"},
		{"keyid UTF-8", a(p + "keyid=" + b("clé")), "keyid: not a key id"},
		{"duplicate keyid", a(p + keyidParam("a") + "," + keyidParam("a")), `duplicate parameter "keyid"`},
		{"duplicate keyid, second bad", a(p + keyidParam("a") + ",keyid=!"), `duplicate parameter "keyid"`},
		{"keyid without value", a(p + "keyid"), `malformed parameter "keyid"`},
		{"keyid and data", a(p + keyidParam("a") + ",data=AAAA"), `parameter "data" is not supported`},
		{"keyid missing m", a("t=3,p=4," + keyidParam("a")), `missing parameter "m"`},
	}
}

func pepperHostileAllocTests() []struct{ name, in string } {
	salt, key := enc(16), enc(32)
	return []struct{ name, in string }{
		{"keyid 300 bytes", argon2Hash("argon2id", "m=65536,t=3,p=4,keyid="+strings.Repeat("A", 400), salt, key)},
		{"keyid 33 bytes", argon2Hash("argon2id", "m=65536,t=3,p=4,"+keyidParam(strings.Repeat("a", 33)), salt, key)},
	}
}

func TestNewPeppersRejects(t *testing.T) {
	short := pepperKey(9)[:MinPepperKeyLen-1]
	long := bytes.Repeat(keyB, 3)[:MaxPepperKeyLen+1]
	for _, tt := range []struct {
		name    string
		current string
		keys    []Pepper
		want    string
	}{
		{"empty id", "", []Pepper{{ID: "", Key: keyA}}, "empty key id"},
		{"long id", "a", []Pepper{{ID: strings.Repeat("a", 33), Key: keyA}}, "key id of 33 bytes, want at most 32"},
		{"id with colon", "a:b", []Pepper{{ID: "a:b", Key: keyA}}, `key id "a:b": want only`},
		{"id with space", "a", []Pepper{{ID: "a b", Key: keyA}}, `key id "a b": want only`},
		{"short key", "a", []Pepper{{ID: "a", Key: short}}, `key "a" is 15 bytes, want at least 16`},
		{"long key", "a", []Pepper{{ID: "a", Key: long}}, `key "a" is 65 bytes, want at most 64`},
		{"duplicate id", "a", []Pepper{{ID: "a", Key: keyA}, {ID: "a", Key: keyA2}}, `duplicate key id "a"`},
		{"no current", "", []Pepper{{ID: "a", Key: keyA}}, "no current key"},
		{"current not loaded", "b", []Pepper{{ID: "a", Key: keyA}}, `current key "b" is not among the keys`},
		{"current without keys", "a", nil, `current key "a" is not among the keys (there are none)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPeppers(tt.current, tt.keys...)
			if !errors.Is(err, ErrInvalidPepper) {
				t.Fatalf("NewPeppers = %v, %v; want ErrInvalidPepper", p, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q, want it to contain %q", err, tt.want)
			}
			for _, k := range tt.keys {
				if leaks(err.Error(), k.Key) {
					t.Errorf("error %q shows key material", err)
				}
			}
		})
	}
	if p, err := NewPeppers(""); err != nil || p.Len() != 0 || p.Current() != "" {
		t.Errorf("NewPeppers() = %v, %v; want the zero Peppers", p, err)
	}
}

func TestPeppersKeepCopies(t *testing.T) {
	k := bytes.Clone(keyA)
	v := pepperedVerifier(t, "a", Pepper{ID: "a", Key: k})
	h, err := v.HashPassword([]byte("pw"), nil)
	if err != nil {
		t.Fatal(err)
	}
	clear(k) // the caller wipes its buffer
	if match, _, err := v.Verify(h, []byte("pw")); err != nil || !match {
		t.Errorf("Verify after the caller cleared its key = %v, %v; want true, nil", match, err)
	}
}

// TestPeppersNeverPrinted: every way a Peppers or a Pepper might end up in
// a log shows ids only.
func TestPeppersNeverPrinted(t *testing.T) {
	pa, pb := Pepper{ID: "a", Key: keyA}, Pepper{ID: "b", Key: keyB}
	p := newPeppers(t, "b", pa, pb)
	cfg := struct {
		Name    string
		Peppers Peppers
		Pepper  Pepper
	}{"x", p, pa}
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		out = append(out, fmt.Sprintf(verb, p), fmt.Sprintf(verb, pa), fmt.Sprintf(verb, cfg), fmt.Sprintf(verb, &cfg))
	}
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("cfg", "peppers", p, "pepper", pa, "cfg", cfg)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("cfg", "peppers", p, "pepper", pa, "cfg", cfg)
	out = append(out, logs.String())
	j, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, string(j))
	for _, s := range out {
		if leaks(s, keyA) || leaks(s, keyB) {
			t.Errorf("%q shows key material", s)
		}
	}
	if got, want := p.String(), "peppers(current=b; ids=a,b)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if !strings.Contains(logs.String(), "peppers.current=b") || !strings.Contains(logs.String(), `"count":2`) {
		t.Errorf("logs %q lack the current id and the count", logs.String())
	}
	if got := (Peppers{}).String(); got != "peppers(none)" {
		t.Errorf("zero String() = %q", got)
	}
}

func TestNewWithPeppersEncodedLen(t *testing.T) {
	l := DefaultLimits()
	pol := testPolicy()
	plain := Hash{Algorithm: Argon2id, Version: 19, Params: pol.Params, Salt: make([]byte, pol.SaltLen), Key: make([]byte, pol.KeyLen)}
	l.MaxEncodedLen = len(plain.String()) // fits without keyid, not with one
	if _, err := New(pol, l); err != nil {
		t.Fatalf("New: %v", err)
	}
	_, err := NewWithPeppers(pol, l, newPeppers(t, "a", Pepper{ID: "a", Key: keyA}))
	if !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "MaxEncodedLen") {
		t.Errorf("NewWithPeppers = %v, want ErrInvalidPolicy naming MaxEncodedLen", err)
	}
}

func TestPepperCheckHash(t *testing.T) {
	v := pepperedVerifier(t, "a", Pepper{ID: "a", Key: keyA})
	good, err := v.HashPassword([]byte("pw"), nil)
	if err != nil {
		t.Fatal(err)
	}
	badID := *good
	badID.KeyID = "a b"
	bc, err := v.Parse(phpBcrypt)
	if err != nil {
		t.Fatal(err)
	}
	bc.KeyID = "a"
	for name, h := range map[string]*Hash{"bad id": &badID, "bcrypt with keyid": bc} {
		if _, _, err := v.Verify(h, []byte("pw")); !errors.Is(err, ErrInvalidHash) {
			t.Errorf("%s: Verify error = %v, want ErrInvalidHash", name, err)
		}
	}
}

func TestCheckPepper(t *testing.T) {
	v := pepperedVerifier(t, "a", Pepper{ID: "a", Key: keyA})
	for _, tt := range []struct {
		id   string
		want error
	}{{"", nil}, {"a", nil}, {"b", ErrUnknownPepper}} {
		h := &Hash{Algorithm: Argon2id, KeyID: tt.id}
		if err := v.CheckPepper(h); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("CheckPepper(keyid %q) = %v, want %v", tt.id, err, tt.want)
		}
	}
	if err := testVerifier(t).CheckPepper(&Hash{Algorithm: Argon2id, KeyID: "a"}); !errors.Is(err, ErrUnknownPepper) {
		t.Errorf("CheckPepper without peppers = %v, want ErrUnknownPepper", err)
	}
}
