package budgetd

import (
	"context"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// configPrefix is where settings live: <Prefix>config/<key>.
func (s *Server) configPrefix() string { return s.cfg.Prefix + "config/" }

// watchConfig keeps the settings table equal to etcd: a full read, then a
// watch from the revision after it; on a compaction or any watch error, a
// full read again. Changes apply to the ledgers at once.
func (s *Server) watchConfig(ctx context.Context, cli *clientv3.Client) {
	pfx := s.configPrefix()
	b := newBackoff(50*time.Millisecond, s.cfg.RefreshInterval)
	for {
		resp, err := cli.Get(ctx, pfx, clientv3.WithPrefix())
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("reading the budget configuration failed; keeping the last good", "err", err)
			if !b.wait(ctx) {
				return
			}
			continue
		}
		s.applyConfigSnapshot(resp.Kvs)

		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := cli.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				s.log.Warn("watching the budget configuration failed; reading it again", "err", err)
				break
			}
			s.applyConfigEvents(wr.Events)
			b.reset()
		}
		cancel()
		if ctx.Err() != nil || !b.wait(ctx) {
			return
		}
	}
}

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
	set := func(key string, st Settings) {
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
