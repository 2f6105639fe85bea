package verifier

import (
	"fmt"
	"net"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leveehq/levee/internal/etcdclient"
	"github.com/leveehq/levee/pkg/registry"
)

// announcer settles what Serve announces in etcd before anything is
// served: the advertised address (AdvertiseAddr, or lis's address when that
// is dialable) and the etcd client, which does not wait for etcd; the
// caller closes the client once the announcer is done with. Without
// EtcdEndpoints it returns nil, nil: an announcer that announces nothing.
func (s *Server) announcer(lis net.Listener) (*registry.Announcer, *clientv3.Client, error) {
	if len(s.cfg.EtcdEndpoints) == 0 {
		return nil, nil, nil
	}
	addr, err := registry.AnnounceAddr(s.cfg.AdvertiseAddr, lis.Addr())
	if err != nil {
		return nil, nil, fmt.Errorf("verifier: gateways could not dial it; set AdvertiseAddr (-advertise): %w", err)
	}
	// The registration logs what matters (losses, re-registrations); the
	// client's own retries would only repeat it: no client logger.
	cli, err := etcdclient.New(etcdclient.Config{
		Endpoints:   s.cfg.EtcdEndpoints,
		DialTimeout: s.cfg.EtcdDialTimeout,
		TLS:         s.cfg.TLS,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("verifier: etcd client: %w", err)
	}
	// Deregistration at the drain is bounded by EtcdDialTimeout.
	a, err := registry.NewAnnouncer(registry.Config{
		Client: cli,
		Target: s.cfg.RegistryTarget,
		Addr:   addr,
		TTL:    s.cfg.RegistryTTL,
		Logger: s.log,
	}, s.cfg.EtcdDialTimeout)
	if err != nil {
		cli.Close()
		return nil, nil, fmt.Errorf("verifier: %w", err)
	}
	return a, cli, nil
}
