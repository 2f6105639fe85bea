package mtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// CA is a development certificate authority: an ECDSA P-256 key and a
// self-signed certificate that issues the fleet's leaves. It is for
// development and compose fleets; a production fleet's certificates come
// from its own PKI.
type CA struct {
	cert *x509.Certificate
	der  []byte
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA named name, valid from an hour ago for validFor.
func NewCA(name string, validFor time.Duration, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Levee development"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validFor),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA certificate: %w", err)
	}
	return &CA{cert: cert, der: der, key: key}, nil
}

// CertPEM is the CA's certificate, the bundle every component trusts.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
}

// Leaf describes a certificate to issue.
type Leaf struct {
	// Name is the subject's common name (informational: names are checked
	// against DNS and IPs only).
	Name string
	// DNS and IPs are the names a server answers to; a client needs none.
	DNS []string
	IPs []net.IP
	// Server and Client say which extended key usages it carries.
	Server, Client bool
	// Roles are granted as urn:levee:role: URIs (RoleAdmin, ...).
	Roles []string
	// Tenant, when set, makes the holder a caller of the gateway on behalf
	// of that tenant (urn:levee:tenant:), and Priority the highest priority
	// it may ask for (urn:levee:priority:; empty: the gateway's default).
	Tenant, Priority string
	// ValidFor is how long from now (minus an hour of clock skew) it is valid.
	ValidFor time.Duration
}

// Issue signs a new key for l and returns the certificate and key as PEM.
func (ca *CA) Issue(l Leaf, now time.Time) (certPEM, keyPEM []byte, err error) {
	if !l.Server && !l.Client {
		return nil, nil, errors.New("mtls: a leaf must be a server, a client or both")
	}
	if l.ValidFor <= 0 {
		return nil, nil, errors.New("mtls: a leaf needs a positive validity")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("mtls: key for %s: %w", l.Name, err)
	}
	var usage []x509.ExtKeyUsage
	if l.Server {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	if l.Client {
		usage = append(usage, x509.ExtKeyUsageClientAuth)
	}
	var uris []*url.URL
	for _, r := range l.Roles {
		uris = append(uris, Role(r))
	}
	if l.Tenant != "" {
		uris = append(uris, Tenant(l.Tenant))
	}
	if l.Priority != "" {
		uris = append(uris, Priority(l.Priority))
	}
	notAfter := now.Add(l.ValidFor)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter // a leaf outliving its CA would fail anyway
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: l.Name, Organization: []string{"Levee development"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     l.DNS,
		IPAddresses:  l.IPs,
		URIs:         uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("mtls: certificate for %s: %w", l.Name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("mtls: key for %s: %w", l.Name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// WriteFiles writes a leaf issued by ca into dir as name.crt and name.key
// (mode 0600), and ca.crt beside them, and returns the Files naming them.
// Each file is written to a temporary name and renamed, so a Source reading
// them never sees half of one.
func (ca *CA) WriteFiles(dir, name string, l Leaf, now time.Time) (Files, error) {
	certPEM, keyPEM, err := ca.Issue(l, now)
	if err != nil {
		return Files{}, err
	}
	f := Files{CA: filepath.Join(dir, "ca.crt"), Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key")}
	for _, w := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{f.CA, ca.CertPEM(), 0o644}, {f.Cert, certPEM, 0o644}, {f.Key, keyPEM, 0o600}} {
		if err := writeAtomic(w.path, w.data, w.mode); err != nil {
			return Files{}, err
		}
	}
	return f, nil
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("mtls: %w", err)
	}
	name := tmp.Name()
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(name, mode)); err != nil {
		os.Remove(name)
		return fmt.Errorf("mtls: writing %s: %w", path, err)
	}
	if err := os.Rename(name, path); err != nil {
		os.Remove(name)
		return fmt.Errorf("mtls: %w", err)
	}
	return nil
}

// serial is a random 128-bit serial number, as RFC 5280 asks (positive, at
// most 20 bytes).
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n.Add(n, big.NewInt(1))
}
