// Package mtls is the transport security of every Levee hop: mutual TLS from
// PEM files that are reloaded when they change on disk, the roles a peer's
// certificate grants, and a development certificate authority.
//
// A Source promises:
//
//   - Load fails, naming the file, unless the certificate, its key and the
//     CA bundle all parse and the certificate matches the key. A Source is
//     never empty.
//   - Each handshake uses the newest good material: at most once per
//     CheckEvery (a second by default) a handshake looks at the three files
//     (size and modification time), and when one changed it loads all three
//     again. A rotation that is half written, or one whose certificate does
//     not match its key, is refused: the Source keeps serving what it had,
//     counts the failure and reports it through Err until a load succeeds.
//     Connections already open are not touched (TLS has no re-keying to a
//     new certificate); new ones use the new material.
//   - ServerConfig, ServerCredentials and ClientCredentials use TLS 1.3
//     only and verify the peer against the CA bundle loaded at that
//     handshake, so a CA rotated on disk is trusted (or distrusted) without
//     a restart. A client verifies the server's name as well as its chain.
//
// Roles are URI subject alternative names of the form urn:levee:role:NAME
// (see Role, RolesOf). Authorize is a server interceptor that demands a role
// for the methods named, and answers UNAUTHENTICATED to a caller with no
// verified certificate and PERMISSION_DENIED to one whose certificate lacks
// the role.
package mtls

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/credentials"
)

// Files names the PEM files of one component's identity.
type Files struct {
	// CA is the bundle of certificate authorities a peer's certificate must
	// chain to (and the server's, for a client).
	CA string
	// Cert is this component's certificate, then any intermediates.
	Cert string
	// Key is the private key of Cert (PKCS #8, PKCS #1 or SEC 1 PEM).
	Key string
}

// IsZero reports whether no file is named.
func (f Files) IsZero() bool { return f == Files{} }

// ErrNoCertificates is Validate's error for Files that name nothing: a
// component that carries passwords refuses to start in plaintext unless told
// to (its -insecure flag).
var ErrNoCertificates = errors.New("no TLS certificates: give -tls-dir DIR (`levee certs -out DIR` makes a development set), " +
	"or -tls-ca, -tls-cert and -tls-key from your own PKI, or -insecure to run in plaintext on a trusted network only")

// Validate reports ErrNoCertificates when nothing is named, and which files
// are missing when only some are.
func (f Files) Validate() error {
	if f.IsZero() {
		return ErrNoCertificates
	}
	var errs []error
	for _, x := range []struct{ name, path string }{{"CA bundle (-tls-ca)", f.CA}, {"certificate (-tls-cert)", f.Cert}, {"key (-tls-key)", f.Key}} {
		if x.path == "" {
			errs = append(errs, fmt.Errorf("mtls: no %s given", x.name))
		}
	}
	return errors.Join(errs...)
}

