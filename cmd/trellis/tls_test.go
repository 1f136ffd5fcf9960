package main

import (
	"crypto/x509"
	"os"
	"slices"
	"strings"
	"testing"

	"trellis.dev/trellis/internal/tlsutil"
)

// dirFiles lists the names in the current directory.
func dirFiles(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestTLSCACreate(t *testing.T) {
	t.Chdir(t.TempDir())
	out := mustRun(t, "", "tls", "ca", "create", "-days", "30", "-name-constraint")
	if !strings.Contains(out, "wrote trellis-agent-ca.pem ") || !strings.Contains(out, "wrote trellis-agent-ca-key.pem ") {
		t.Fatalf("output:\n%s", out)
	}
	certPEM, _ := os.ReadFile("trellis-agent-ca.pem")
	keyPEM, _ := os.ReadFile("trellis-agent-ca-key.pem")
	ca, err := tlsutil.ParseCA(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ca.Cert.PermittedDNSDomains, []string{"trellis", "localhost"}) {
		t.Errorf("name constraints %v", ca.Cert.PermittedDNSDomains)
	}
	if days := ca.Cert.NotAfter.Sub(ca.Cert.NotBefore).Hours() / 24; days < 30 || days > 30.01 {
		t.Errorf("valid for %.2f days, want 30", days)
	}
	if st, _ := os.Stat("trellis-agent-ca-key.pem"); st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v, want 0600", st.Mode().Perm())
	}

	// A second CA is refused and the first is left as it was.
	code, _, errOut := run(t, "", nil, "tls", "ca", "create")
	if code != 1 || !strings.Contains(errOut, "trellis-agent-ca.pem already exists: nothing was written") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if again, _ := os.ReadFile("trellis-agent-ca-key.pem"); string(again) != string(keyPEM) {
		t.Fatal("the CA key was overwritten")
	}

	// Another domain writes other files.
	mustRun(t, "", "tls", "ca", "create", "-domain", "mesh")
	if got := dirFiles(t); !slices.Equal(got, []string{"mesh-agent-ca-key.pem", "mesh-agent-ca.pem", "trellis-agent-ca-key.pem", "trellis-agent-ca.pem"}) {
		t.Fatalf("files %v", got)
	}
}

func TestTLSCACreateRefusesBadFlags(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"zero days", []string{"-days", "0"}, "-days: 0 is not a positive number of days"},
		{"bad domain", []string{"-domain", "my_domain"}, `-domain: "my_domain" is not a domain`},
		{"constraint without -name-constraint", []string{"-additional-name-constraint", "example.com"}, "-additional-name-constraint: give -name-constraint too"},
		{"bad constraint", []string{"-name-constraint", "-additional-name-constraint", "a..b"}, `-additional-name-constraint: "a..b" is not a DNS name`},
		{"an argument", []string{"ca.pem"}, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run(t, "", nil, append([]string{"tls", "ca", "create"}, tc.args...)...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errOut, tc.want)
			}
			if got := dirFiles(t); len(got) != 0 {
				t.Fatalf("wrote %v", got)
			}
		})
	}
}

