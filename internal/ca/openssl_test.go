package ca

import (
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestOpenSSLVerifies checks the chains with another X.509 stack than Go's:
// an operator's `openssl verify -CAfile roots.pem` must accept what the CA
// issues, before and after a rotation, with old-only and new-only roots.
// It is skipped where openssl is not installed.
func TestOpenSSLVerifies(t *testing.T) {
	bin, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed")
	}
	a := testRoot(t, DefaultKeyType, 0)
	later := t0.Add(time.Hour)
	bCert, bKey, err := NewRoot(RootOptions{TrustDomain: testTD, KeyType: KeyType{"ec", 384}, Now: later})
	if err != nil {
		t.Fatal(err)
	}
	cross, err := CrossSign(bCert, a, later)
	if err != nil {
		t.Fatal(err)
	}
	b := Signer{Cert: bCert, Key: bKey, Chain: []*x509.Certificate{cross}}
	secKey := freshKey(t, DefaultKeyType)
	inter, err := SignIntermediate(mustCSR(t, csrPEM(t, secKey, []string{"spiffe://" + testTD})), a, DefaultIntermediateTTL, t0)
	if err != nil {
		t.Fatal(err)
	}
	sec := Signer{Cert: inter, Key: secKey, Chain: []*x509.Certificate{inter}}
	dc2 := ServiceID{TrustDomain: testTD, Namespace: "default", Datacenter: "dc2", Service: "api"}
	// Leaves are made by the leaf encoder (leaf.go): one root of each
	// other key type the CA signs with.
	rsa2048 := rootOfKey(t, testKey(t, KeyType{"rsa", 2048}), t0, DefaultRootTTL)
	rsa4096 := rootOfKey(t, testKey(t, KeyType{"rsa", 4096}), t0, DefaultRootTTL)
	agent := AgentID{TrustDomain: testTD, Datacenter: testDC, Instance: "i-0a1b2c"}

	cases := []struct {
		name  string
		s     Signer
		id    Identity
		roots []*x509.Certificate
		ok    bool
	}{
		{"leaf of A, roots {A}", Signer{Cert: a.Cert, Key: a.Key}, webID, []*x509.Certificate{a.Cert}, true},
		{"leaf of B with [crossB], roots {A}", b, webID, []*x509.Certificate{a.Cert}, true},
		{"leaf of B with [crossB], roots {B}", b, webID, []*x509.Certificate{bCert}, true},
		{"leaf of B without crossB, roots {A}", Signer{Cert: bCert, Key: bKey}, webID, []*x509.Certificate{a.Cert}, false},
		{"secondary leaf, roots {A}", sec, dc2, []*x509.Certificate{a.Cert}, true},
		{"agent leaf of A, roots {A}", Signer{Cert: a.Cert, Key: a.Key}, agent, []*x509.Certificate{a.Cert}, true},
		{"leaf of an RSA 2048 root", rsa2048, webID, []*x509.Certificate{rsa2048.Cert}, true},
		{"leaf of an RSA 4096 root", rsa4096, webID, []*x509.Certificate{rsa4096.Cert}, true},
		{"leaf of an RSA root, roots {A}", rsa2048, webID, []*x509.Certificate{a.Cert}, false},
	}
	dir := t.TempDir()
	at := strconv.FormatInt(later.Unix(), 10)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			leaf := leafOf(t, c.s, c.id, later)
			certs := mustCerts(t, leaf)
			prefix := filepath.Join(dir, strconv.Itoa(i))
			write := func(name string, data []byte) string {
				p := prefix + "-" + name
				if err := os.WriteFile(p, data, 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			}
			args := []string{"verify", "-x509_strict", "-attime", at,
				"-CAfile", write("roots.pem", EncodeCerts(c.roots...))}
			if len(certs) > 1 {
				args = append(args, "-untrusted", write("chain.pem", EncodeCerts(certs[1:]...)))
			}
			leafFile := write("leaf.pem", EncodeCerts(certs[0]))
			for _, purpose := range []string{"sslserver", "sslclient"} {
				out, err := exec.Command(bin, append(args, "-purpose", purpose, leafFile)...).CombinedOutput()
				if (err == nil) != c.ok {
					t.Errorf("openssl verify -purpose %s: ok=%v, want %v:\n%s", purpose, err == nil, c.ok, out)
				}
			}
		})
	}
}
