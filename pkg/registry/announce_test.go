package registry_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"

	"github.com/leveehq/levee/internal/etcdtest"
	"github.com/leveehq/levee/pkg/registry"
)

// announcer returns an Announcer of addr under DefaultTarget on cli, with
// a withdraw timeout of withdraw, logging to logs.
func announcer(t *testing.T, cli *clientv3.Client, addr string, ttl, withdraw time.Duration, logs *recorder) *registry.Announcer {
	t.Helper()
	a, err := registry.NewAnnouncer(registry.Config{
		Client: cli, Target: registry.DefaultTarget, Addr: addr, TTL: ttl, Logger: slog.New(logs),
	}, withdraw)
	if err != nil {
		t.Fatalf("NewAnnouncer: %v", err)
	}
	return a
}

// Announce registers; Withdraw removes the key at once (the lease is far
// from expiring) and revokes the lease.
func TestAnnounceWithdraw(t *testing.T) {
	eps := etcdtest.StartEtcd(t)
	cli, observer := newClient(t, eps), newClient(t, eps)
	w := watch(t, observer, registry.DefaultTarget)
	const addr = "10.0.0.7:7701"
	key := registry.DefaultTarget + "/" + addr
	a := announcer(t, cli, addr, time.Minute, wait, &recorder{t: t})

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if !a.Announce(ctx) {
		t.Fatalf("Announce with etcd up: false")
	}
	w.want(endpoints.Add, key, addr)
	lease := leaseOf(t, observer, key)

	a.Withdraw()
	w.want(endpoints.Delete, key, "")
	if ttl := timeToLive(t, observer, lease); ttl != -1 {
		t.Errorf("lease TTL after Withdraw = %d, want -1 (revoked)", ttl)
	}
	a.Withdraw() // nothing left to withdraw: a no-op
}

// While announced, a lost lease is re-granted and the key added again.
func TestAnnounceReregistersAfterRevoke(t *testing.T) {
	eps := etcdtest.StartEtcd(t)
	cli, operator := newClient(t, eps), newClient(t, eps)
	w := watch(t, operator, registry.DefaultTarget)
	const addr = "10.0.0.7:7701"
	key := registry.DefaultTarget + "/" + addr
	a := announcer(t, cli, addr, testTTL, wait, &recorder{t: t})
	t.Cleanup(a.Withdraw)

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if !a.Announce(ctx) {
		t.Fatalf("Announce with etcd up: false")
	}
	w.want(endpoints.Add, key, addr)
	if _, err := operator.Revoke(ctx, leaseOf(t, operator, key)); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	w.want(endpoints.Delete, key, "")
	w.want(endpoints.Add, key, addr)
}

// With etcd unreachable, Announce keeps retrying (the server serves on) and
// registers once etcd is back.
func TestAnnounceWaitsForEtcd(t *testing.T) {
	etcd := etcdtest.NewEtcd(t)
	cli := newClient(t, etcd.Endpoints())
	etcd.Stop()
	const addr = "10.0.0.7:7701"
	logs := &recorder{t: t}
	// The retry backoff stops growing at the TTL.
	a := announcer(t, cli, addr, testTTL, wait, logs)
	t.Cleanup(a.Withdraw)

	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	announced := make(chan bool, 1)
	go func() { announced <- a.Announce(ctx) }()
	waitFor(t, "the first failure to be logged", func() bool {
		return logs.count(slog.LevelWarn, "registration failed") == 1
	})
	select {
	case ok := <-announced:
		t.Fatalf("Announce returned %v with etcd down, want it to keep retrying", ok)
	default:
	}
	etcd.Restart()
	if !<-announced {
		t.Fatalf("Announce after etcd returned: false")
	}
	if _, ok := list(t, cli, registry.DefaultTarget)[registry.DefaultTarget+"/"+addr]; !ok {
		t.Errorf("Announce returned true but the key is not in etcd")
	}
}

// Announce gives up when its ctx ends (the drain started) and leaves nothing
// running (goleak checks); Withdraw then has nothing to do and returns at
// once.
func TestAnnounceGivesUpWithContext(t *testing.T) {
	etcd := etcdtest.NewEtcd(t)
	cli := newClient(t, etcd.Endpoints())
	etcd.Stop()
	a := announcer(t, cli, "10.0.0.7:7701", testTTL, wait, &recorder{t: t})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if a.Announce(ctx) {
		t.Fatalf("Announce with etcd down: true")
	}
	start := time.Now()
	a.Withdraw()
	if took := time.Since(start); took > time.Second {
		t.Errorf("Withdraw with nothing announced took %v", took)
	}
}