func TestTLSCertCreate(t *testing.T) {
	t.Chdir(t.TempDir())
	mustRun(t, "", "tls", "ca", "create")
	out := mustRun(t, "", "tls", "cert", "create", "-server", "-additional-dnsname", "trellis.example.com", "-additional-ipaddress", "10.0.0.5")
	if !strings.Contains(out, "wrote dc1-server-trellis-0.pem ") || !strings.Contains(out, "server.dc1.trellis, localhost, trellis.example.com, 127.0.0.1, 10.0.0.5") {
		t.Fatalf("output:\n%s", out)
	}
	mustRun(t, "", "tls", "cert", "create", "-server")
	mustRun(t, "", "tls", "cert", "create", "-client", "-days", "90")
	mustRun(t, "", "tls", "cert", "create", "-server", "-dc", "eu1")
	want := []string{
		"dc1-client-trellis-0-key.pem", "dc1-client-trellis-0.pem",
		"dc1-server-trellis-0-key.pem", "dc1-server-trellis-0.pem", "dc1-server-trellis-1-key.pem", "dc1-server-trellis-1.pem",
		"eu1-server-trellis-0-key.pem", "eu1-server-trellis-0.pem",
		"trellis-agent-ca-key.pem", "trellis-agent-ca.pem",
	}
	if got := dirFiles(t); !slices.Equal(got, want) {
		t.Fatalf("files %v\nwant %v", got, want)
	}

	// What was written is what a server and an agent load.
	for _, tc := range []struct {
		cert, key string
		server    bool
		dc        string
	}{
		{"dc1-server-trellis-0.pem", "dc1-server-trellis-0-key.pem", true, "dc1"},
		{"dc1-server-trellis-1.pem", "dc1-server-trellis-1-key.pem", true, "dc1"},
		{"eu1-server-trellis-0.pem", "eu1-server-trellis-0-key.pem", true, "eu1"},
		{"dc1-client-trellis-0.pem", "dc1-client-trellis-0-key.pem", false, "dc1"},
	} {
		c, err := tlsutil.New(tlsutil.Config{CAFile: "trellis-agent-ca.pem", CertFile: tc.cert, KeyFile: tc.key, Server: tc.server, Datacenter: tc.dc})
		if err != nil {
			t.Fatalf("%s: %v", tc.cert, err)
		}
		if tc.cert == "dc1-server-trellis-0.pem" && !slices.Contains(c.Certificate().DNSNames, "trellis.example.com") {
			t.Errorf("%s names %v", tc.cert, c.Certificate().DNSNames)
		}
		if tc.cert == "dc1-client-trellis-0.pem" && !slices.Equal(c.Certificate().ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
			t.Errorf("client usage %v", c.Certificate().ExtKeyUsage)
		}
	}
	// A client certificate is refused as a server's.
	if _, err := tlsutil.New(tlsutil.Config{CAFile: "trellis-agent-ca.pem", CertFile: "dc1-client-trellis-0.pem", KeyFile: "dc1-client-trellis-0-key.pem", Server: true}); err == nil {
		t.Fatal("a client certificate loaded as a server's")
	}

	// The CA elsewhere, named by -ca and -key.
	if err := os.Mkdir("out", 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir("out")
	mustRun(t, "", "tls", "cert", "create", "-client", "-ca", "../trellis-agent-ca.pem", "-key", "../trellis-agent-ca-key.pem")
	if got := dirFiles(t); !slices.Equal(got, []string{"dc1-client-trellis-0-key.pem", "dc1-client-trellis-0.pem"}) {
		t.Fatalf("files %v", got)
	}
}

func TestTLSCertCreateRefusals(t *testing.T) {
	t.Chdir(t.TempDir())
	mustRun(t, "", "tls", "ca", "create", "-days", "100")
	mustRun(t, "", "tls", "ca", "create", "-domain", "constrained", "-name-constraint")
	before := dirFiles(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"neither", nil, 2, "give -server, -client or -control"},
		{"both", []string{"-server", "-client"}, 2, "-server, -client and -control: give only one of them"},
		{"bad dc", []string{"-server", "-dc", "dc_1"}, 2, `-dc: "dc_1" is not a datacenter name`},
		{"bad domain", []string{"-server", "-domain", "-x"}, 2, `-domain: "-x" is not a domain`},
		{"zero days", []string{"-server", "-days", "0"}, 2, "-days: 0 is not a positive number of days"},
		{"outlives the CA", []string{"-server", "-days", "200"}, 2, "-days: 200 days outlives the CA of trellis-agent-ca.pem"},
		{"bad IP", []string{"-server", "-additional-ipaddress", "10.0.0"}, 2, `-additional-ipaddress: "10.0.0" is not an IP address`},
		{"bad DNS name", []string{"-server", "-additional-dnsname", "a b"}, 2, `-additional-dnsname: "a b" is not a DNS name`},
		{"no CA", []string{"-server", "-domain", "other"}, 1, "-ca other-agent-ca.pem: no such file: create the CA first with `trellis tls ca create`"},
		{"the CA key of another CA", []string{"-server", "-key", "constrained-agent-ca-key.pem", "-days", "10"}, 1, "CA key: it does not match the CA certificate"},
		{"a name outside the constraints", []string{"-server", "-domain", "constrained", "-additional-dnsname", "example.com"}, 1, "the CA cannot sign this certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := run(t, "", nil, append([]string{"tls", "cert", "create"}, tc.args...)...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut, tc.code, tc.want)
			}
			if got := dirFiles(t); !slices.Equal(got, before) {
				t.Fatalf("files %v, want %v", got, before)
			}
		})
	}
}