// Options tunes a Source; the zero value is the default.
type Options struct {
	// CheckEvery is how often, at most, a handshake looks at the files;
	// zero means a second.
	CheckEvery time.Duration
	// Logger receives one line per reload and per failed reload (file
	// names and the certificate's subject and expiry, never key material);
	// nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// material is one loaded identity.
type material struct {
	cert  tls.Certificate
	leaf  *x509.Certificate
	pool  *x509.CertPool
	stamp [3]fileStamp
}

type fileStamp struct {
	size int64
	mod  time.Time
}

// Source is one component's TLS identity, reloaded from its Files when they
// change. It is safe for concurrent use.
type Source struct {
	files Files
	every time.Duration
	log   *slog.Logger
	now   func() time.Time

	cur     atomic.Pointer[material]
	checked atomic.Int64 // unix nanos of the last look at the files
	mu      sync.Mutex   // one reload at a time

	reloads  atomic.Uint64
	failures atomic.Uint64
	lastErr  atomic.Pointer[error]
	failed   [3]fileStamp // the files of the last refused load; under mu
}

// Load reads f once and returns a Source serving it.
func Load(f Files, o Options) (*Source, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	s := &Source{files: f, every: o.CheckEvery, log: o.Logger, now: o.Now}
	if s.every <= 0 {
		s.every = time.Second
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	m, err := load(f, s.now())
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	s.checked.Store(s.now().UnixNano())
	return s, nil
}

// Leaf is the certificate s serves now.
func (s *Source) Leaf() *x509.Certificate { return s.current().leaf }

// Reloads counts the successful reloads since Load.
func (s *Source) Reloads() uint64 { return s.reloads.Load() }

// Failures counts the changes on disk that could not be loaded (each set of
// files once, however often it is looked at).
func (s *Source) Failures() uint64 { return s.failures.Load() }

// Err is the error of the last reload that failed, or nil once a later one
// succeeded (or none failed).
func (s *Source) Err() error {
	if p := s.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// current returns the material to use now, reloading it first if the files
// changed and it is time to look.
func (s *Source) current() *material {
	m := s.cur.Load()
	now := s.now()
	if now.UnixNano()-s.checked.Load() < int64(s.every) {
		return m
	}
	if !s.mu.TryLock() {
		return m // another handshake is looking
	}
	defer s.mu.Unlock()
	s.checked.Store(now.UnixNano())
	st, err := stamps(s.files)
	if err == nil && st == m.stamp {
		// The files are the ones served (a refused rotation rolled back):
		// nothing is failing any more.
		if s.lastErr.Load() != nil {
			s.lastErr.Store(nil)
			s.failed = [3]fileStamp{}
		}
		return m
	}
	if err == nil {
		var next *material
		if next, err = load(s.files, now); err == nil {
			s.cur.Store(next)
			s.reloads.Add(1)
			s.lastErr.Store(nil)
			s.log.Info("tls: reloaded certificates", "cert", s.files.Cert, "subject", next.leaf.Subject.String(),
				"not_after", next.leaf.NotAfter.UTC().Format(time.RFC3339))
			return next
		}
	}
	// Refused: keep serving the old material. Its stamp stays, so the files
	// are read again at the next look (a rotation still being written); the
	// same refused files are counted and logged once.
	if st != s.failed || s.Err() == nil {
		s.failed = st
		s.failures.Add(1)
		s.log.Warn("tls: certificates changed on disk but could not be loaded; serving the previous ones", "err", err)
	}
	s.lastErr.Store(&err)
	return m
}

func stamps(f Files) ([3]fileStamp, error) {
	var st [3]fileStamp
	for i, p := range []string{f.CA, f.Cert, f.Key} {
		fi, err := os.Stat(p)
		if err != nil {
			return st, fmt.Errorf("mtls: %w", err)
		}
		st[i] = fileStamp{size: fi.Size(), mod: fi.ModTime()}
	}
	return st, nil
}

// maxPEM bounds each file read: a certificate chain or a key is a few
// kilobytes, and a CA bundle rarely more than a few hundred.
const maxPEM = 4 << 20

func readPEM(what, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mtls: %s: %w", what, err)
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, maxPEM+1)); err != nil {
		return nil, fmt.Errorf("mtls: %s %s: %w", what, path, err)
	}
	if b.Len() > maxPEM {
		return nil, fmt.Errorf("mtls: %s %s is larger than %d bytes", what, path, maxPEM)
	}
	return b.Bytes(), nil
}

// ErrNotValidNow is load's error (wrapped) for a certificate that has
// expired or is not valid yet: served, it would fail every handshake, so it
// is refused at start and at reload (where the previous one keeps serving).
var ErrNotValidNow = errors.New("certificate not valid now")

func load(f Files, now time.Time) (*material, error) {
	// The stamps are taken first: a file replaced while it is read is seen
	// as changed again at the next look.
	st, err := stamps(f)
	if err != nil {
		return nil, err
	}
	caPEM, err := readPEM("CA bundle", f.CA)
	if err != nil {
		return nil, err
	}
	certPEM, err := readPEM("certificate", f.Cert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM("key", f.Key)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("mtls: CA bundle %s holds no PEM certificate", f.CA)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// X509KeyPair's errors name no key material.
		return nil, fmt.Errorf("mtls: certificate %s with key %s: %w", f.Cert, f.Key, err)
	}
	switch leaf := cert.Leaf; {
	case now.After(leaf.NotAfter):
		return nil, fmt.Errorf("mtls: certificate %s (%s) expired at %s: %w", f.Cert, leaf.Subject.CommonName,
			leaf.NotAfter.UTC().Format(time.RFC3339), ErrNotValidNow)
	case now.Before(leaf.NotBefore):
		return nil, fmt.Errorf("mtls: certificate %s (%s) is not valid until %s: %w", f.Cert, leaf.Subject.CommonName,
			leaf.NotBefore.UTC().Format(time.RFC3339), ErrNotValidNow)
	}
	return &material{cert: cert, leaf: cert.Leaf, pool: pool, stamp: st}, nil
}

// ServerConfig is the TLS configuration of a server: its certificate from s
// and, by clientAuth, client certificates verified against s's CA bundle
// (tls.RequireAndVerifyClientCert on every internal port;
// tls.VerifyClientCertIfGiven where callers may come without one).
func (s *Source) ServerConfig(clientAuth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := s.current()
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				NextProtos:   []string{"h2"},
				Certificates: []tls.Certificate{m.cert},
				ClientCAs:    m.pool,
				ClientAuth:   clientAuth,
			}, nil
		},
	}
}