// With etcd gone at the drain, Withdraw gives up after its timeout, saying
// so at WARN; the key is left to expire with its lease.
func TestWithdrawBoundedWhenEtcdGone(t *testing.T) {
	etcd := etcdtest.NewEtcd(t)
	cli := newClient(t, etcd.Endpoints())
	logs := &recorder{t: t}
	const timeout = 2 * time.Second
	a := announcer(t, cli, "10.0.0.7:7701", time.Minute, timeout, logs)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if !a.Announce(ctx) {
		t.Fatalf("Announce with etcd up: false")
	}
	etcd.Stop()
	start := time.Now()
	a.Withdraw()
	if took := time.Since(start); took > timeout+wait/3 {
		t.Errorf("Withdraw took %v, want about its timeout %v", took, timeout)
	}
	if n := logs.count(slog.LevelWarn, "deregistration failed"); n != 1 {
		t.Errorf("%d WARN logs of the failed deregistration, want 1:\n%s", n, logs)
	}
}

// A nil Announcer (a server without etcd) announces and withdraws nothing.
func TestNilAnnouncer(t *testing.T) {
	var a *registry.Announcer
	if a.Announce(context.Background()) {
		t.Errorf("nil Announcer: Announce = true")
	}
	a.Withdraw()
}

func TestNewAnnouncerValidates(t *testing.T) {
	cli := clientv3.NewCtxClient(context.Background()) // never connects
	valid := registry.Config{Client: cli, Target: registry.DefaultTarget, Addr: "10.0.0.7:7701"}
	if _, err := registry.NewAnnouncer(valid, time.Second); err != nil {
		t.Errorf("NewAnnouncer(valid): %v", err)
	}
	bad := valid
	bad.Addr = "0.0.0.0:7701"
	if _, err := registry.NewAnnouncer(bad, time.Second); !errors.Is(err, registry.ErrInvalidAddr) {
		t.Errorf("NewAnnouncer(0.0.0.0): %v, want ErrInvalidAddr", err)
	}
	if _, err := registry.NewAnnouncer(valid, 0); err == nil {
		t.Errorf("NewAnnouncer with no withdraw timeout: nil error")
	}
}

func TestAnnounceAddr(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	for _, tt := range []struct {
		name, advertise string
		lis             net.Addr
		want            string
		err             error
	}{
		{name: "listener", lis: tcp("127.0.0.1:7701"), want: "127.0.0.1:7701"},
		{name: "advertised", advertise: "verifier-3:7701", lis: tcp("0.0.0.0:7701"), want: "verifier-3:7701"},
		{name: "advertised pod IPv4", advertise: "[10.1.2.3]:7701", lis: tcp("0.0.0.0:7701"), want: "10.1.2.3:7701"},
		{name: "advertised pod IPv6", advertise: "[fd00::3]:7701", lis: tcp("[::]:7701"), want: "[fd00::3]:7701"},
		{name: "unspecified", lis: tcp("0.0.0.0:7701"), err: registry.ErrUndialableListener},
		{name: "unspecified v6", lis: tcp("[::]:7701"), err: registry.ErrInvalidAddr},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := registry.AnnounceAddr(tt.advertise, tt.lis)
			if tt.err != nil {
				if !errors.Is(err, tt.err) || !errors.Is(err, registry.ErrUndialableListener) {
					t.Fatalf("AnnounceAddr = %q, %v; want an error matching %v and ErrUndialableListener", got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("AnnounceAddr = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestAdvertisedFillsHostName(t *testing.T) {
	// Without a host name the address is left as it is: either way the
	// expectation is exact.
	self := ":7701"
	if name, err := os.Hostname(); err == nil && name != "" {
		self = net.JoinHostPort(name, "7701")
	}
	for in, want := range map[string]string{
		":7701":            self,
		"10.0.0.5:7701":    "10.0.0.5:7701",
		"verifier3:7701":   "verifier3:7701",
		"[10.0.0.5]:7701":  "10.0.0.5:7701",
		"[fd00::5]:7701":   "[fd00::5]:7701",
		"[verifier3]:7701": "verifier3:7701",
		"garbage":          "garbage",
	} {
		if got := registry.Advertised(in); got != want {
			t.Errorf("Advertised(%q) = %q, want %q", in, got, want)
		}
	}
}
