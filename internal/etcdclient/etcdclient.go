// Package etcdclient makes the etcd clients of Levee's components, so that
// they all dial etcd alike: keepalive pings that find a dead member within
// seconds, mutual TLS from the component's own identity when it has one,
// and endpoints whose scheme agrees with it.
package etcdclient

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/leveehq/levee/pkg/mtls"
)

// Keepalive: a member that stops answering is left within KeepAliveTime +
// KeepAliveTimeout, and the client moves to another. etcd refuses pings
// more often than every 5 s (its --grpc-keepalive-min-time).
const (
	KeepAliveTime    = 5 * time.Second
	KeepAliveTimeout = 3 * time.Second
)

// Config says how to reach etcd.
type Config struct {
	// Endpoints are host:port, http://host:port (plaintext only) or
	// https://host:port (TLS only).
	Endpoints []string
	// DialTimeout bounds New's first connection; zero: do not wait.
	DialTimeout time.Duration
	// TLS is the component's identity, presented to etcd (whose
	// --client-cert-auth maps its common name to an etcd user); nil:
	// plaintext.
	TLS *mtls.Source
	// Logger receives the client's own logs; nil: none.
	Logger *zap.Logger
	// Context, when set, ends every call made on the client when it ends.
	Context context.Context
}

// New returns a client of c.Endpoints. An endpoint whose scheme disagrees
// with c.TLS (http:// with certificates, https:// without) is refused: a
// fleet that meant TLS must not fall back to plaintext because one URL says
// so.
func New(c Config) (*clientv3.Client, error) {
	if len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("etcd: no endpoints")
	}
	for _, ep := range c.Endpoints {
		switch {
		case c.TLS != nil && strings.HasPrefix(ep, "http://"):
			return nil, fmt.Errorf("etcd endpoint %s is plaintext but this component has TLS certificates: use https://", ep)
		case c.TLS == nil && strings.HasPrefix(ep, "https://"):
			return nil, fmt.Errorf("etcd endpoint %s wants TLS but this component runs -insecure: give it certificates", ep)
		}
	}
	log := c.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return clientv3.New(clientv3.Config{
		Context:              c.Context,
		Endpoints:            c.Endpoints,
		DialTimeout:          c.DialTimeout,
		DialKeepAliveTime:    KeepAliveTime,
		DialKeepAliveTimeout: KeepAliveTimeout,
		// etcd's own credentials come first in its dial options; these,
		// last, win: each handshake presents the identity current on disk.
		DialOptions: []grpc.DialOption{c.TLS.DialOption("")},
		Logger:      log,
	})
}
