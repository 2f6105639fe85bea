// Package etcdtest runs a real etcd inside a test — embedded, single-node,
// in t.TempDir() on free 127.0.0.1 ports, stopped in t.Cleanup — behind a
// TCP proxy, so that a test can take etcd away as a crash would and bring it
// back on the same data. Every test of Levee that needs etcd uses it.
package etcdtest

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leveehq/levee/internal/embeddedetcd"
)

// Etcd is a single-node embedded etcd that clients reach through a TCP
// proxy, so that Stop cuts every connection at once, as a crashed etcd
// would (etcd's own graceful stop waits for open watch streams).
type Etcd struct {
	t     testing.TB
	cfg   embeddedetcd.Config
	proxy *proxy

	mu sync.Mutex
	e  *embeddedetcd.Etcd
}

// StartEtcd starts an embedded etcd in t.TempDir() on free 127.0.0.1
// ports, stopped in t.Cleanup, and returns its client endpoints.
func StartEtcd(t testing.TB) (endpoints []string) {
	return NewEtcd(t).Endpoints()
}

// NewEtcd is StartEtcd returning a handle that can stop and restart etcd.
func NewEtcd(t testing.TB) *Etcd {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "etcd")
	var lastErr error
	for range 3 { // a free port can be taken between choosing and binding it
		cfg := Config(t)
		cfg.DataDir = dir
		e, err := embeddedetcd.Start(cfg, Logger(t), slog.LevelError)
		if err != nil {
			lastErr = err
			os.RemoveAll(dir)
			continue
		}
		h := &Etcd{t: t, cfg: cfg, e: e}
		h.proxy = newProxy(t, strings.TrimPrefix(cfg.ClientURL, "http://"))
		t.Cleanup(h.close)
		return h
	}
	t.Fatalf("start etcd: %v", lastErr)
	return nil
}

// Endpoints are the client URLs (through the proxy); they stay the same
// across Stop and Restart.
func (e *Etcd) Endpoints() []string { return []string{"http://" + e.proxy.addr()} }

// LastAnswer is when etcd last sent anything to a client (a lease renewal,
// a watch event, a response) through the proxy; the zero time if never.
// After Stop it is the last word any client had from this etcd.
func (e *Etcd) LastAnswer() time.Time {
	if ns := e.proxy.lastAnswer.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Stop cuts every client connection and stops etcd; clients see it gone.
func (e *Etcd) Stop() {
	e.t.Helper()
	e.proxy.setDown(true)
	e.proxy.hung.Store(false)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.e != nil {
		e.e.Close()
		e.e = nil
	}
}

// Hang makes etcd stop answering without closing anything: every byte
// either way through the proxy is dropped while the connections stay open,
// so a client's calls wait until their deadlines, as behind a partition or
// a frozen host. Stop ends it.
func (e *Etcd) Hang() { e.proxy.hung.Store(true) }

// Restart starts etcd again on the same data and ports after Stop.
func (e *Etcd) Restart() {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.e == nil {
		var err error
		deadline := time.Now().Add(10 * time.Second)
		for {
			e.e, err = embeddedetcd.Start(e.cfg, Logger(e.t), slog.LevelError)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond) // the old listeners may linger a moment
		}
		if err != nil {
			e.t.Fatalf("restart etcd: %v", err)
		}
	}
	e.proxy.setDown(false)
}

func (e *Etcd) close() {
	e.proxy.close()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.e != nil {
		e.e.Close()
		e.e = nil
	}
}

// Config describes an embedded etcd for t: data in t.TempDir(), client and
// peer URLs on free 127.0.0.1 ports.
func Config(t testing.TB) embeddedetcd.Config {
	t.Helper()
	ports := FreePorts(t, 2)
	return embeddedetcd.Config{
		DataDir:   filepath.Join(t.TempDir(), "etcd"),
		ClientURL: "http://" + ports[0],
		PeerURL:   "http://" + ports[1],
		Name:      "test",
	}
}

// Logger returns a logger into t's log, at the level named by the
// environment variable LEVEE_TEST_LOG (debug, info, warn, error; default
// warn).
func Logger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if v := os.Getenv("LEVEE_TEST_LOG"); v != "" {
		_ = level.UnmarshalText([]byte(v))
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = testWriter{}

// FreePorts returns n distinct free 127.0.0.1 ports, as host:port.
func FreePorts(t testing.TB, n int) []string {
	t.Helper()
	out := make([]string, 0, n)
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	for _, l := range ls {
		l.Close()
	}
	return out
}

// proxy forwards TCP connections from a fixed local address to target;
// while down it refuses (closes) every connection; while hung it drops
// every byte and closes nothing.
type proxy struct {
	target string
	lis    net.Listener
	wg     sync.WaitGroup
	hung   atomic.Bool

	// lastAnswer is when etcd last sent bytes to a client through the
	// proxy (UnixNano; 0: never).
	lastAnswer atomic.Int64

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

// stampWriter notes the time of every write.
type stampWriter struct {
	w  io.Writer
	at *atomic.Int64
}

func (s stampWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.at.Store(time.Now().UnixNano())
	return n, err
}

// hangWriter drops what it is given while hung is set.
type hangWriter struct {
	w    io.Writer
	hung *atomic.Bool
}

func (h hangWriter) Write(p []byte) (int, error) {
	if h.hung.Load() {
		return len(p), nil
	}
	return h.w.Write(p)
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{target: target, lis: lis, conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	return p
}

func (p *proxy) addr() string { return p.lis.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	c.Close()
}

func (p *proxy) serve(c net.Conn) {
	defer p.untrack(c)
	b, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return
	}
	if !p.track(b) {
		b.Close()
		return
	}
	defer p.untrack(b)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(hangWriter{b, &p.hung}, c)
		b.Close()
	})
	_, _ = io.Copy(hangWriter{stampWriter{c, &p.lastAnswer}, &p.hung}, b)
	c.Close()
	wg.Wait()
}

func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
	}
}

func (p *proxy) close() {
	p.setDown(true)
	p.lis.Close()
	p.wg.Wait()
}

// String describes the handle for test logs.
func (e *Etcd) String() string { return fmt.Sprintf("etcd %s (%s)", e.Endpoints()[0], e.cfg.DataDir) }
