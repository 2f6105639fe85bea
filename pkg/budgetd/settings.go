package budgetd

import (
	"fmt"
	"sort"

	"github.com/leveehq/levee/pkg/ledger"
)

// DefaultConfigKey is the name under <Prefix>config/ whose settings apply to
// every key without its own.
const DefaultConfigKey = "_default"

// settingsTable is the configuration as read from etcd: the last good
// settings of every configured key, the last good default, and the
// rejection of every value that is not good. It is not safe for concurrent
// use.
type settingsTable struct {
	prefix   string // <Prefix>config/, for messages
	defaults ledger.Settings
	explicit map[string]ledger.Settings
	etcdDef  *ledger.Settings
	rejected map[string]rejection // by name under config/
}

type rejection struct {
	msg string
	rev int64 // the etcd ModRevision of the rejected value
}

func newSettingsTable(prefix string, defaults ledger.Settings) settingsTable {
	return settingsTable{
		prefix:   prefix,
		defaults: defaults,
		explicit: map[string]ledger.Settings{},
		rejected: map[string]rejection{},
	}
}

// forKey returns the settings in force for key.
func (t *settingsTable) forKey(key string) ledger.Settings {
	if s, ok := t.explicit[key]; ok {
		return s
	}
	return t.fallback()
}

func (t *settingsTable) fallback() ledger.Settings {
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
	err := ledger.ValidateName(name)
	if name == DefaultConfigKey {
		err = nil
	}
	var s ledger.Settings
	if err == nil {
		s, err = ledger.ParseSettings(value)
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
