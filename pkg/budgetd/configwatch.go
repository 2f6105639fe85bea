package budgetd

import (
	"context"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leveehq/levee/internal/etcdwatch"
	"github.com/leveehq/levee/pkg/ledger"
)

// configPrefix is where settings live: <Prefix>config/<key>.
func (s *Server) configPrefix() string { return s.cfg.Prefix + "config/" }

// watchConfig keeps the settings table equal to etcd (etcdwatch.Follow: a
// full read, then a watch from the revision after it, a full read again after
// any watch error). Changes apply to the ledgers at once.
func (s *Server) watchConfig(ctx context.Context, cli *clientv3.Client) {
	etcdwatch.Follow(ctx, cli, s.configPrefix(), true, configHandler{s}, s.log, "the budget configuration", s.cfg.RefreshInterval)
}

// configHandler applies what etcdwatch.Follow reads.
type configHandler struct{ s *Server }

func (h configHandler) Snapshot(kvs []*mvccpb.KeyValue) { h.s.applyConfigSnapshot(kvs) }
func (h configHandler) Events(evs []*clientv3.Event)    { h.s.applyConfigEvents(evs) }

func (s *Server) applyConfigSnapshot(kvs []*mvccpb.KeyValue) {
	pfx := s.configPrefix()
	s.mu.Lock()
	defer s.mu.Unlock()
	present := map[string]bool{}
	for _, kv := range kvs {
		name := strings.TrimPrefix(string(kv.Key), pfx)
		present[name] = true
		s.putConfigLocked(name, kv.Value, kv.ModRevision)
	}
	for name := range s.settings.names() {
		if !present[name] {
			s.settings.del(name)
		}
	}
	s.reconcileLocked()
}

func (s *Server) applyConfigEvents(events []*clientv3.Event) {
	if len(events) == 0 {
		return
	}
	pfx := s.configPrefix()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range events {
		name := strings.TrimPrefix(string(ev.Kv.Key), pfx)
		switch ev.Type {
		case mvccpb.Event_PUT:
			s.putConfigLocked(name, ev.Kv.Value, ev.Kv.ModRevision)
		case mvccpb.Event_DELETE:
			s.settings.del(name)
			s.log.Info("budget configuration removed; the default applies", "key", name)
		}
	}
	s.reconcileLocked()
}

func (s *Server) putConfigLocked(name string, value []byte, rev int64) {
	before, had := s.settings.explicit[name]
	err, news := s.settings.put(name, value, rev)
	switch {
	case err != nil && news:
		s.metrics.configErrors.Inc()
		s.log.Error("budget configuration rejected", "err", err)
	case err == nil && (!had || before != s.settings.explicit[name]) && name != DefaultConfigKey:
		s.log.Info("budget configuration applied", "key", name, "settings", s.settings.explicit[name].String())
	case err == nil && name == DefaultConfigKey:
		s.log.Info("budget default configuration applied", "settings", s.settings.fallback().String())
	}
}

// reconcileLocked brings every ledger to the settings in force and
// publishes them.
func (s *Server) reconcileLocked() {
	now := s.now()
	for key, l := range s.ledgers {
		if want := s.settings.forKey(key); l.Settings() != want {
			l.SetSettings(want, now)
		}
	}
	s.publishSettingsLocked()
}

// publishSettingsLocked exports the settings in force and the count of
// rejected values.
func (s *Server) publishSettingsLocked() {
	g := s.metrics.configSettings
	g.Reset()
	set := func(key string, st ledger.Settings) {
		g.WithLabelValues(key, "ratio").Set(st.Ratio)
		g.WithLabelValues(key, "burst").Set(st.Burst)
		g.WithLabelValues(key, "min_per_second").Set(st.MinPerSecond)
	}
	set(DefaultConfigKey, s.settings.fallback())
	for _, k := range s.settings.keys() {
		set(k, s.settings.explicit[k])
	}
	s.metrics.configInvalid.Set(float64(len(s.settings.rejected)))
}
