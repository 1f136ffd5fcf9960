package tlsutil

import (
	"crypto/elliptic"
	"crypto/x509"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

func TestGenerateCA(t *testing.T) {
	for _, tc := range []struct {
		name        string
		opts        CAOptions
		wantErr     string
		wantDays    int
		constraints []string
	}{
		{name: "defaults", opts: CAOptions{Now: now}, wantDays: 5 * 365},
		{name: "days and domain", opts: CAOptions{Now: now, Days: 10, Domain: "corp.example"}, wantDays: 10},
		{name: "name constraint", opts: CAOptions{Now: now, NameConstraint: true}, wantDays: 5 * 365, constraints: []string{"trellis", "localhost"}},
		{name: "additional constraint", opts: CAOptions{Now: now, NameConstraint: true, AdditionalConstraints: []string{"example.com"}},
			wantDays: 5 * 365, constraints: []string{"trellis", "localhost", "example.com"}},
		{name: "negative days", opts: CAOptions{Now: now, Days: -1}, wantErr: "days: -1 is not a positive number of days"},
		{name: "bad domain", opts: CAOptions{Now: now, Domain: "Trellis"}, wantErr: `domain: "Trellis" is not a domain`},
		{name: "bad constraint", opts: CAOptions{Now: now, NameConstraint: true, AdditionalConstraints: []string{"a..b"}}, wantErr: "additional name constraint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, err := GenerateCA(tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := ca.Cert
			if !c.IsCA || !c.BasicConstraintsValid {
				t.Error("not a CA")
			}
			if c.KeyUsage&x509.KeyUsageCertSign == 0 || c.KeyUsage&x509.KeyUsageCRLSign == 0 {
				t.Errorf("key usage %v lacks cert sign or CRL sign", c.KeyUsage)
			}
			if err := c.CheckSignatureFrom(c); err != nil {
				t.Errorf("not self-signed: %v", err)
			}
			if got := c.NotAfter.Sub(now); got != time.Duration(tc.wantDays)*24*time.Hour {
				t.Errorf("lives %v, want %d days", got, tc.wantDays)
			}
			if !c.NotBefore.Before(now) {
				t.Errorf("valid from %v, not before now", c.NotBefore)
			}
			if ca.Key.Curve != elliptic.P256() {
				t.Errorf("curve %v", ca.Key.Curve.Params().Name)
			}
			if !slices.Equal(c.PermittedDNSDomains, tc.constraints) || c.PermittedDNSDomainsCritical != (tc.constraints != nil) {
				t.Errorf("constraints %v critical %v, want %v", c.PermittedDNSDomains, c.PermittedDNSDomainsCritical, tc.constraints)
			}
			// It reads back from its own PEM.
			if _, err := ParseCA(ca.CertPEM, ca.KeyPEM); err != nil {
				t.Errorf("ParseCA: %v", err)
			}
		})
	}
}

