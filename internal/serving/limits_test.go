package serving_test

import (
	"context"
	"flag"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/leveehq/levee/internal/serving"
)

// counting counts the connections a listener holds open at once, and the
// most it held.
type counting struct {
	net.Listener
	open, most atomic.Int64
}

func (c *counting) Accept() (net.Conn, error) {
	conn, err := c.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := c.open.Add(1)
	for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
	}
	return &countedConn{Conn: conn, l: c}, nil
}

type countedConn struct {
	net.Conn
	l    *counting
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// serveLimited runs a gRPC health server under l on loopback; the returned
// counters are the streams its handlers run at once (and the most), and the
// connections it holds.
func serveLimited(t *testing.T, l serving.Limits) (addr string, active, most *atomic.Int64, conns *counting) {
	addr, active, most, conns, _ = serveBounded(t, l)
	return addr, active, most, conns
}

// serveBounded is serveLimited that also returns the server's Connections.
func serveBounded(t *testing.T, l serving.Limits) (addr string, active, most *atomic.Int64, conns *counting, bound *serving.Connections) {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	active, most = new(atomic.Int64), new(atomic.Int64)
	track := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		n := active.Add(1)
		defer active.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		return handler(srv, ss)
	}
	srv := grpc.NewServer(append(l.ServerOptions(), grpc.ChainStreamInterceptor(track))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	conns = &counting{Listener: raw}
	bound = l.Connections()
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(bound.Listener(conns)) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return raw.Addr().String(), active, most, conns, bound
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A client that opens many streams on one connection gets MaxStreams of
// them served at once; the rest wait in the client.
func TestStreamFloodStaysBounded(t *testing.T) {
	addr, active, most, _ := serveLimited(t, serving.Limits{MaxStreams: 4})
	cc := dialPlain(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	var wg sync.WaitGroup
	for range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{}); err == nil {
				_, _ = w.Recv()
				<-ctx.Done()
			}
		}()
	}
	waitFor(t, 5*time.Second, "4 streams served", func() bool { return active.Load() >= 4 })
	time.Sleep(200 * time.Millisecond) // room for a stream past the bound to start, were there one
	cancel()
	wg.Wait()
	if m := most.Load(); m != 4 {
		t.Errorf("at most %d streams served at once, want 4 (of 40 opened)", m)
	}
}

// A call whose headers exceed MaxHeaderBytes is refused.
func TestLargeHeadersRefused(t *testing.T) {
	addr, _, _, _ := serveLimited(t, serving.Limits{MaxHeaderBytes: 4 << 10})
	cc := dialPlain(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call with small headers: %v", err)
	}
	big := metadata.AppendToOutgoingContext(ctx, "x-big", strings.Repeat("a", 8<<10))
	if _, err := healthpb.NewHealthClient(cc).Check(big, &healthpb.HealthCheckRequest{}); err == nil {
		t.Errorf("a call with 8 KiB of headers was served under a 4 KiB bound")
	}
}

// Connections that never finish their handshake hold at most
// MaxConnections slots, each for HandshakeTimeout: a real client is
// served once one is closed.
func TestConnectionFloodStaysBounded(t *testing.T) {
	addr, _, _, conns := serveLimited(t, serving.Limits{MaxConnections: 2, HandshakeTimeout: 300 * time.Millisecond})
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 20 {
		c, err := net.Dial("tcp", addr) // completes in the kernel's accept queue; sends nothing
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	cc := dialPlain(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a real client behind 20 silent connections: %v", err)
	}
	if m := conns.most.Load(); m > 2 {
		t.Errorf("held %d connections at once, want at most 2", m)
	}
}

// One source holds at most MaxConnectionsPerSource connections; the ones
// past it are closed at once and counted, and a peer at another address
// is served while that source sits on its share. Closed connections give
// their slots back.
func TestOneSourceCannotTakeEverySlot(t *testing.T) {
	addr, _, _, conns, bound := serveBounded(t, serving.Limits{MaxConnections: 4, MaxConnectionsPerSource: 2, HandshakeTimeout: time.Minute})
	reg := prometheus.NewRegistry()
	reg.MustRegister(bound.Collectors()...)
	var flood []net.Conn
	for range 10 {
		c, err := net.Dial("tcp", addr) // from 127.0.0.1; sends nothing
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	waitFor(t, 5*time.Second, "8 of the 10 closed on accept", func() bool {
		return counter(t, reg, "levee_server_connections_refused_total") == 8
	})
	if n := bound.Open(); n != 2 {
		t.Errorf("holds %d connections from one source, want 2", n)
	}
	// Another loopback address is another source: served at once, though
	// the flood's two connections wait a minute for their handshakes.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a client at another address, beside a source at its bound: %v", err)
	}
	if got := counter(t, reg, "levee_server_connections"); got != 3 {
		t.Errorf("levee_server_connections = %v, want 3", got)
	}
	for _, c := range flood {
		c.Close()
	}
	cc.Close()
	waitFor(t, 5*time.Second, "every slot given back", func() bool { return bound.Open() == 0 && conns.open.Load() == 0 })
}

// A connection with no call is closed after MaxConnectionIdle, and its
// slot given back.
func TestIdleConnectionsClosed(t *testing.T) {
	addr, _, _, _, bound := serveBounded(t, serving.Limits{MaxConnectionIdle: 300 * time.Millisecond})
	cc := dialPlain(t, addr)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if bound.Open() != 1 {
		t.Fatalf("holds %d connections after a call, want 1", bound.Open())
	}
	waitFor(t, 5*time.Second, "the idle connection closed", func() bool { return bound.Open() == 0 })
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestLimitsFlags(t *testing.T) {
	l := serving.DefaultLimits()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	l.AddFlags(fs)
	if err := fs.Parse([]string{"-max-streams", "7", "-max-header-bytes", "4096", "-max-connections", "9"}); err != nil {
		t.Fatal(err)
	}
	if l.MaxStreams != 7 || l.MaxHeaderBytes != 4096 || l.MaxConnections != 9 || l.Validate() != nil {
		t.Errorf("parsed %+v (%v), want 7 streams, 4096 header bytes, 9 connections", l, l.Validate())
	}
	for _, bad := range []string{"-1", "4294967296", "many", "1e3", "7x", "0x10"} {
		if err := fs.Parse([]string{"-max-streams", bad}); err == nil {
			t.Errorf("-max-streams %s: no error", bad)
		}
	}
	if err := (serving.Limits{MaxHeaderBytes: 100}).Validate(); err == nil {
		t.Errorf("a 100-byte header bound validated")
	}
}

// dialPlain is a plaintext client of addr, closed when t ends.
func dialPlain(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}
