package budgetd

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// embeddedReadyTimeout bounds the start of an embedded etcd: a single node
// elects itself within about a second, but a slow disk may take longer.
const embeddedReadyTimeout = time.Minute

// EmbeddedEtcd is a running single-node etcd inside this process, for a
// local fleet or a test: nothing to install.
type EmbeddedEtcd struct {
	e         *embed.Etcd
	endpoints []string
	stopping  *atomic.Bool // quiets etcd's logs of its own shutdown
}

// StartEmbeddedEtcd starts etcd as cfg describes and returns once it serves
// clients. Its logs at level and above go to log. Close stops it.
func StartEmbeddedEtcd(cfg EmbeddedEtcdConfig, log *slog.Logger, level slog.Level) (*EmbeddedEtcd, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	secure := !cfg.TLS.IsZero()
	curl, _ := parseEtcdURL(cfg.ClientURL, secure)
	purl, _ := parseEtcdURL(cfg.PeerURL, secure)

	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.DataDir
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.EnableGRPCGateway = false
	if secure {
		info := transport.TLSInfo{CertFile: cfg.TLS.Cert, KeyFile: cfg.TLS.Key, TrustedCAFile: cfg.TLS.CA,
			ClientCertAuth: true}
		ec.ClientTLSInfo, ec.PeerTLSInfo = info, info
		ec.TlsMinVersion = "TLS1.3"
	}
	// Sessions and elections add revisions forever; keep an hour of history.
	ec.AutoCompactionMode, ec.AutoCompactionRetention = "periodic", "1h"
	stopping := new(atomic.Bool)
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(newZapLogger(log, level, "etcd-server", stopping))
	// etcd warns when its data directory is more open than 0700.
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd: data dir: %w", err)
	}

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: start: %w", err)
	}
	timer := time.NewTimer(embeddedReadyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		stopping.Store(true)
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-timer.C:
		stopping.Store(true)
		e.Close()
		return nil, fmt.Errorf("embedded etcd: not ready after %v", embeddedReadyTimeout)
	}
	return &EmbeddedEtcd{e: e, endpoints: []string{curl.String()}, stopping: stopping}, nil
}

// Endpoints are the client URLs to give clientv3.
func (e *EmbeddedEtcd) Endpoints() []string { return append([]string(nil), e.endpoints...) }

// Close stops etcd and returns once it has stopped. Clients still connected
// delay it (etcd waits for their streams up to its request timeout), so
// close them first.
func (e *EmbeddedEtcd) Close() {
	e.stopping.Store(true)
	e.e.Close()
	<-e.e.Server.StopNotify()
}
