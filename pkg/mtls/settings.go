package mtls

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leveehq/levee/pkg/wellknown"
)

// Settings is a component's choice of transport security, as its flags give
// it: a directory made by `levee certs`, or files named one by one (from
// your own PKI), or plaintext on purpose. The zero value chooses nothing, and
// Load refuses it.
type Settings struct {
	// Dir holds a set made by `levee certs`: ca.crt, and NAME.crt and
	// NAME.key for each kind of component (verifier, gateway, budgetd,
	// etcd, admin, client).
	Dir string
	// Files name the PEM files; each one given overrides Dir's.
	Files Files
	// Insecure runs in plaintext, for a trusted network only.
	Insecure bool
}

// AddFlags registers -tls-dir, -tls-ca, -tls-cert, -tls-key and -insecure
// on fs.
func (s *Settings) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&s.Dir, wellknown.FlagTLSDir, s.Dir, "directory of a `levee certs` set: ca.crt and this component's NAME.crt and NAME.key")
	fs.StringVar(&s.Files.CA, "tls-ca", s.Files.CA, "PEM bundle of the CAs peers' certificates must chain to (overrides -tls-dir's)")
	fs.StringVar(&s.Files.Cert, "tls-cert", s.Files.Cert, "PEM certificate (then intermediates) this component presents (overrides -tls-dir's)")
	fs.StringVar(&s.Files.Key, "tls-key", s.Files.Key, "PEM private key of -tls-cert (overrides -tls-dir's)")
	fs.BoolVar(&s.Insecure, wellknown.FlagInsecure, s.Insecure, "plaintext gRPC and etcd, no certificates: a trusted network only")
}

// ErrInsecureWithCertificates is Load's error when both plaintext and
// certificates are asked for.
var ErrInsecureWithCertificates = errors.New("-insecure and TLS certificates both given: pick one")

// Resolve returns the files of identity name: Dir's ca.crt, name.crt and
// name.key, with each file named in Files taking the place of Dir's.
func (s Settings) Resolve(name string) Files {
	f := s.Files
	if s.Dir != "" {
		if f.CA == "" {
			f.CA = filepath.Join(s.Dir, "ca.crt")
		}
		if f.Cert == "" {
			f.Cert = filepath.Join(s.Dir, name+".crt")
		}
		if f.Key == "" {
			f.Key = filepath.Join(s.Dir, name+".key")
		}
	}
	return f
}

// Check reports what Load would refuse for want of flags, without reading
// a file: ErrNoCertificates when neither certificates nor Insecure are
// given, ErrInsecureWithCertificates when both are, or the files missing
// from an incomplete set.
func (s Settings) Check(name string) error {
	f := s.Resolve(name)
	if s.Insecure {
		if !f.IsZero() {
			return ErrInsecureWithCertificates
		}
		return nil
	}
	return f.Validate()
}

// Load returns the Source of identity name (its files in Dir are name.crt
// and name.key), or nil and no error for Insecure: a nil *Source is
// plaintext wherever one is taken. Without either it returns
// ErrNoCertificates, whose text says how to get certificates.
func (s Settings) Load(name string, o Options) (*Source, error) {
	if err := s.Check(name); err != nil || s.Insecure {
		return nil, err
	}
	src, err := Load(s.Resolve(name), o)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return src, nil
}

// ServerOptions are the gRPC server options of a server with s's identity
// that asks clients for certificates as clientAuth says
// (tls.RequireAndVerifyClientCert on internal ports). A nil Source serves
// plaintext: no options.
func (s *Source) ServerOptions(clientAuth tls.ClientAuthType) []grpc.ServerOption {
	if s == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(s.ServerCredentials(clientAuth))}
}

// DialOption is the transport of a gRPC client with s's identity, checking
// that the server's certificate names serverName (empty: the host dialled).
// A nil Source dials in plaintext.
func (s *Source) DialOption(serverName string) grpc.DialOption {
	if s == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(s.ClientCredentials(serverName))
}

// Plaintext reports whether s is nil: plaintext on purpose (-insecure).
func (s *Source) Plaintext() bool { return s == nil }
