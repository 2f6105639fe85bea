package gateway

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// freezer is a TCP proxy in front of a verifier that can stop passing bytes
// while it keeps every connection open: a hung node (stopped, paused, its
// host wedged) as the gateway sees it.
type freezer struct {
	lis    net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{lis: lis, target: target}
	f.cond = sync.NewCond(&f.mu)
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *freezer) addr() string { return f.lis.Addr().String() }

func (f *freezer) accept() {
	defer f.wg.Done()
	for {
		c, err := f.lis.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		f.conns = append(f.conns, c, up)
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(up, c)
		go f.pipe(c, up)
	}
}

// pipe copies src to dst, holding each chunk while frozen.
func (f *freezer) pipe(dst, src net.Conn) {
	defer f.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			for f.frozen && !f.closed {
				f.cond.Wait()
			}
			f.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (f *freezer) freeze(frozen bool) {
	f.mu.Lock()
	f.frozen = frozen
	f.cond.Broadcast()
	f.mu.Unlock()
}

func (f *freezer) close() {
	f.lis.Close()
	f.mu.Lock()
	f.closed = true
	for _, c := range f.conns {
		c.Close()
	}
	f.cond.Broadcast()
	f.mu.Unlock()
	f.wg.Wait()
}

// A verifier that hangs with its connection open (no byte comes back, no
// RST, its health stream silent) is taken out of rotation by the keepalive
// ping going unanswered, and is back in rotation soon after it answers
// again. Without keepalive it stayed in rotation for as long as it hung,
// and so it does still for the lab's unguarded control, which dials as a
// plain proxy would.
func TestHungVerifierLeavesRotation(t *testing.T) {
	v := startVerifier(t, nil)
	f := startFreezer(t, v.addr)
	cfg := gatewayConfig(f.addr())
	cfg.ProbeInterval = time.Second // the ping's timeout; grpc-go raises its period to 10 s
	gw := startGateway(t, cfg)
	gw.waitServing(t, 1)
	plain := cfg
	plain.Registry = prometheus.NewRegistry()
	plain.Unguarded = true
	control := startGateway(t, plain)
	control.waitServing(t, 1)

	f.freeze(true)
	hung := time.Now()
	// grpc-go pings at most every 10 s, then waits ProbeInterval for the
	// answer.
	waitFor(t, 40*time.Second, "the hung verifier out of rotation", func() bool { return gw.g.ServingVerifiers() == 0 })
	t.Logf("out of rotation %v after it hung", time.Since(hung).Round(100*time.Millisecond))
	// The control's own pings would have gone unanswered by now too: it
	// dialled a few milliseconds later. Watch it for three seconds more.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if n := control.g.ServingVerifiers(); n != 1 {
			t.Fatalf("the unguarded gateway took the hung verifier out of rotation after %v; a plain proxy has no keepalive",
				time.Since(hung).Round(100*time.Millisecond))
		}
	}

	f.freeze(false)
	back := time.Now()
	waitFor(t, 20*time.Second, "the verifier back in rotation", func() bool { return gw.g.ServingVerifiers() == 1 })
	t.Logf("back in rotation %v after it answered again", time.Since(back).Round(100*time.Millisecond))
}