// ClientCredentials are the gRPC transport credentials of a client of
// serverName (a DNS name or an IP address the server's certificate must
// name; empty: the host of the address dialled). Each handshake presents the
// certificate current in s and verifies the server's chain against the CA
// bundle current in s, and its name, as crypto/tls does.
func (s *Source) ClientCredentials(serverName string) credentials.TransportCredentials {
	return &clientCreds{src: s, name: serverName}
}

// ServerCredentials are ServerConfig(clientAuth) as gRPC transport
// credentials.
func (s *Source) ServerCredentials(clientAuth tls.ClientAuthType) credentials.TransportCredentials {
	return credentials.NewTLS(s.ServerConfig(clientAuth))
}

// clientTLS is the configuration of one client handshake with serverName.
func (s *Source) clientTLS(serverName string) *tls.Config {
	m := s.current()
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{"h2"},
		ServerName:   serverName,
		RootCAs:      m.pool,
		Certificates: []tls.Certificate{m.cert},
	}
}

// clientCreds builds a fresh TLS configuration for every handshake, so that
// a rotated certificate or CA bundle is used without a new ClientConn.
type clientCreds struct {
	src  *Source
	name string
}

func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	name := c.name
	if name == "" {
		name = authority
		if host, _, err := net.SplitHostPort(authority); err == nil {
			name = host
		}
	}
	return credentials.NewTLS(c.src.clientTLS(name)).ClientHandshake(ctx, authority, conn)
}

func (c *clientCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("mtls: client credentials cannot accept connections")
}

func (c *clientCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3", ServerName: c.name}
}

func (c *clientCreds) Clone() credentials.TransportCredentials {
	return &clientCreds{src: c.src, name: c.name}
}

// OverrideServerName is gRPC's deprecated way to set the server name.
func (c *clientCreds) OverrideServerName(name string) error {
	c.name = name
	return nil
}

// Collectors are the metrics of s, for a component's registry:
//
//	levee_tls_certificate_expiry_timestamp_seconds  when the served certificate expires (Unix seconds)
//	levee_tls_reloads_total                          rotations picked up from disk
//	levee_tls_reload_failures_total                  rotations refused (each set of files once)
//	levee_tls_reload_failing                         1 while the newest files on disk are refused
//
// deploy/prometheus/levee-rules.yml alerts 30 days before the expiry and
// while a reload fails. A nil s (plaintext) has none.
func (s *Source) Collectors() []prometheus.Collector {
	if s == nil {
		return nil
	}
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "levee_tls_certificate_expiry_timestamp_seconds",
			Help: "When the certificate this component serves and presents expires, in Unix seconds."},
			func() float64 { return float64(s.Leaf().NotAfter.Unix()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "levee_tls_reloads_total",
			Help: "Certificate rotations picked up from disk without a restart."},
			func() float64 { return float64(s.Reloads()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "levee_tls_reload_failures_total",
			Help: "Certificate rotations on disk that could not be loaded (unreadable, mismatched, expired or not yet valid); the previous certificate keeps serving."},
			func() float64 { return float64(s.Failures()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "levee_tls_reload_failing",
			Help: "1 while the newest certificate files on disk are refused, 0 otherwise."},
			func() float64 {
				if s.Err() != nil {
					return 1
				}
				return 0
			}),
	}
}
