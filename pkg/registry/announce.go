package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"
)

// Announcer keeps a server's address in etcd for as long as the server is
// ready, for a server that must go on serving its direct clients whatever
// etcd does: Announce once it serves, Withdraw as the first step of its
// drain, so that clients following the target stop sending to it before it
// refuses.
//
// An Announcer promises:
//
//   - Announce never fails the server: it registers (Register), retrying
//     with jittered backoff while etcd is unreachable, its first failure
//     logged at WARN, until it succeeds or its ctx ends; then nothing is
//     registered and nothing is left running.
//   - Once announced, the Registration's promises hold: a lost lease is
//     re-granted and the key added again until Withdraw.
//   - Withdraw removes the key at once, bounded by the withdraw timeout; if
//     etcd cannot be reached in time, it logs a WARN and the key expires
//     with its lease.
//   - A nil *Announcer announces nothing: a server without etcd holds one
//     and calls it alike.
//
// Announce and Withdraw belong to one goroutine, the server's lifecycle:
// Withdraw is called after Announce has returned (end Announce's ctx first
// to cut a pending announcement short). The Announcer never closes
// Config.Client.
type Announcer struct {
	cfg     Config
	timeout time.Duration
	log     *slog.Logger
	reg     *Registration // set by Announce, cleared by Withdraw
}

// NewAnnouncer validates cfg and returns an Announcer for it whose Withdraw
// waits at most withdrawTimeout for etcd. It does not reach etcd.
func NewAnnouncer(cfg Config, withdrawTimeout time.Duration) (*Announcer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if withdrawTimeout <= 0 {
		return nil, fmt.Errorf("registry: withdraw timeout must be positive, got %v", withdrawTimeout)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Announcer{cfg: cfg, timeout: withdrawTimeout, log: log}, nil
}

// Announce registers cfg.Addr under cfg.Target, retrying until it succeeds
// or ctx ends, and reports whether it did. Until then the server serves its
// direct clients; Register logs the first failure.
func (a *Announcer) Announce(ctx context.Context) bool {
	if a == nil {
		return false
	}
	reg, err := Register(ctx, a.cfg)
	if err != nil {
		a.log.Debug("etcd registration abandoned", "err", err)
		return false
	}
	a.reg = reg
	return true
}

// Withdraw removes the announcement, if Announce made one, bounded by the
// withdraw timeout; if etcd cannot be reached, the key expires with its
// lease. It returns after the Registration's goroutine has ended.
func (a *Announcer) Withdraw() {
	if a == nil || a.reg == nil {
		return
	}
	reg := a.reg
	a.reg = nil
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	if err := reg.Close(ctx); err != nil {
		a.log.Warn("etcd deregistration failed; clients drop this server when its lease expires", "err", err)
	}
}

// ErrUndialableListener is matched by AnnounceAddr's error for a listener
// whose address nobody can dial and no advertised address to use instead.
var ErrUndialableListener = errors.New("registry: the listen address cannot be announced (nobody could dial it)")

// AnnounceAddr is the address to announce for a server listening on lis:
// advertise when given (see Advertised), else lis's own address, which must
// pass CheckAddr: a listener on 0.0.0.0 or :: needs an advertised address.
func AnnounceAddr(advertise string, lis net.Addr) (string, error) {
	if advertise != "" {
		return Advertised(advertise), nil
	}
	addr := lis.String()
	if err := CheckAddr(addr); err != nil {
		return "", fmt.Errorf("%w: %w", ErrUndialableListener, err)
	}
	return addr, nil
}

// Advertised is addr as it is registered. An empty host (":7701") is
// filled with this machine's host name, so that replicas started from one
// template (docker compose --scale, a Kubernetes Deployment) each register
// the name their peers resolve them by. A bracketed host is written the
// way dialers expect it: "[10.0.0.5]:7701" becomes "10.0.0.5:7701" and
// "[fd00::5]:7701" stays, so one template ("[$(POD_IP)]:7701") fits IPv4
// and IPv6 pods. An addr that is not host:port, or an empty host where the
// host name cannot be read, is returned as it is.
func Advertised(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if host != "" {
		return net.JoinHostPort(host, port)
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		return addr
	}
	return net.JoinHostPort(name, port)
}
