package gateway

import (
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leveehq/levee/pkg/breaker"
	"github.com/leveehq/levee/pkg/gateway/settings"
)

// settingsHandler follows the settings key (etcdwatch.Handler).
type settingsHandler struct{ g *Gateway }

func (h settingsHandler) Snapshot(kvs []*mvccpb.KeyValue) {
	if len(kvs) == 0 {
		_ = h.g.ApplySettings(settings.Settings{}) // the configuration was validated
		return
	}
	h.put(kvs[len(kvs)-1])
}

func (h settingsHandler) Events(evs []*clientv3.Event) {
	for _, ev := range evs {
		switch ev.Type {
		case mvccpb.PUT:
			h.put(ev.Kv)
		case mvccpb.DELETE:
			h.g.log.Info("gateway settings removed; configured values apply")
			_ = h.g.ApplySettings(settings.Settings{})
		}
	}
}

func (h settingsHandler) put(kv *mvccpb.KeyValue) {
	s, err := settings.Parse(kv.Value)
	if err != nil {
		h.g.metrics.configErrors.Inc()
		h.g.log.Error("gateway settings rejected; the last good ones stay in force",
			"key", string(kv.Key), "revision", kv.ModRevision, "err", err)
		return
	}
	if err := h.g.ApplySettings(s); err != nil {
		h.g.metrics.configErrors.Inc()
		h.g.log.Error("gateway settings rejected; the last good ones stay in force",
			"key", string(kv.Key), "revision", kv.ModRevision, "err", err)
		return
	}
	h.g.log.Info("gateway settings applied", "revision", kv.ModRevision, "settings", s.String())
}

// ApplySettings puts runtime settings in force: fields left unset take the
// gateway's configured values. Settings that are invalid on their own or in
// combination with the configuration (shares that would invert the shedding
// order) are refused whole, and nothing changes.
func (g *Gateway) ApplySettings(s settings.Settings) error {
	if err := s.Validate(); err != nil {
		return err
	}
	cfg := g.cfg
	adm := cfg.Admission
	adm.CriticalReserve = floatOr(s.CriticalReserve, adm.CriticalReserve)
	adm.BatchShare = floatOr(s.BatchShare, adm.BatchShare)
	adm.RetryShare = floatOr(s.RetryShare, adm.RetryShare)
	adm.Ceiling = intOr(s.Ceiling, adm.Ceiling)
	if err := adm.Validate(); err != nil {
		return err
	}
	brk := cfg.Breaker
	brk.FailureRate = floatOr(s.BreakerFailureRate, brk.FailureRate)
	brk.OpenFor = durationOr(s.BreakerOpenFor, brk.OpenFor)
	brk.MinRequests = intOr(s.BreakerMinRequests, brk.MinRequests)
	if err := brk.Validate(); err != nil {
		return err
	}

	if err := g.limiter.SetShares(adm.CriticalReserve, adm.BatchShare, adm.RetryShare); err != nil {
		return err
	}
	if err := g.shares.SetWeights(s.TenantWeights); err != nil {
		return err
	}
	if err := g.shares.SetCaps(s.TenantCaps); err != nil {
		return err
	}
	g.fair.Store(!cfg.Unguarded && (s.Fairness == nil && cfg.FairShare || s.Fairness != nil && *s.Fairness))
	g.limiter.SetClamp(intOr(s.Clamp, 0))
	g.settings.Store(&s)
	g.fitCeiling()
	g.auto.enabled.Store(s.Autopilot == nil && cfg.Autopilot.Enabled || s.Autopilot != nil && *s.Autopilot)
	g.auto.timeout.Store(int64(durationOr(s.ClientTimeout, cfg.Autopilot.ClientTimeout)))
	if !sameBreaker(*g.brkCfg.Load(), brk) {
		g.brkCfg.Store(&brk)
		g.verifiers.ResetBreakers()
	}
	return nil
}

// sameBreaker compares the breaker fields runtime settings can change.
func sameBreaker(a, b breaker.Config) bool {
	return a.FailureRate == b.FailureRate && a.OpenFor == b.OpenFor && a.MinRequests == b.MinRequests
}

func intOr(p *int, d int) int {
	if p == nil {
		return d
	}
	return *p
}

func floatOr(p *float64, d float64) float64 {
	if p == nil {
		return d
	}
	return *p
}

func durationOr(p *settings.Duration, d time.Duration) time.Duration {
	if p == nil {
		return d
	}
	return time.Duration(*p)
}
