package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/leveehq/levee/internal/flagenv"
	"github.com/leveehq/levee/pkg/mtls"
)

// devIdentity is one certificate of the development set.
type devIdentity struct {
	name string
	// dns are the names its servers answer to (the compose services).
	dns            []string
	server, client bool
	roles          []string
}

// devIdentities are the certificates `levee certs` makes: one per kind of
// component, naming every replica of the compose fleet, and two for people
// and programs that call the fleet.
var devIdentities = []devIdentity{
	{name: "etcd", dns: []string{"etcd1", "etcd2", "etcd3"}, server: true, client: true},
	{name: "budgetd", dns: []string{"budgetd1", "budgetd2"}, server: true, client: true},
	{name: "verifier", dns: []string{"verifier1", "verifier2", "verifier3"}, server: true, client: true},
	{name: "gateway", dns: []string{"gateway"}, server: true, client: true},
	// The operator: levee settings, the capacity knob.
	{name: "admin", client: true, roles: []string{mtls.RoleAdmin}},
	// A caller of the gateway that presents a certificate (optional there).
	{name: "client", client: true},
}

func certsCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("levee certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "certs", "directory to write ca.crt and NAME.crt / NAME.key into")
	hosts := fs.String("hosts", "", "more DNS names or IP addresses for every server certificate, comma-separated")
	validFor := fs.Duration("valid-for", 90*24*time.Hour, "how long the CA and the certificates are valid")
	force := fs.Bool("force", false, "replace certificates already in -out")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage: levee certs [-out DIR] [-hosts a,b] [-valid-for 2160h] [-force]

Makes a development certificate authority and a certificate for each kind
of component (%s), for mTLS between them in a
development or compose fleet. Every server certificate names localhost,
127.0.0.1, ::1 and its compose services. The admin certificate grants the
admin role (settings writes, the capacity knob). The CA's private key is not
kept: run again (-force) to reissue the set. For production, issue the same
names and roles from your own PKI.

`, strings.Join(names(), ", "))
		fs.PrintDefaults()
	}
	if err := flagenv.Parse(fs, args, nil); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("levee certs: unexpected arguments %q", fs.Args())
	}
	var extraDNS []string
	var extraIPs []net.IP
	for _, h := range strings.Split(*hosts, ",") {
		switch h = strings.TrimSpace(h); {
		case h == "":
		case net.ParseIP(h) != nil:
			extraIPs = append(extraIPs, net.ParseIP(h))
		default:
			extraDNS = append(extraDNS, h)
		}
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("levee certs: %w", err)
	}
	if !*force {
		for _, n := range append(names(), "ca") {
			if _, err := os.Stat(filepath.Join(*out, n+".crt")); err == nil {
				return fmt.Errorf("levee certs: %s already holds %s.crt (-force replaces the whole set)", *out, n)
			}
		}
	}
	now := time.Now()
	ca, err := mtls.NewCA("Levee development CA", *validFor, now)
	if err != nil {
		return err
	}
	for _, id := range devIdentities {
		leaf := mtls.Leaf{Name: id.name, Server: id.server, Client: id.client, Roles: id.roles, ValidFor: *validFor}
		if id.server {
			leaf.DNS = slices.Concat([]string{"localhost"}, id.dns, extraDNS)
			leaf.IPs = slices.Concat([]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, extraIPs)
		}
		if _, err := ca.WriteFiles(*out, id.name, leaf, now); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "levee certs: wrote ca.crt and %s.{crt,key} to %s (valid until %s)\n",
		strings.Join(names(), ", "), *out, now.Add(*validFor).UTC().Format(time.DateOnly))
	return nil
}

func names() []string {
	var n []string
	for _, id := range devIdentities {
		n = append(n, id.name)
	}
	return n
}
