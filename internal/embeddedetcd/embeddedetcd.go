// Package embeddedetcd runs a single-member etcd inside the process, so that
// a local fleet (`levee local`, `levee etcd`), a budgetd started without
// endpoints and every test that needs etcd have one with nothing to
// install. Its logs go to slog (package etcdlog).
package embeddedetcd

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/leveehq/levee/internal/etcdlog"
	"github.com/leveehq/levee/pkg/mtls"
)

// embeddedReadyTimeout bounds the start of an embedded etcd: a single node
// elects itself within about a second, but a slow disk may take longer.
const embeddedReadyTimeout = time.Minute

// Etcd is a running single-node etcd inside this process, for a
// local fleet or a test: nothing to install.
type Etcd struct {
	e         *embed.Etcd
	endpoints []string
	stopping  *atomic.Bool // quiets etcd's logs of its own shutdown
}

// Start starts etcd as cfg describes and returns once it serves
// clients. Its logs at level and above go to log. Close stops it.
func Start(cfg Config, log *slog.Logger, level slog.Level) (*Etcd, error) {
	if err := cfg.Validate(); err != nil {
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
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(etcdlog.New(log, level, "etcd-server", stopping))
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
	return &Etcd{e: e, endpoints: []string{curl.String()}, stopping: stopping}, nil
}

// Endpoints are the client URLs to give clientv3.
func (e *Etcd) Endpoints() []string { return append([]string(nil), e.endpoints...) }

// Close stops etcd and returns once it has stopped. Clients still connected
// delay it (etcd waits for their streams up to its request timeout), so
// close them first.
func (e *Etcd) Close() {
	e.stopping.Store(true)
	e.e.Close()
	<-e.e.Server.StopNotify()
}

// Config describes a single-node etcd: the one budgetd starts when it is
// given no endpoints, `levee etcd`, `levee local` and the tests' etcd.
type Config struct {
	// DataDir holds etcd's data; it survives restarts.
	DataDir string
	// ClientURL is where etcd serves clients, e.g. http://127.0.0.1:2379
	// (a bare host:port is http://, or https:// with TLS).
	ClientURL string
	// PeerURL is etcd's raft peer URL, e.g. http://127.0.0.1:2380.
	PeerURL string
	// Name is the etcd member name.
	Name string
	// TLS, when set, makes etcd serve its clients and peers mutual TLS from
	// these files (then ClientURL and PeerURL must be https://): a client
	// must present a certificate of the CA. etcd reads the files at each
	// handshake, so a rotation on disk is used without a restart.
	TLS mtls.Files
}

// Validate reports every invalid field.
func (e Config) Validate() error {
	var errs []error
	if e.DataDir == "" {
		errs = append(errs, errors.New("DataDir must be set"))
	}
	if e.Name == "" {
		errs = append(errs, errors.New("Name must be set"))
	}
	secure := !e.TLS.IsZero()
	if secure {
		if err := e.TLS.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("TLS: %w", err))
		}
	}
	for _, u := range []struct{ name, v string }{{"ClientURL", e.ClientURL}, {"PeerURL", e.PeerURL}} {
		if _, err := parseEtcdURL(u.v, secure); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u.name, err))
		}
	}
	return errors.Join(errs...)
}

// parseEtcdURL accepts http://host:port (or a bare host:port, read as
// http), or https://host:port when secure (a bare host:port is then read
// as https).
func parseEtcdURL(s string, secure bool) (*url.URL, error) {
	if s == "" {
		return nil, errors.New("must be set")
	}
	want := "http"
	if secure {
		want = "https"
	}
	if !strings.Contains(s, "://") {
		s = want + "://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != want {
		return nil, fmt.Errorf("scheme must be %s (with TLS files: https; without: http), got %q", want, u.Scheme)
	}
	if err := checkHostPort(u.Host); err != nil {
		return nil, err
	}
	return u, nil
}

// checkHostPort accepts host:port with both parts present.
func checkHostPort(s string) error {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return fmt.Errorf("want host:port, got %q", s)
	}
	return nil
}
