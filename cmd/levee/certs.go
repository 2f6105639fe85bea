package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/leveehq/levee/internal/flagenv"
	"github.com/leveehq/levee/pkg/callmeta"
	"github.com/leveehq/levee/pkg/mtls"
)

func certsCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("levee certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "certs", "directory to write ca.crt and NAME.crt / NAME.key into")
	hosts := fs.String("hosts", "", "more DNS names or IP addresses for every server certificate, comma-separated")
	validFor := fs.Duration("valid-for", 90*24*time.Hour, "how long the CA and the certificates are valid")
	force := fs.Bool("force", false, "replace certificates already in -out")
	var callers []mtls.Caller
	fs.Func("tenant", "also issue a caller certificate for tenant `NAME[:PRIORITY]` (tenant-NAME.crt; the highest priority it may ask for: critical, interactive (default) or batch); repeatable", func(v string) error {
		name, prio, _ := strings.Cut(v, ":")
		f := callmeta.Facts{Tenant: name}
		if prio != "" {
			p, err := callmeta.ParsePriority(prio)
			if err != nil {
				return err
			}
			f.Priority = p
		}
		if name == "" {
			return errors.New("a tenant needs a name")
		}
		if err := f.Validate(); err != nil {
			return err
		}
		callers = append(callers, mtls.Caller{Tenant: name, Priority: prio})
		return nil
	})
	type export struct{ name, dir string }
	var exports []export
	fs.Func("export", "after making or keeping the set, copy `NAME=DIR`: ca.crt, NAME.crt and NAME.key alone into DIR, for a component that must hold no other key; repeatable", func(v string) error {
		name, dir, ok := strings.Cut(v, "=")
		if !ok || name == "" || dir == "" {
			return errors.New("want NAME=DIR")
		}
		exports = append(exports, export{name, dir})
		return nil
	})
	reuse := fs.Bool("reuse", false, "keep a set already in -out that loads and is valid for another day; make one otherwise (compose's certs service)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage: levee certs [-out DIR] [-hosts a,b] [-valid-for 2160h] [-tenant NAME[:PRIORITY]]... [-force | -reuse]

Makes a development certificate authority and a certificate for each kind
of component (%s), for mTLS between them in a
development or compose fleet. Every server certificate names localhost,
127.0.0.1, ::1 and its compose services. The admin certificate grants the
admin role (settings writes, the capacity knob). The client certificate is a
caller of the gateway (tenant "default", interactive at most), the frontend
certificate a front end that names each call's tenant; -tenant issues more
callers. The CA's private key is not
kept: run again (-force) to reissue the set. For production, issue the same
names and roles from your own PKI.

`, strings.Join(mtls.DevelopmentNames(), ", "))
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
	now := time.Now()
	if *force && *reuse {
		return errors.New("levee certs: -force and -reuse: pick one")
	}
	exportAll := func() error {
		for _, e := range exports {
			if err := mtls.Export(*out, e.name, e.dir); err != nil {
				return fmt.Errorf("levee certs: %w", err)
			}
		}
		if len(exports) > 0 {
			fmt.Fprintf(stdout, "levee certs: exported %d identities, each alone with ca.crt\n", len(exports))
		}
		return nil
	}
	set := mtls.DevelopmentSet{Dir: *out, DNS: extraDNS, IPs: extraIPs, ValidFor: *validFor, Force: *force, Callers: callers}
	if *reuse {
		made, err := mtls.EnsureDevelopmentSet(set, now)
		if err != nil {
			return fmt.Errorf("levee certs: %w", err)
		}
		if !made {
			fmt.Fprintf(stdout, "levee certs: %s holds a usable set; kept\n", *out)
		} else {
			fmt.Fprintf(stdout, "levee certs: %s held no usable development set; made one\n", *out)
		}
		return exportAll()
	}
	if err := mtls.WriteDevelopmentSet(set, now); err != nil {
		if errors.Is(err, mtls.ErrSetExists) {
			return fmt.Errorf("levee certs: %w (-force replaces the whole set)", err)
		}
		return fmt.Errorf("levee certs: %w", err)
	}
	names := mtls.DevelopmentNames()
	for _, c := range callers {
		names = append(names, c.CallerName())
	}
	fmt.Fprintf(stdout, "levee certs: wrote ca.crt and %s.{crt,key} to %s (valid until %s)\n",
		strings.Join(names, ", "), *out, now.Add(*validFor).UTC().Format(time.DateOnly))
	return exportAll()
}
