package verify

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// Pepper bounds. A key id is written into every hash it peppers, so it is
// short and printable; a key shorter than 16 bytes is guessable, and HMAC
// hashes a key longer than its 64-byte block down to 32 bytes, so a longer
// one adds nothing.
const (
	MaxPepperIDLen  = 32
	MinPepperKeyLen = 16
	MaxPepperKeyLen = 64
)

var (
	// ErrUnknownPepper is matched by Verify's error for a hash whose keyid
	// names a pepper key the Verifier does not hold (or when it holds none).
	// The hash is well formed; the server lacks the key to check it, so this
	// is a configuration problem, not a bad request. The message names the
	// key id, never key material.
	ErrUnknownPepper = errors.New("unknown pepper key")
	// ErrInvalidPepper is matched by every error from NewPeppers,
	// Pepper.Validate and Peppers.Validate. The messages name key ids and
	// lengths, never key material.
	ErrInvalidPepper = errors.New("invalid pepper")
)

// Pepper is one server-side secret key and the id written into the hashes it
// peppers. Its Key is never printed: every fmt verb, slog and encoding/json
// write the id and the key's length only.
type Pepper struct {
	ID  string
	Key []byte
}

// Validate checks the id (1 to MaxPepperIDLen characters of A-Z, a-z, 0-9,
// '_' and '-') and the key's length (MinPepperKeyLen to MaxPepperKeyLen
// bytes). The error wraps ErrInvalidPepper.
func (p Pepper) Validate() error {
	if err := checkPepperID(p.ID); err != nil {
		return err
	}
	switch n := len(p.Key); {
	case n < MinPepperKeyLen:
		return fmt.Errorf("%w: key %q is %d bytes, want at least %d", ErrInvalidPepper, p.ID, n, MinPepperKeyLen)
	case n > MaxPepperKeyLen:
		return fmt.Errorf("%w: key %q is %d bytes, want at most %d", ErrInvalidPepper, p.ID, n, MaxPepperKeyLen)
	}
	return nil
}

// String returns the id and the key's length, never the key.
func (p Pepper) String() string { return fmt.Sprintf("pepper %q (%d-byte key)", p.ID, len(p.Key)) }

// Format makes every verb (%v, %+v, %#v, %s, %x, ...) print String, so that
// a Pepper logged by mistake leaks no key material.
func (p Pepper) Format(f fmt.State, _ rune) { fmt.Fprint(f, p.String()) }

// LogValue logs the id and the key's length.
func (p Pepper) LogValue() slog.Value {
	return slog.GroupValue(slog.String("id", p.ID), slog.Int("key_bytes", len(p.Key)))
}

// MarshalText writes String, so that encoding/json cannot reach the key.
func (p Pepper) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// checkPepperID validates a key id's form. The id is quoted in the message
// only when it is short and printable.
func checkPepperID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: empty key id", ErrInvalidPepper)
	}
	if len(id) > MaxPepperIDLen {
		return fmt.Errorf("%w: key id of %d bytes, want at most %d", ErrInvalidPepper, len(id), MaxPepperIDLen)
	}
	if !validPepperID(id) {
		return fmt.Errorf("%w: key id %q: want only A-Z, a-z, 0-9, '_' and '-'", ErrInvalidPepper, id)
	}
	return nil
}

// ValidPepperID reports whether id is a key id: 1 to MaxPepperIDLen
// characters of A-Z, a-z, 0-9, '_' and '-'.
func ValidPepperID(id string) bool { return validPepperID(id) }

