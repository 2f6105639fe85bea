package budgetd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	budgetv1 "github.com/leveehq/levee/gen/levee/budget/v1"
)

// DefaultConfigKey is the name under <Prefix>config/ whose settings apply to
// every key without its own.
const DefaultConfigKey = "_default"

// ParseSettings reads one key's settings as stored in etcd, e.g.
// {"ratio":0.1,"burst":100,"min_per_second":1}. Every field is required and
// no other is allowed (names are exact), so that a typo is an error rather
// than a zero.
func ParseSettings(data []byte) (Settings, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return Settings{}, jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Settings{}, errors.New("invalid JSON: data after the object")
	}
	var s Settings
	fields := []struct {
		name string
		v    *float64
	}{{"ratio", &s.Ratio}, {"burst", &s.Burst}, {"min_per_second", &s.MinPerSecond}}
	var missing []string
	for _, f := range fields {
		v, ok := raw[f.name]
		if !ok {
			missing = append(missing, f.name)
			continue
		}
		delete(raw, f.name)
		if err := json.Unmarshal(v, f.v); err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return Settings{}, fmt.Errorf("invalid JSON: %s must be a number, got %s", f.name, truncate(v, 32))
		}
	}
	if len(raw) > 0 {
		unknown := make([]string, 0, len(raw))
		for k := range raw {
			unknown = append(unknown, strconv.Quote(k))
		}
		sort.Strings(unknown)
		return Settings{}, fmt.Errorf("unknown field(s) %s (want ratio, burst, min_per_second)", strings.Join(unknown, ", "))
	}
	if len(missing) > 0 {
		return Settings{}, fmt.Errorf("missing field(s) %s", strings.Join(missing, ", "))
	}
	if err := s.Validate(); err != nil {
		return Settings{}, err
	}
	return s, nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// jsonError says what is wrong with a settings value in the terms of the
// value, not of the Go types that read it.
func jsonError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Errorf("invalid JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typ) && typ.Field == "":
		return fmt.Errorf("invalid JSON: want an object, got %s", typ.Value)
	case errors.As(err, &typ):
		return fmt.Errorf("invalid JSON: %s must be a number, got %s", typ.Field, typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("invalid JSON: truncated or empty")
	}
	return fmt.Errorf("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

func (s Settings) String() string {
	return fmt.Sprintf("ratio %g, burst %g, min_per_second %g", s.Ratio, s.Burst, s.MinPerSecond)
}

func (s Settings) proto() *budgetv1.Settings {
	return &budgetv1.Settings{Ratio: s.Ratio, Burst: s.Burst, MinPerSecond: s.MinPerSecond}
}

// settingsTable is the configuration as read from etcd: the last good
// settings of every configured key, the last good default, and the
// rejection of every value that is not good. It is not safe for concurrent
// use.
type settingsTable struct {
	prefix   string // <Prefix>config/, for messages
	defaults Settings
	explicit map[string]Settings
	etcdDef  *Settings
	rejected map[string]rejection // by name under config/
}

type rejection struct {
	msg string
	rev int64 // the etcd ModRevision of the rejected value
}

func newSettingsTable(prefix string, defaults Settings) settingsTable {
	return settingsTable{
		prefix:   prefix,
		defaults: defaults,
		explicit: map[string]Settings{},
		rejected: map[string]rejection{},
	}
}

// forKey returns the settings in force for key.
func (t *settingsTable) forKey(key string) Settings {
	if s, ok := t.explicit[key]; ok {
		return s
	}
	return t.fallback()
}

func (t *settingsTable) fallback() Settings {
	if t.etcdDef != nil {
		return *t.etcdDef
	}
	return t.defaults
}

// configured says whether key has its own settings.
func (t *settingsTable) configured(key string) bool {
	_, ok := t.explicit[key]
	return ok
}

// put applies the value of name (a budget key or DefaultConfigKey) at
// revision rev. It returns the rejection, if any, and whether it is news
// (not the same value rejected again, as after a re-read).
func (t *settingsTable) put(name string, value []byte, rev int64) (rejected error, news bool) {
	err := ValidateName(name)
	if name == DefaultConfigKey {
		err = nil
	}
	var s Settings
	if err == nil {
		s, err = ParseSettings(value)
	} else {
		err = fmt.Errorf("not a budget key: %w", err)
	}
	if err == nil {
		delete(t.rejected, name)
		if name == DefaultConfigKey {
			t.etcdDef = &s
		} else {
			t.explicit[name] = s
		}
		return nil, false
	}
	var keeping string
	switch {
	case name == DefaultConfigKey && t.etcdDef != nil:
		keeping = "keeping the last good default (" + t.etcdDef.String() + ")"
	case name == DefaultConfigKey:
		keeping = "keeping the built-in default (" + t.defaults.String() + ")"
	case t.configured(name):
		keeping = "keeping the last good settings (" + t.explicit[name].String() + ")"
	default:
		keeping = "the default applies"
	}
	err = fmt.Errorf("%s%s: %w; %s", t.prefix, name, err, keeping)
	old, seen := t.rejected[name]
	t.rejected[name] = rejection{msg: err.Error(), rev: rev}
	return err, !seen || old.rev != rev
}

// del forgets name: its key falls back to the default.
func (t *settingsTable) del(name string) {
	delete(t.rejected, name)
	if name == DefaultConfigKey {
		t.etcdDef = nil
	} else {
		delete(t.explicit, name)
	}
}

// names returns every name the table holds anything for.
func (t *settingsTable) names() map[string]bool {
	n := map[string]bool{}
	for k := range t.explicit {
		n[k] = true
	}
	for k := range t.rejected {
		n[k] = true
	}
	if t.etcdDef != nil {
		n[DefaultConfigKey] = true
	}
	return n
}

// errors returns the current rejections, sorted.
func (t *settingsTable) errors() []string {
	out := make([]string, 0, len(t.rejected))
	for _, r := range t.rejected {
		out = append(out, r.msg)
	}
	sort.Strings(out)
	return out
}

// keys returns the configured keys, sorted.
func (t *settingsTable) keys() []string {
	out := make([]string, 0, len(t.explicit))
	for k := range t.explicit {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
