package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"trellis.dev/trellis/internal/cli"
	"trellis.dev/trellis/internal/tlsutil"
)

func newTLSCmd(e *cli.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Create the cluster's CA and the TLS certificates of its servers and clients",
		Long: `Create the cluster's certificate authority and the certificates, signed by it,
that servers and agents use to authenticate each other. The files are written
to the current directory, for an operator to hand out.`,
		Example: `  trellis tls ca create
  trellis tls cert create -server -dc dc1
  trellis tls cert create -client -dc dc1`,
	}
	ca := &cobra.Command{
		Use:     "ca",
		Short:   "Create the cluster's certificate authority",
		Example: `  trellis tls ca create`,
	}
	ca.AddCommand(newTLSCACreateCmd(e))
	cert := &cobra.Command{
		Use:     "cert",
		Short:   "Create server and client certificates signed by the cluster's CA",
		Example: `  trellis tls cert create -server -dc dc1`,
	}
	cert.AddCommand(newTLSCertCreateCmd(e))
	cmd.AddCommand(ca, cert)
	return cmd
}

func newTLSCACreateCmd(e *cli.Env) *cobra.Command {
	var (
		days        int
		domain      string
		constrain   bool
		constraints []string
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a certificate authority for the cluster's TLS",
		Long: `Create a self-signed certificate authority (ECDSA P-256) for the cluster's TLS,
in the current directory:

  trellis-agent-ca.pem      the CA certificate: give it to every server and
                            agent (-tls-ca-file)
  trellis-agent-ca-key.pem  the CA's private key: it signs every certificate;
                            keep it off the servers, where you create them

Existing files are never overwritten. With -name-constraint the CA can sign
only names under -domain, localhost and each -additional-name-constraint, so
that its key, if stolen, cannot mint a certificate for any other site.`,
		Example: `  trellis tls ca create
  trellis tls ca create -days 3650 -name-constraint
  trellis tls ca create -domain mesh -name-constraint -additional-name-constraint example.com`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if days <= 0 {
				return cli.Usage(fmt.Errorf("-days: %d is not a positive number of days", days))
			}
			if err := tlsutil.CheckDomain(domain); err != nil {
				return cli.Usage(fmt.Errorf("-domain: %w", err))
			}
			if len(constraints) > 0 && !constrain {
				return cli.Usage(errors.New("-additional-name-constraint: give -name-constraint too"))
			}
			for _, c := range constraints {
				if err := tlsutil.CheckDNSName(c); err != nil {
					return cli.Usage(fmt.Errorf("-additional-name-constraint: %w", err))
				}
			}
			certFile, keyFile := tlsutil.CAFileNames(domain)
			if err := refuseExisting(certFile, keyFile); err != nil {
				return err
			}
			ca, err := tlsutil.GenerateCA(tlsutil.CAOptions{Domain: domain, Days: days, NameConstraint: constrain,
				AdditionalConstraints: constraints, Now: e.Now()})
			if err != nil {
				return err
			}
			if err := writeNew([]newFile{{certFile, ca.CertPEM, 0o644}, {keyFile, ca.KeyPEM, 0o600}}); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "wrote %s\tthe CA certificate, valid until %s: give it to every server and agent (-tls-ca-file)\n",
				certFile, ca.Cert.NotAfter.UTC().Format(time.DateOnly))
			fmt.Fprintf(tw, "wrote %s\tthe CA's private key: keep it safe; `trellis tls cert create` signs with it\n", keyFile)
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.IntVar(&days, "days", tlsutil.DefaultCADays, "days the CA is valid")
	f.StringVar(&domain, "domain", tlsutil.DefaultDomain, "the cluster's domain, in the file names and in every certificate's names")
	f.BoolVar(&constrain, "name-constraint", false, "limit the names the CA may sign to -domain, localhost and -additional-name-constraint")
	f.StringArrayVar(&constraints, "additional-name-constraint", nil, "another DNS domain the CA may sign names under (repeatable)")
	return cmd
}

