package serving

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Limits bound what one peer can make a gRPC server hold: grpc-go's
// defaults allow any number of streams per connection, 16 MiB of headers,
// two minutes to finish a handshake, connections and streams that never
// end, and any number of connections. Every Levee server takes these as
// flags, with the defaults of DefaultLimits; a zero field means its
// default, so a Limits{} bounds everything.
type Limits struct {
	// MaxConnections is how many connections the server holds at once;
	// further ones wait in the kernel's accept queue until one closes.
	MaxConnections int
	// MaxConnectionsPerSource is how many of them may come from one source
	// IP address; one more is closed as soon as it is accepted.
	MaxConnectionsPerSource int
	// MaxStreams is how many streams (calls) one connection may have open
	// at once; a client's further calls wait for one to end.
	MaxStreams uint32
	// MaxHeaderBytes bounds the header list of a call.
	MaxHeaderBytes uint32
	// HandshakeTimeout is how long a new connection has to complete its
	// TLS handshake (and HTTP/2 preface).
	HandshakeTimeout time.Duration
	// MaxConnectionIdle closes a connection with no call for that long
	// (pings do not count): a peer cannot hold a slot by keeping an empty
	// connection alive.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge closes every connection after about that long
	// (±10 %, grpc-go's jitter), after MaxConnectionAgeGrace for the calls
	// in flight: health watches and reflection streams end with it, and
	// clients reconnect (and meet rotated certificates).
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// MinPingInterval is the most often a client may ping; one that pings
	// more often is disconnected (GOAWAY). Clients may ping without a call
	// in flight: gateways and budget clients probe idle connections.
	MinPingInterval time.Duration
}

// DefaultLimits: 4,096 connections, 1,024 of them from one source address,
// 1,000 streams per connection, 16 KiB of headers, a 10 s handshake, idle
// connections closed after a minute, every connection after 30 minutes
// (1 minute of grace), pings at most every 5 s.
//
// 1,024 per source: one peer holds at most a quarter of the connections, and
// the hundreds of client processes a big host runs, or a NAT address hides,
// still connect (a gRPC client holds one connection per server; budgetd's
// tests run 500 clients on one address). An idle minute: a caller
// that verifies less often than that pays one handshake per call.
//
// 1,000 streams: the gateway multiplexes its calls to a verifier on one
// connection, and a verifier's queue rarely exceeds a few hundred (its
// -queue-capacity, 1,024 by default, is what bounds admitted work). 16 KiB
// of headers holds Levee's metadata (under 200 bytes) and any tracing a
// caller adds, a thousandth of grpc-go's default.
func DefaultLimits() Limits {
	return Limits{
		MaxConnections:          4096,
		MaxConnectionsPerSource: 1024,
		MaxStreams:              1000,
		MaxHeaderBytes:          16 << 10,
		HandshakeTimeout:        10 * time.Second,
		MaxConnectionIdle:       time.Minute,
		MaxConnectionAge:        30 * time.Minute,
		MaxConnectionAgeGrace:   time.Minute,
		MinPingInterval:         5 * time.Second,
	}
}

// AddFlags registers a flag for each limit on fs, with l's values as
// defaults.
func (l *Limits) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&l.MaxConnections, "max-connections", l.MaxConnections, "most gRPC connections held at once; more wait to be accepted")
	fs.IntVar(&l.MaxConnectionsPerSource, "max-connections-per-source", l.MaxConnectionsPerSource, "most gRPC connections from one source IP address; more are closed on accept")
	uint32Var(fs, &l.MaxStreams, "max-streams", "most concurrent calls on one connection")
	uint32Var(fs, &l.MaxHeaderBytes, "max-header-bytes", "largest header list of one call, in bytes")
	fs.DurationVar(&l.HandshakeTimeout, "handshake-timeout", l.HandshakeTimeout, "time a new connection has to complete its handshake")
	fs.DurationVar(&l.MaxConnectionIdle, "max-connection-idle", l.MaxConnectionIdle, "close a connection without a call for this long")
	fs.DurationVar(&l.MaxConnectionAge, "max-connection-age", l.MaxConnectionAge, "close every connection after about this long (clients reconnect)")
	fs.DurationVar(&l.MaxConnectionAgeGrace, "max-connection-age-grace", l.MaxConnectionAgeGrace, "time the calls of an aged connection have to finish")
	fs.DurationVar(&l.MinPingInterval, "min-ping-interval", l.MinPingInterval, "disconnect a client that pings more often than this")
}

// uint32Var registers a flag that sets *p to a decimal in 0..2^32-1.
func uint32Var(fs *flag.FlagSet, p *uint32, name, usage string) {
	fs.Func(name, fmt.Sprintf("%s (default %d)", usage, *p), func(s string) error {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return fmt.Errorf("want a decimal 0..%d", uint32(math.MaxUint32))
		}
		*p = uint32(n)
		return nil
	})
}

// Validate reports every limit that is negative, and a header bound under
// 1 KiB (zero means the default).
func (l Limits) Validate() error {
	var errs []error
	if l.MaxConnections < 0 {
		errs = append(errs, fmt.Errorf("MaxConnections must be positive (0: the default), got %d", l.MaxConnections))
	}
	if l.MaxConnectionsPerSource < 0 {
		errs = append(errs, fmt.Errorf("MaxConnectionsPerSource must be positive (0: the default), got %d", l.MaxConnectionsPerSource))
	}
	if l.MaxHeaderBytes != 0 && l.MaxHeaderBytes < 1<<10 {
		errs = append(errs, fmt.Errorf("MaxHeaderBytes must be at least 1 KiB (0: the default), got %d", l.MaxHeaderBytes))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"HandshakeTimeout", l.HandshakeTimeout}, {"MaxConnectionIdle", l.MaxConnectionIdle}, {"MaxConnectionAge", l.MaxConnectionAge},
		{"MaxConnectionAgeGrace", l.MaxConnectionAgeGrace}, {"MinPingInterval", l.MinPingInterval}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must be positive (0: the default), got %v", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

// ServerOptions are the gRPC server options that apply l (all but the
// connection bounds, which Connections applies).
func (l Limits) ServerOptions() []grpc.ServerOption {
	l = l.withDefaults()
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(l.MaxStreams),
		grpc.MaxHeaderListSize(l.MaxHeaderBytes),
		grpc.ConnectionTimeout(l.HandshakeTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     l.MaxConnectionIdle,
			MaxConnectionAge:      l.MaxConnectionAge,
			MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: l.MinPingInterval, PermitWithoutStream: true}),
	}
}

// withDefaults is l with each zero field set to DefaultLimits' value.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	or := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	if l.MaxConnections == 0 {
		l.MaxConnections = d.MaxConnections
	}
	if l.MaxConnectionsPerSource == 0 {
		l.MaxConnectionsPerSource = d.MaxConnectionsPerSource
	}
	if l.MaxStreams == 0 {
		l.MaxStreams = d.MaxStreams
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	or(&l.HandshakeTimeout, d.HandshakeTimeout)
	or(&l.MaxConnectionIdle, d.MaxConnectionIdle)
	or(&l.MaxConnectionAge, d.MaxConnectionAge)
	or(&l.MaxConnectionAgeGrace, d.MaxConnectionAgeGrace)
	or(&l.MinPingInterval, d.MinPingInterval)
	return l
}