func TestGenerateCert(t *testing.T) {
	ca := mustCA(t, CAOptions{Now: now})
	constrained := mustCA(t, CAOptions{Now: now, NameConstraint: true})
	short := mustCA(t, CAOptions{Now: now, Days: 30})
	serverEKU := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	clientEKU := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	for _, tc := range []struct {
		name     string
		ca       *KeyPair
		opts     CertOptions
		wantErr  string
		wantCN   string
		wantDNS  []string
		wantIPs  []string
		wantEKU  []x509.ExtKeyUsage
		wantDays int
	}{
		{name: "server", ca: ca, opts: CertOptions{Kind: KindServer, Now: now},
			wantCN: "server.dc1.trellis", wantDNS: []string{"server.dc1.trellis", "localhost"}, wantIPs: []string{"127.0.0.1"}, wantEKU: serverEKU, wantDays: 365},
		{name: "server with extra names", ca: ca,
			opts:   CertOptions{Kind: KindServer, Datacenter: "eu1", Days: 90, DNSNames: []string{"trellis.example.com", "localhost"}, IPs: []net.IP{net.ParseIP("10.0.0.5")}, Now: now},
			wantCN: "server.eu1.trellis", wantDNS: []string{"server.eu1.trellis", "localhost", "trellis.example.com"}, wantIPs: []string{"127.0.0.1", "10.0.0.5"}, wantEKU: serverEKU, wantDays: 90},
		{name: "client", ca: ca, opts: CertOptions{Kind: KindClient, Now: now},
			wantCN: "client.dc1.trellis", wantDNS: []string{"client.dc1.trellis"}, wantEKU: clientEKU, wantDays: 365},
		{name: "client of another domain", ca: ca, opts: CertOptions{Kind: KindClient, Domain: "corp", Now: now},
			wantCN: "client.dc1.corp", wantDNS: []string{"client.dc1.corp"}, wantEKU: clientEKU, wantDays: 365},
		{name: "constrained CA signs its own names", ca: constrained, opts: CertOptions{Kind: KindServer, Now: now},
			wantCN: "server.dc1.trellis", wantDNS: []string{"server.dc1.trellis", "localhost"}, wantIPs: []string{"127.0.0.1"}, wantEKU: serverEKU, wantDays: 365},
		{name: "constrained CA refuses another name", ca: constrained, opts: CertOptions{Kind: KindServer, DNSNames: []string{"example.com"}, Now: now},
			wantErr: "the CA cannot sign this certificate"},
		{name: "outlives the CA", ca: short, opts: CertOptions{Kind: KindServer, Now: now},
			wantErr: "days: 365 days outlives the CA, which expires on 2030-07-01; give at most 30"},
		{name: "no kind", ca: ca, opts: CertOptions{Now: now}, wantErr: "kind: Kind(0) is neither server, client nor control"},
		{name: "bad datacenter", ca: ca, opts: CertOptions{Kind: KindServer, Datacenter: "dc_1", Now: now}, wantErr: `datacenter: "dc_1" is not a datacenter name`},
		{name: "bad DNS name", ca: ca, opts: CertOptions{Kind: KindServer, DNSNames: []string{"-x.example"}, Now: now}, wantErr: `additional DNS name: "-x.example" is not a DNS name`},
		{name: "no CA", opts: CertOptions{Kind: KindServer, Now: now}, wantErr: "ca: no CA certificate and key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kp, err := GenerateCert(tc.ca, tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := kp.Cert
			if c.IsCA {
				t.Error("a leaf is a CA")
			}
			if c.Subject.CommonName != tc.wantCN {
				t.Errorf("CN %q, want %q", c.Subject.CommonName, tc.wantCN)
			}
			if !slices.Equal(c.DNSNames, tc.wantDNS) {
				t.Errorf("DNS names %v, want %v", c.DNSNames, tc.wantDNS)
			}
			var ips []string
			for _, ip := range c.IPAddresses {
				ips = append(ips, ip.String())
			}
			if !slices.Equal(ips, tc.wantIPs) {
				t.Errorf("IPs %v, want %v", ips, tc.wantIPs)
			}
			if !slices.Equal(c.ExtKeyUsage, tc.wantEKU) {
				t.Errorf("extended key usage %v, want %v", c.ExtKeyUsage, tc.wantEKU)
			}
			if c.KeyUsage != x509.KeyUsageDigitalSignature {
				t.Errorf("key usage %v, want digital signature alone", c.KeyUsage)
			}
			if got := c.NotAfter.Sub(now); got != time.Duration(tc.wantDays)*24*time.Hour {
				t.Errorf("lives %v, want %d days", got, tc.wantDays)
			}
			roots := x509.NewCertPool()
			roots.AddCert(tc.ca.Cert)
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: tc.wantEKU, DNSName: tc.wantCN}); err != nil {
				t.Errorf("does not chain to its CA: %v", err)
			}
			// Not to another CA.
			other := x509.NewCertPool()
			other.AddCert(mustCA(t, CAOptions{Now: now}).Cert)
			if _, err := c.Verify(x509.VerifyOptions{Roots: other, CurrentTime: now, KeyUsages: tc.wantEKU}); err == nil {
				t.Error("chains to another CA")
			}
		})
	}
}