func newTLSCertCreateCmd(e *cli.Env) *cobra.Command {
	var (
		server, client, control bool
		dc, domain              string
		days                    int
		caFile, keyArg          string
		dnsNames, ips           []string
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a server or client certificate signed by the cluster's CA",
		Long: `Create a certificate and its private key (ECDSA P-256), signed by the cluster's
CA, in the current directory, with the next free number:

  -server  dc1-server-trellis-0.pem and dc1-server-trellis-0-key.pem: a
           server's -tls-cert-file and -tls-key-file. It names
           server.<dc>.<domain>, which makes it a server's to the other
           servers and to agents, and localhost and 127.0.0.1, so that a
           client on the server's machine verifies it by address. Add the
           names and addresses other clients dial it by with
           -additional-dnsname and -additional-ipaddress.
  -client  dc1-client-trellis-0.pem and dc1-client-trellis-0-key.pem: an
           agent's or a CLI's certificate. It names client.<dc>.<domain>
           and can only identify its holder to a server, never serve as one.
  -control dc1-control-trellis-0.pem and dc1-control-trellis-0-key.pem: an
           agent's -control-tls-cert-file and -control-tls-key-file, which
           serve its TCP control address (-control-addr). It names
           control.<dc>.<domain>, which clients of that address check, and
           never server.<dc>.<domain>: the server ports refuse it.

Create one server certificate for each server: each file holds a private key
that should not leave its server. The CA files are read from the current
directory unless -ca and -key name them.`,
		Example: `  trellis tls cert create -server
  trellis tls cert create -server -dc eu1 -additional-dnsname trellis.example.com -additional-ipaddress 10.0.0.5
  trellis tls cert create -client -days 90
  trellis tls cert create -control -additional-dnsname node-1.example.com
  trellis tls cert create -server -ca /secure/trellis-agent-ca.pem -key /secure/trellis-agent-ca-key.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var kind tlsutil.Kind
			switch {
			case btoi(server)+btoi(client)+btoi(control) > 1:
				return cli.Usage(errors.New("-server, -client and -control: give only one of them"))
			case server:
				kind = tlsutil.KindServer
			case client:
				kind = tlsutil.KindClient
			case control:
				kind = tlsutil.KindControl
			default:
				return cli.Usage(errors.New("give -server, -client or -control: which certificate to create"))
			}
			if err := tlsutil.CheckDatacenter(dc); err != nil {
				return cli.Usage(fmt.Errorf("-dc: %w", err))
			}
			if err := tlsutil.CheckDomain(domain); err != nil {
				return cli.Usage(fmt.Errorf("-domain: %w", err))
			}
			if days <= 0 {
				return cli.Usage(fmt.Errorf("-days: %d is not a positive number of days", days))
			}
			for _, n := range dnsNames {
				if err := tlsutil.CheckDNSName(n); err != nil {
					return cli.Usage(fmt.Errorf("-additional-dnsname: %w", err))
				}
			}
			ipAddrs, err := tlsutil.ParseIPs(ips)
			if err != nil {
				return cli.Usage(fmt.Errorf("-additional-ipaddress: %w", err))
			}

			defCert, defKey := tlsutil.CAFileNames(domain)
			if caFile == "" {
				caFile = defCert
			}
			if keyArg == "" {
				keyArg = defKey
			}
			ca, err := readCA(caFile, keyArg)
			if err != nil {
				return err
			}
			now := e.Now()
			if max := tlsutil.MaxDays(ca.Cert, now); days > max {
				return cli.Usage(fmt.Errorf("-days: %d days outlives the CA of %s, which expires on %s: give at most %d",
					days, caFile, ca.Cert.NotAfter.UTC().Format(time.DateOnly), max))
			}
			kp, err := tlsutil.GenerateCert(ca, tlsutil.CertOptions{Kind: kind, Datacenter: dc, Domain: domain, Days: days,
				DNSNames: dnsNames, IPs: ipAddrs, Now: now})
			if err != nil {
				return err
			}
			certFile, keyFile := tlsutil.NextCertFileNames(dc, kind, domain, fileExists)
			if err := writeNew([]newFile{{certFile, kp.CertPEM, 0o644}, {keyFile, kp.KeyPEM, 0o600}}); err != nil {
				return err
			}
			names := append([]string{}, kp.Cert.DNSNames...)
			for _, ip := range kp.Cert.IPAddresses {
				names = append(names, ip.String())
			}
			tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "signed by %s\n", caFile)
			certFlag, keyFlag, holder := "-tls-cert-file", "-tls-key-file", kind.String()
			if kind == tlsutil.KindControl {
				certFlag, keyFlag, holder = "-control-tls-cert-file", "-control-tls-key-file", "agent"
			}
			fmt.Fprintf(tw, "wrote %s\tthe %s certificate of %s, valid until %s (%s)\n",
				certFile, kind, strings.Join(names, ", "), kp.Cert.NotAfter.UTC().Format(time.DateOnly), certFlag)
			fmt.Fprintf(tw, "wrote %s\tits private key: keep it on that %s only (%s)\n", keyFile, holder, keyFlag)
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.BoolVar(&server, "server", false, "create a server certificate")
	f.BoolVar(&client, "client", false, "create a client certificate (for an agent or the CLI)")
	f.BoolVar(&control, "control", false, "create an agent's control certificate (for trellis agent -control-addr)")
	f.StringVar(&dc, "dc", tlsutil.DefaultDatacenter, "the datacenter the certificate belongs to")
	f.StringVar(&domain, "domain", tlsutil.DefaultDomain, "the cluster's domain, as given to `trellis tls ca create`")
	f.IntVar(&days, "days", tlsutil.DefaultCertDays, "days the certificate is valid")
	f.StringVar(&caFile, "ca", "", "the CA certificate (default <domain>-agent-ca.pem)")
	f.StringVar(&keyArg, "key", "", "the CA's private key (default <domain>-agent-ca-key.pem)")
	f.StringArrayVar(&dnsNames, "additional-dnsname", nil, "another DNS name for the certificate (repeatable)")
	f.StringArrayVar(&ips, "additional-ipaddress", nil, "another IP address for the certificate (repeatable)")
	return cmd
}

// readCA reads the CA files, saying what to do when they are missing.
func readCA(certFile, keyFile string) (*tlsutil.KeyPair, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, caFileError("-ca", certFile, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, caFileError("-key", keyFile, err)
	}
	ca, err := tlsutil.ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("-ca %s, -key %s: %w", certFile, keyFile, err)
	}
	return ca, nil
}

func caFileError(flag, path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s %s: no such file: create the CA first with `trellis tls ca create`, or name its files with -ca and -key", flag, path)
	}
	return fmt.Errorf("%s: %w", flag, err)
}

func fileExists(name string) bool {
	_, err := os.Lstat(name)
	return !errors.Is(err, fs.ErrNotExist)
}

// refuseExisting fails if any of names exists: key material is never
// overwritten.
func refuseExisting(names ...string) error {
	for _, n := range names {
		if fileExists(n) {
			return fmt.Errorf("%s already exists: nothing was written; move it away or run in another directory", n)
		}
	}
	return nil
}

type newFile struct {
	name string
	data []byte
	mode os.FileMode
}

// writeNew creates every file, none of which may exist (O_EXCL closes the
// race with another writer); on any failure it removes those it wrote, so
// that no half of a certificate and key pair is left.
func writeNew(files []newFile) error {
	if err := refuseExisting(func() []string {
		var names []string
		for _, f := range files {
			names = append(names, f.name)
		}
		return names
	}()...); err != nil {
		return err
	}
	var written []string
	for _, f := range files {
		if err := writeExcl(f); err != nil {
			for _, w := range written {
				os.Remove(w)
			}
			return err
		}
		written = append(written, f.name)
	}
	return nil
}

func writeExcl(f newFile) error {
	out, err := os.OpenFile(f.name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
	if err != nil {
		return err
	}
	_, err = out.Write(f.data)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.name)
	}
	return err
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
