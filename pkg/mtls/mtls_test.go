package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a settable clock for Options.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var loopback = []net.IP{net.ParseIP("127.0.0.1")}

func newCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func serverLeaf() Leaf {
	return Leaf{Name: "verifier", DNS: []string{"localhost"}, IPs: loopback, Server: true, ValidFor: time.Hour}
}

func clientLeaf(roles ...string) Leaf {
	return Leaf{Name: "gateway", Client: true, Roles: roles, ValidFor: time.Hour}
}

func write(t *testing.T, ca *CA, dir, name string, l Leaf) Files {
	t.Helper()
	f, err := ca.WriteFiles(dir, name, l, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func loadSource(t *testing.T, f Files, o Options) *Source {
	t.Helper()
	s, err := Load(f, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve starts a gRPC health server on loopback with TLS from src; extra
// server options (interceptors) are added. It returns the address.
func serve(t *testing.T, src *Source, auth tls.ClientAuthType, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(opts, grpc.Creds(src.ServerCredentials(auth)))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return lis.Addr().String()
}

// check makes one health Check over a new connection with creds.
func check(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func TestMutualTLSOverGRPC(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "fleet CA")
	srv := loadSource(t, write(t, ca, dir, "verifier", serverLeaf()), Options{})
	addr := serve(t, srv, tls.RequireAndVerifyClientCert)

	good := loadSource(t, write(t, ca, filepath.Join(mkdir(t, dir, "good")), "gateway", clientLeaf()), Options{})
	if err := check(t, addr, good.ClientCredentials("")); err != nil {
		t.Fatalf("client with a certificate of the fleet's CA: %v", err)
	}

	other := newCA(t, "someone else's CA")
	// The stranger trusts the fleet's CA, so only its own certificate is wrong.
	sf := write(t, other, mkdir(t, dir, "stranger"), "gateway", clientLeaf())
	if err := os.WriteFile(sf.CA, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	stranger := loadSource(t, sf, Options{})
	noCert := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool(t, srv.files.CA)}

	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
	}{
		{"plaintext", insecure.NewCredentials()},
		{"TLS without a client certificate", credentials.NewTLS(noCert)},
		{"a client certificate of another CA", stranger.ClientCredentials("")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := check(t, addr, tc.creds)
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("got %v, want the connection refused (UNAVAILABLE)", err)
			}
		})
	}

	t.Run("a server certificate of another CA", func(t *testing.T) {
		fake := loadSource(t, write(t, other, mkdir(t, dir, "fake"), "verifier", serverLeaf()), Options{})
		fakeAddr := serve(t, fake, tls.RequireAndVerifyClientCert)
		err := check(t, fakeAddr, good.ClientCredentials(""))
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("got %v, want the client to refuse the server's certificate", err)
		}
	})
	t.Run("a server certificate for another name", func(t *testing.T) {
		err := check(t, addr, good.ClientCredentials("budgetd"))
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "budgetd") {
			t.Fatalf("got %v, want the client to refuse a certificate that does not name budgetd", err)
		}
	})
}