func TestSerialsAreRandomAndPositive(t *testing.T) {
	ca := mustCA(t, CAOptions{Now: now})
	seen := map[string]bool{ca.Cert.SerialNumber.String(): true}
	for range 20 {
		kp, err := GenerateCert(ca, CertOptions{Kind: KindClient, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		s := kp.Cert.SerialNumber
		if s.Sign() <= 0 || seen[s.String()] {
			t.Fatalf("serial %v is not positive or repeats", s)
		}
		seen[s.String()] = true
	}
}

func TestParseCARefusesAMismatchedKey(t *testing.T) {
	a, b := mustCA(t, CAOptions{Now: now}), mustCA(t, CAOptions{Now: now})
	if _, err := ParseCA(a.CertPEM, b.KeyPEM); err == nil || !strings.Contains(err.Error(), "CA key: it does not match the CA certificate") {
		t.Fatalf("err %v", err)
	}
	leaf, err := GenerateCert(a, CertOptions{Kind: KindServer, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCA(leaf.CertPEM, leaf.KeyPEM); err == nil || !strings.Contains(err.Error(), "is not a CA certificate") {
		t.Fatalf("err %v", err)
	}
	if _, err := ParseCA([]byte("junk"), a.KeyPEM); err == nil || !strings.Contains(err.Error(), "CA certificate: no PEM CERTIFICATE block") {
		t.Fatalf("err %v", err)
	}
}

func TestNewDevBundle(t *testing.T) {
	b, err := NewDevBundle("", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewFromBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Certificate().DNSNames; !slices.Contains(got, "server.dc1.trellis") {
		t.Fatalf("dev server names %v", got)
	}
	if !slices.Equal(b.Client.Cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Fatalf("dev client usage %v", b.Client.Cert.ExtKeyUsage)
	}
	if err := c.Reload(); err != nil {
		t.Fatalf("reloading in-memory material: %v", err)
	}
}

func TestNextCertFileNames(t *testing.T) {
	for _, tc := range []struct {
		name               string
		existing           []string
		kind               Kind
		wantCert, wantKeyF string
	}{
		{"empty dir", nil, KindServer, "dc1-server-trellis-0.pem", "dc1-server-trellis-0-key.pem"},
		{"next number", []string{"dc1-server-trellis-0.pem", "dc1-server-trellis-0-key.pem", "dc1-server-trellis-1.pem"}, KindServer,
			"dc1-server-trellis-2.pem", "dc1-server-trellis-2-key.pem"},
		{"a lone key takes its number too", []string{"dc1-client-trellis-0-key.pem"}, KindClient, "dc1-client-trellis-1.pem", "dc1-client-trellis-1-key.pem"},
		{"a gap is filled", []string{"dc1-client-trellis-1.pem", "dc1-client-trellis-1-key.pem"}, KindClient, "dc1-client-trellis-0.pem", "dc1-client-trellis-0-key.pem"},
		{"servers and clients count apart", []string{"dc1-server-trellis-0.pem"}, KindClient, "dc1-client-trellis-0.pem", "dc1-client-trellis-0-key.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert, key := NextCertFileNames("dc1", tc.kind, "trellis", func(n string) bool { return slices.Contains(tc.existing, n) })
			if cert != tc.wantCert || key != tc.wantKeyF {
				t.Fatalf("got %s %s, want %s %s", cert, key, tc.wantCert, tc.wantKeyF)
			}
		})
	}
}

func TestCheckNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(string) error
		in   string
		ok   bool
	}{
		{"dc", CheckDatacenter, "dc1", true},
		{"dc with hyphen", CheckDatacenter, "us-east-1", true},
		{"dc with dot", CheckDatacenter, "dc.1", false},
		{"dc upper case", CheckDatacenter, "DC1", false},
		{"dc empty", CheckDatacenter, "", false},
		{"dc trailing hyphen", CheckDatacenter, "dc-", false},
		{"domain", CheckDomain, "trellis", true},
		{"domain dotted", CheckDomain, "mesh.corp.example", true},
		{"domain trailing dot", CheckDomain, "trellis.", false},
		{"dns wildcard", CheckDNSName, "*.corp.example", true},
		{"dns inner wildcard", CheckDNSName, "a.*.example", false},
		{"dns too long label", CheckDNSName, strings.Repeat("a", 64), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.fn(tc.in); (err == nil) != tc.ok {
				t.Fatalf("%q: err %v, want ok=%v", tc.in, err, tc.ok)
			}
		})
	}
}

func mustCA(t *testing.T, opts CAOptions) *KeyPair {
	t.Helper()
	ca, err := GenerateCA(opts)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// A control certificate serves and identifies, names control.<dc>.<domain>
// and never a server's name: the server ports refuse it.
func TestGenerateControlCert(t *testing.T) {
	ca, err := GenerateCA(CAOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := GenerateCert(ca, CertOptions{Kind: KindControl, DNSNames: []string{"node-1.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	c := kp.Cert
	if c.Subject.CommonName != "control.dc1.trellis" || !slices.Contains(c.DNSNames, "node-1.example.com") || slices.Contains(c.DNSNames, ServerName("dc1", DefaultDomain)) {
		t.Errorf("names %s %v", c.Subject.CommonName, c.DNSNames)
	}
	if !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(c.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("usages %v", c.ExtKeyUsage)
	}
}