// validPepperID is ValidPepperID for either form, so that Parse can check
// decoded bytes without converting them.
func validPepperID[S string | []byte](id S) bool {
	if len(id) == 0 || len(id) > MaxPepperIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Peppers is a set of pepper keys and the current one, the key new hashes
// are peppered with. The zero value holds no key: nothing is peppered, and
// a hash with a keyid fails to verify with ErrUnknownPepper. Build one with
// NewPeppers. A Peppers is immutable; its keys are copies, and no fmt verb,
// slog attribute or JSON encoding of it shows key material, only ids.
//
// Pepper keys mix a secret the database does not hold into every hash: the
// Argon2 password input is HMAC-SHA256(key, password) instead of the
// password, and the PHC string records which key in its keyid parameter
// ($argon2id$v=19$m=65536,t=3,p=4,keyid=<base64 of the id>$<salt>$<key>).
// Rotation: load the new key beside the old ones and make it current; hashes
// under an old key still verify, and report needs_rehash until the caller
// stores the fresh hash. An old key can be dropped once no stored hash names
// it.
type Peppers struct {
	current string
	keys    map[string][]byte
}

// NewPeppers returns the set of keys with current, which must be one of
// them, as the key new hashes use. No keys and an empty current give the
// zero Peppers (no pepper). Every key is checked with Pepper.Validate; a
// duplicate id is an error. Every error wraps ErrInvalidPepper and names ids,
// never key material.
func NewPeppers(current string, keys ...Pepper) (Peppers, error) {
	if len(keys) == 0 {
		if current != "" {
			return Peppers{}, fmt.Errorf("%w: current key %q is not among the keys (there are none)", ErrInvalidPepper, current)
		}
		return Peppers{}, nil
	}
	m := make(map[string][]byte, len(keys))
	for _, k := range keys {
		if err := k.Validate(); err != nil {
			return Peppers{}, err
		}
		if _, dup := m[k.ID]; dup {
			return Peppers{}, fmt.Errorf("%w: duplicate key id %q", ErrInvalidPepper, k.ID)
		}
		m[k.ID] = slices.Clone(k.Key)
	}
	if current == "" {
		return Peppers{}, fmt.Errorf("%w: no current key: name the key new hashes use", ErrInvalidPepper)
	}
	if _, ok := m[current]; !ok {
		return Peppers{}, fmt.Errorf("%w: current key %q is not among the keys", ErrInvalidPepper, current)
	}
	return Peppers{current: current, keys: m}, nil
}

// Validate re-checks what NewPeppers established; the zero Peppers is valid.
func (p Peppers) Validate() error {
	if len(p.keys) == 0 && p.current == "" {
		return nil
	}
	if _, ok := p.keys[p.current]; !ok {
		return fmt.Errorf("%w: current key %q is not among the keys", ErrInvalidPepper, p.current)
	}
	for id, key := range p.keys {
		if err := (Pepper{ID: id, Key: key}).Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Current returns the id of the key new hashes use, "" for no pepper.
func (p Peppers) Current() string { return p.current }

// IDs returns the ids of every key, sorted.
func (p Peppers) IDs() []string {
	ids := make([]string, 0, len(p.keys))
	for id := range p.keys {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Len returns the number of keys.
func (p Peppers) Len() int { return len(p.keys) }

// String returns the current id and every id, never key material:
// "peppers(current=2025-06; ids=2024-01,2025-06)", or "peppers(none)".
func (p Peppers) String() string {
	if len(p.keys) == 0 {
		return "peppers(none)"
	}
	return "peppers(current=" + p.current + "; ids=" + strings.Join(p.IDs(), ",") + ")"
}

// Format makes every verb print String.
func (p Peppers) Format(f fmt.State, _ rune) { fmt.Fprint(f, p.String()) }

// LogValue logs the current id, the ids and their count.
func (p Peppers) LogValue() slog.Value {
	return slog.GroupValue(slog.String("current", p.current), slog.Any("ids", p.IDs()), slog.Int("count", len(p.keys)))
}

// MarshalText writes String, so that encoding/json and friends cannot reach
// the keys either.
func (p Peppers) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// CheckPepper returns the error Verify would for h's pepper: one wrapping
// ErrUnknownPepper when h has a KeyID v holds no key for, else nil. It does
// not hash, so that a server can refuse such a hash before queueing it.
func (v *Verifier) CheckPepper(h *Hash) error {
	if h == nil || h.KeyID == "" {
		return nil
	}
	_, err := v.peppers.peppered(h.KeyID, nil)
	return err
}

// peppered returns Argon2's password input for a hash under key id: the
// password itself when id is empty, else HMAC-SHA256(key, password).
func (p Peppers) peppered(id string, password []byte) ([]byte, error) {
	if id == "" {
		return password, nil
	}
	key, ok := p.keys[id]
	switch {
	case ok:
		m := hmac.New(sha256.New, key)
		m.Write(password)
		return m.Sum(nil), nil
	case len(p.keys) == 0:
		return nil, fmt.Errorf("verify: %w: pepper key id %q not loaded (no pepper is configured)", ErrUnknownPepper, id)
	default:
		return nil, fmt.Errorf("verify: %w: pepper key id %q not loaded", ErrUnknownPepper, id)
	}
}