func mkdir(t *testing.T, parent, name string) string {
	t.Helper()
	d := filepath.Join(parent, name)
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// peerSerial dials addr with cfg and returns the serial of the server's
// certificate.
func peerSerial(t *testing.T, addr string, cfg *tls.Config) (string, error) {
	t.Helper()
	d := tls.Dialer{Config: cfg}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// rotation is a server and a client of one CA on a fake clock, their files
// in dir/srv and dir/cli, the server listening at addr.
type rotation struct {
	clk      *fakeClock
	dir      string
	ca       *CA
	srvFiles Files
	srv, cli *Source
	addr     string
}

func newRotation(t *testing.T) rotation {
	t.Helper()
	f := rotation{clk: &fakeClock{t: time.Now()}, dir: t.TempDir(), ca: newCA(t, "fleet CA")}
	f.srvFiles = write(t, f.ca, mkdir(t, f.dir, "srv"), "verifier", serverLeaf())
	f.srv = loadSource(t, f.srvFiles, Options{Now: f.clk.Now})
	f.cli = loadSource(t, write(t, f.ca, mkdir(t, f.dir, "cli"), "gateway", clientLeaf()), Options{Now: f.clk.Now})
	f.addr = serve(t, f.srv, tls.RequireAndVerifyClientCert)
	return f
}

// Certificates rotated on disk are used by the next handshake after the
// check interval, without a restart; a CA rotated on disk is trusted the
// same way.
func TestRotationWithoutRestart(t *testing.T) {
	f := newRotation(t)
	clk, dir, ca, srvFiles, srv, cli, addr := f.clk, f.dir, f.ca, f.srvFiles, f.srv, f.cli, f.addr

	first := srv.Leaf().SerialNumber.String()
	if got, err := peerSerial(t, addr, cli.clientTLS("127.0.0.1")); err != nil || got != first {
		t.Fatalf("before rotation: serial %s, %v; want %s", got, err, first)
	}

	// A new certificate from the same CA: not looked at before CheckEvery.
	write(t, ca, filepath.Dir(srvFiles.Cert), "verifier", serverLeaf())
	if got, _ := peerSerial(t, addr, cli.clientTLS("127.0.0.1")); got != first {
		t.Fatalf("within the check interval: serial %s, want still %s", got, first)
	}
	clk.Advance(1100 * time.Millisecond)
	second, err := peerSerial(t, addr, cli.clientTLS("127.0.0.1"))
	if err != nil || second == first {
		t.Fatalf("after rotation: serial %s, %v; want a new certificate", second, err)
	}
	if srv.Reloads() != 1 || srv.Err() != nil {
		t.Errorf("reloads %d, err %v; want 1, nil", srv.Reloads(), srv.Err())
	}

	// A new CA for the whole fleet, written on disk for both: after the
	// check interval both sides use it and trust only it.
	ca2 := newCA(t, "fleet CA 2")
	write(t, ca2, filepath.Dir(srvFiles.Cert), "verifier", serverLeaf())
	write(t, ca2, filepath.Dir(cli.files.Cert), "gateway", clientLeaf())
	clk.Advance(1100 * time.Millisecond)
	if _, err := peerSerial(t, addr, cli.clientTLS("127.0.0.1")); err != nil {
		t.Fatalf("after both rotated to a new CA: %v", err)
	}
	if got := srv.Leaf().Issuer.CommonName; got != "fleet CA 2" {
		t.Errorf("server certificate issued by %q, want fleet CA 2", got)
	}
	// A client still holding the old CA's certificate is now refused.
	of := write(t, ca, mkdir(t, dir, "old"), "gateway", clientLeaf())
	if err := os.WriteFile(of.CA, ca2.CertPEM(), 0o644); err != nil { // it trusts the new server
		t.Fatal(err)
	}
	old := loadSource(t, of, Options{Now: clk.Now})
	if err := check(t, addr, old.ClientCredentials("")); status.Code(err) != codes.Unavailable {
		t.Errorf("a client certificate of the retired CA: got %v, want refused", err)
	}
}

// A rotation that cannot be loaded (half written, mismatched) leaves the
// Source serving what it had, counted once and reported by Err, until a
// good one arrives.
func TestBrokenRotationKeepsServing(t *testing.T) {
	f := newRotation(t)
	clk, ca, srvFiles, srv, cli, addr := f.clk, f.ca, f.srvFiles, f.srv, f.cli, f.addr
	first := srv.Leaf().SerialNumber.String()

	// Half a certificate.
	good, err := os.ReadFile(srvFiles.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(srvFiles.Cert, good[:len(good)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clk.Advance(1100 * time.Millisecond)
		if got, err := peerSerial(t, addr, cli.clientTLS("127.0.0.1")); err != nil || got != first {
			t.Fatalf("with a broken certificate on disk: serial %s, %v; want the old one, %s", got, err, first)
		}
	}
	if srv.Failures() != 1 || srv.Err() == nil || srv.Reloads() != 0 {
		t.Fatalf("failures %d, err %v, reloads %d; want 1, an error, 0", srv.Failures(), srv.Err(), srv.Reloads())
	}

	// A certificate that does not match the key.
	other, _, err := ca.Issue(serverLeaf(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(srvFiles.Cert, other, 0o644); err != nil {
		t.Fatal(err)
	}
	clk.Advance(1100 * time.Millisecond)
	if got, err := peerSerial(t, addr, cli.clientTLS("127.0.0.1")); err != nil || got != first {
		t.Fatalf("with a mismatched certificate on disk: serial %s, %v; want the old one", got, err)
	}
	if srv.Failures() != 2 || !strings.Contains(srv.Err().Error(), srvFiles.Cert) {
		t.Fatalf("failures %d, err %v; want 2, an error naming %s", srv.Failures(), srv.Err(), srvFiles.Cert)
	}

	// Fixed: reloaded, and the error is gone.
	write(t, ca, filepath.Dir(srvFiles.Cert), "verifier", serverLeaf())
	clk.Advance(1100 * time.Millisecond)
	if got, err := peerSerial(t, addr, cli.clientTLS("127.0.0.1")); err != nil || got == first {
		t.Fatalf("after a good rotation: serial %s, %v; want a new one", got, err)
	}
	if srv.Reloads() != 1 || srv.Err() != nil {
		t.Errorf("reloads %d, err %v; want 1, nil", srv.Reloads(), srv.Err())
	}
}

func TestExpiredCertificateRefused(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "fleet CA")
	srv := loadSource(t, write(t, ca, mkdir(t, dir, "srv"), "verifier", serverLeaf()), Options{})
	addr := serve(t, srv, tls.RequireAndVerifyClientCert)
	// Issued two hours ago for an hour (valid from three hours ago).
	f := Files{CA: srv.files.CA}
	certPEM, keyPEM, err := ca.Issue(clientLeaf(), time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	f.Cert, f.Key = filepath.Join(dir, "expired.crt"), filepath.Join(dir, "expired.key")
	if err := errors.Join(os.WriteFile(f.Cert, certPEM, 0o644), os.WriteFile(f.Key, keyPEM, 0o600)); err != nil {
		t.Fatal(err)
	}
	// Not loaded now...
	if _, err := Load(f, Options{}); !errors.Is(err, ErrNotValidNow) || !strings.Contains(err.Error(), "expired") {
		t.Errorf("Load of an expired certificate: %v, want ErrNotValidNow saying it expired", err)
	}
	// ...and refused by a server when presented (loaded on a clock of an
	// hour and a half ago, when it was valid).
	expired := loadSource(t, f, Options{Now: func() time.Time { return time.Now().Add(-90 * time.Minute) }})
	if err := check(t, addr, expired.ClientCredentials("")); status.Code(err) != codes.Unavailable {
		t.Fatalf("an expired client certificate: got %v, want refused", err)
	}
}

// A certificate not valid yet is refused at load, and a rotation to an
// expired or not-yet-valid one is refused at reload: the previous one keeps
// serving, the failure is counted and exported.
func TestCertificateNotValidNowRefusedAtLoadAndReload(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "fleet CA")
	early := write(t, ca, mkdir(t, dir, "early"), "verifier", serverLeaf())
	certPEM, keyPEM, err := ca.Issue(serverLeaf(), time.Now().Add(3*time.Hour)) // valid from 2 h from now
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.WriteFile(early.Cert, certPEM, 0o644), os.WriteFile(early.Key, keyPEM, 0o600)); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(early, Options{}); !errors.Is(err, ErrNotValidNow) || !strings.Contains(err.Error(), "not valid until") {
		t.Errorf("Load of a certificate valid from 2 h from now: %v, want ErrNotValidNow", err)
	}

	clk := &fakeClock{t: time.Now()}
	files := write(t, ca, mkdir(t, dir, "rot"), "verifier", serverLeaf())
	src := loadSource(t, files, Options{Now: clk.Now})
	first := src.Leaf().SerialNumber
	// Rotated to a certificate that expired an hour ago.
	certPEM, keyPEM, err = ca.Issue(serverLeaf(), time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.WriteFile(files.Cert, certPEM, 0o644), os.WriteFile(files.Key, keyPEM, 0o600)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(1100 * time.Millisecond)
	if got := src.Leaf().SerialNumber; got.Cmp(first) != 0 {
		t.Errorf("serving serial %v after an expired rotation, want still %v", got, first)
	}
	if src.Failures() != 1 || !errors.Is(src.Err(), ErrNotValidNow) {
		t.Errorf("failures %d, err %v; want 1 and ErrNotValidNow", src.Failures(), src.Err())
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(src.Collectors()...)
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		got[mf.GetName()] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
	}
	if got["levee_tls_reload_failing"] != 1 || got["levee_tls_reload_failures_total"] != 1 ||
		got["levee_tls_certificate_expiry_timestamp_seconds"] != float64(src.Leaf().NotAfter.Unix()) {
		t.Errorf("metrics %v; want failing 1, failures 1, the served certificate's expiry", got)
	}

	// Rotated to one valid from two hours from now: refused the same way.
	rotate := func(issuedAt time.Time) {
		t.Helper()
		certPEM, keyPEM, err := ca.Issue(serverLeaf(), issuedAt)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(os.WriteFile(files.Cert, certPEM, 0o644), os.WriteFile(files.Key, keyPEM, 0o600)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(1100 * time.Millisecond)
	}
	rotate(time.Now().Add(3 * time.Hour))
	if got := src.Leaf().SerialNumber; got.Cmp(first) != 0 || src.Failures() != 2 || !errors.Is(src.Err(), ErrNotValidNow) {
		t.Errorf("after a not-yet-valid rotation: serial %v (want %v), failures %d (want 2), err %v", got, first, src.Failures(), src.Err())
	}
	// And a good one ends the failure: it serves, and nothing is failing.
	rotate(time.Now())
	if got := src.Leaf().SerialNumber; got.Cmp(first) == 0 || src.Err() != nil {
		t.Errorf("after a good rotation: still serving %v, err %v; want the new certificate and no error", got, src.Err())
	}
}

func TestPolicy(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "fleet CA")
	srv := loadSource(t, write(t, ca, mkdir(t, dir, "srv"), "verifier", serverLeaf()), Options{})
	guarded := Policy{Methods: map[string][]string{healthpb.Health_Check_FullMethodName: {RoleAdmin, RoleRead}}}
	unary, stream := guarded.Interceptors()
	// Client certificates optional, as on a public port: the interceptor
	// tells a caller without one from one without the role.
	addr := serve(t, srv, tls.VerifyClientCertIfGiven, grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))

	admin := loadSource(t, write(t, ca, mkdir(t, dir, "admin"), "admin", clientLeaf(RoleAdmin)), Options{})
	reader := loadSource(t, write(t, ca, mkdir(t, dir, "reader"), "reader", clientLeaf(RoleRead)), Options{})
	other := loadSource(t, write(t, ca, mkdir(t, dir, "other"), "gateway", clientLeaf(RoleGateway)), Options{})
	noCert := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool(t, srv.files.CA)})

	for _, tc := range []struct {
		name  string
		creds credentials.TransportCredentials
		want  codes.Code
	}{
		{"the admin role", admin.ClientCredentials(""), codes.OK},
		{"the read role", reader.ClientCredentials(""), codes.OK},
		{"a certificate with neither", other.ClientCredentials(""), codes.PermissionDenied},
		{"no client certificate", noCert, codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := check(t, addr, tc.creds)
			if status.Code(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if tc.want != codes.OK && !strings.Contains(status.Convert(err).Message(), `"admin"`) {
				t.Errorf("message %q does not name the roles", status.Convert(err).Message())
			}
		})
	}

	watch := func(addr string, creds credentials.TransportCredentials) error {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		return err
	}
	// A method the policy does not name is closed, even to the admin.
	if err := watch(addr, admin.ClientCredentials("")); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a method the policy does not name: %v, want PERMISSION_DENIED", err)
	}
	// An open service passes without a certificate.
	open := Policy{Open: OpenServices}
	unary, stream = open.Interceptors()
	openAddr := serve(t, srv, tls.VerifyClientCertIfGiven, grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	if err := watch(openAddr, noCert); err != nil {
		t.Errorf("an open service without a certificate: %v", err)
	}
}

func TestPeerOfReadsTheCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "fleet CA")
	srv := loadSource(t, write(t, ca, mkdir(t, dir, "srv"), "verifier", serverLeaf()), Options{})
	got := make(chan Peer, 1)
	unary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		p, _ := PeerOf(ctx)
		got <- p
		return handler(ctx, req)
	}
	addr := serve(t, srv, tls.RequireAndVerifyClientCert, grpc.ChainUnaryInterceptor(unary))
	caller := loadSource(t, write(t, ca, mkdir(t, dir, "app"), "app-7",
		Leaf{Name: "app-7", Client: true, Roles: []string{RoleBudget}, Tenant: "shop", Priority: "batch", ValidFor: time.Hour}), Options{})
	if err := check(t, addr, caller.ClientCredentials("")); err != nil {
		t.Fatal(err)
	}
	p := <-got
	if p.Name != "app-7" || p.Tenant != "shop" || p.Priority != "batch" || !p.Has(RoleBudget) || p.Has(RoleAdmin) {
		t.Errorf("PeerOf = %+v, want app-7, tenant shop, priority batch, role budget only", p)
	}
}

