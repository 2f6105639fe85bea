package serving

import (
	"net"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Connections bounds and counts the connections one server holds: at most
// MaxConnections at once (further ones wait in the kernel's accept queue
// until one closes), and at most MaxConnectionsPerSource from one source
// IP address (one more is closed as soon as it is accepted, so that one
// peer cannot take every slot and make the others wait). Make it with
// Limits.Connections when the server is built, register its Collectors,
// and serve on Listener(lis).
type Connections struct {
	max, perSource int

	slots   chan struct{} // a token per connection held
	open    atomic.Int64
	refused atomic.Uint64

	mu       sync.Mutex
	bySource map[string]int
}

// Connections returns the bound l sets on a server's connections.
func (l Limits) Connections() *Connections {
	l = l.withDefaults()
	return &Connections{max: l.MaxConnections, perSource: l.MaxConnectionsPerSource,
		slots: make(chan struct{}, l.MaxConnections), bySource: map[string]int{}}
}

// Listener is lis under c's bounds. Several listeners of one Connections
// share its bounds.
func (c *Connections) Listener(lis net.Listener) net.Listener {
	return &boundedListener{Listener: lis, c: c, done: make(chan struct{})}
}

// Open is the number of connections held now.
func (c *Connections) Open() int { return int(c.open.Load()) }

// Collectors are the connection metrics: held now, the bound, and refused
// for their source's bound.
func (c *Connections) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "levee_server_connections",
			Help: "gRPC connections this server holds now (at most levee_server_connections_limit).",
		}, func() float64 { return float64(c.open.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "levee_server_connections_limit",
			Help: "Most gRPC connections this server holds at once (-max-connections); further ones wait to be accepted.",
		}, func() float64 { return float64(c.max) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "levee_server_connections_refused_total",
			Help: "Connections closed on accept because their source IP held -max-connections-per-source already.",
		}, func() float64 { return float64(c.refused.Load()) }),
	}
}

// source is the IP address a connection comes from (its whole remote
// address when that has no host part).
func source(conn net.Conn) string {
	addr := conn.RemoteAddr().String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

type boundedListener struct {
	net.Listener
	c         *Connections
	closeOnce sync.Once
	done      chan struct{}
}

func (l *boundedListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.c.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		conn, err := l.Listener.Accept()
		if err != nil {
			<-l.c.slots
			return nil, err
		}
		src := source(conn)
		l.c.mu.Lock()
		ok := l.c.bySource[src] < l.c.perSource
		if ok {
			l.c.bySource[src]++
		}
		l.c.mu.Unlock()
		if !ok {
			<-l.c.slots
			l.c.refused.Add(1)
			conn.Close()
			continue
		}
		l.c.open.Add(1)
		return &boundedConn{Conn: conn, c: l.c, src: src}, nil
	}
}

func (l *boundedListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type boundedConn struct {
	net.Conn
	c       *Connections
	src     string
	release sync.Once
}

func (c *boundedConn) Close() error {
	err := c.Conn.Close()
	c.release.Do(func() {
		c.c.mu.Lock()
		if c.c.bySource[c.src]--; c.c.bySource[c.src] <= 0 {
			delete(c.c.bySource, c.src)
		}
		c.c.mu.Unlock()
		c.c.open.Add(-1)
		<-c.c.slots
	})
	return err
}