func pool(t *testing.T, path string) *x509.CertPool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		t.Fatal("no certificate in", path)
	}
	return p
}

func TestValidateAndLoadErrors(t *testing.T) {
	if err := (Files{}).Validate(); !errors.Is(err, ErrNoCertificates) {
		t.Errorf("no files: %v, want ErrNoCertificates", err)
	}
	if err := (Files{Cert: "a.crt"}).Validate(); err == nil || !strings.Contains(err.Error(), "-tls-ca") ||
		!strings.Contains(err.Error(), "-tls-key") || strings.Contains(err.Error(), "-tls-cert") {
		t.Errorf("only a certificate: %v, want the CA and key named as missing", err)
	}

	dir := t.TempDir()
	ca := newCA(t, "fleet CA")
	f := write(t, ca, dir, "verifier", serverLeaf())
	other, _, err := ca.Issue(serverLeaf(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	mismatched := filepath.Join(dir, "other.crt")
	notPEM := filepath.Join(dir, "not.pem")
	if err := errors.Join(os.WriteFile(mismatched, other, 0o644), os.WriteFile(notPEM, []byte("hello"), 0o644)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files Files
		want  string
	}{
		{"missing key file", Files{CA: f.CA, Cert: f.Cert, Key: filepath.Join(dir, "nope.key")}, "nope.key"},
		{"certificate not matching the key", Files{CA: f.CA, Cert: mismatched, Key: f.Key}, "other.crt"},
		{"CA bundle without a certificate", Files{CA: notPEM, Cert: f.Cert, Key: f.Key}, "not.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.files, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("error %v quotes key material", err)
			}
		})
	}
	if fi, err := os.Stat(f.Key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}
